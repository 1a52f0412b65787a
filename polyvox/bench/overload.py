"""The overload run: more callers than the server can serve in real time, to see what its
admission control does with them.

`num_streams` (typically 3x the real-time capacity) closed-loop clients call for a fixed
time. A client whose request is refused (429/503) waits the server's Retry-After, capped
so that the offered load stays high, and tries again; a client whose request was served,
or failed, calls again at once. The texts are one queue of work in the workload's order:
each call takes the first text not yet spoken nor being asked for, and a refused text goes
back to its place, to be asked for again by the next caller to call. So no text is
skipped and the texts served are the workload's first ones, in order, at any load:
goodput in requests a second compares across load factors like with like (when each
client walked its own slice of the texts, the clients that kept getting turns spoke a
fixed slice, a second longer per request than the whole at 3x). Admission does its job
when the accepted streams stay real-time (no underruns, TTFA near single-stream) while
the excess is refused quickly; it lets too many in when the accepted streams underrun.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter
from typing import Any

from polyvox.bench.metrics import summarize
from polyvox.bench.records import RequestRecord
from polyvox.bench.workloads import Speak, Workload

MAX_RETRY_WAIT_SECONDS = 2.0  # a refused client waits at most this long (else Retry-After)
REPORTED = ("errors", "ttfa_p50_ms", "ttfa_p90_ms", "ttfa_p99_ms", "e2e_p90_ms", "underruns",
            "underrun_seconds", "viability", "audio_throughput", "goodput")


async def run_overload(speak: Speak, texts: Workload, num_streams: int, seconds: float,
                       mode: str = "overload",
                       max_retry_wait: float = MAX_RETRY_WAIT_SECONDS,
                       ) -> tuple[list[RequestRecord], float]:
    """Every attempt's record (refused ones included) and the wall time of the run, from
    the first request to the end of the last stream started within `seconds`."""
    records: list[RequestRecord] = []
    clock = asyncio.get_running_loop().time
    started = clock()
    deadline = started + seconds
    pending: list[int] = []  # refused texts, to be asked for again (lowest first)
    next_number = 0  # the first text nobody has asked for yet
    attempts: Counter[int] = Counter()

    def take() -> int:
        nonlocal next_number
        if pending:
            return heapq.heappop(pending)
        next_number += 1
        return next_number - 1

    async def client() -> None:
        while clock() < deadline:
            number = take()
            retry = attempts[number]
            attempts[number] += 1
            request_id = f"{mode}-{number}" + (f"-retry{retry}" if retry else "")
            record = await speak(texts(number), number, mode, num_streams, request_id)
            records.append(record)
            if record.is_rejected:
                heapq.heappush(pending, number)
            if not record.is_ok:  # refused, or failed: do not hammer the server
                wait = min(record.retry_after or max_retry_wait, max_retry_wait)
                await asyncio.sleep(max(0.0, min(wait, deadline - clock())))

    await asyncio.gather(*(client() for _ in range(num_streams)))
    return records, clock() - started


def overload_report(records: list[RequestRecord], wall_seconds: float, num_streams: int,
                    seconds: float, ttfa_slo_ms: float, mode: str = "overload",
                    ) -> dict[str, Any]:
    """The "overload" section of the JSON: what was offered, what admission did with it
    (accepted, rejected by HTTP status), and the accepted streams' latency and
    real-time-ness. `errors` are accepted requests that failed; a refusal is not one."""
    refused = [record for record in records if record.is_rejected]
    row = summarize(records, wall_seconds, mode, num_streams, ttfa_slo_ms)
    retry_afters = [r.retry_after for r in refused if r.retry_after is not None]
    return {
        "offered_streams": num_streams,
        "seconds": seconds,
        "attempts": len(records),
        "accepted": len(records) - len(refused),
        "rejected": len(refused),
        "rejected_by_status": {str(status): count for status, count in
                               sorted(Counter(r.status for r in refused).items())},
        "retry_after_mean_s": sum(retry_afters) / len(retry_afters) if retry_afters else None,
        "refusal_p50_ms": row.get("refusal_p50_ms"), "refusal_p99_ms": row.get("refusal_p99_ms"),
        **{key: row[key] for key in REPORTED},
        "wall_seconds": wall_seconds,
    }


def describe(report: dict[str, Any]) -> str:
    """The report in two lines, for the terminal."""
    by_status = ", ".join(f"{count} x {status}" for status, count in
                          report["rejected_by_status"].items()) or "none"
    viability = report["viability"]
    return (
        f"overload: {report['offered_streams']} streams offered for {report['seconds']:g} s: "
        f"{report['attempts']} attempts, {report['accepted']} accepted, {report['rejected']} "
        f"rejected ({by_status}, answered in p99 {_ms(report['refusal_p99_ms'])} ms), "
        f"{report['errors']} errors\n"
        f"  accepted streams: TTFA p50/p90 {_ms(report['ttfa_p50_ms'])}/"
        f"{_ms(report['ttfa_p90_ms'])} ms, {report['underruns']} underruns "
        f"({report['underrun_seconds']:.2f} s), "
        f"{'-' if viability is None else f'{100 * viability:.0f}%'} viable, "
        f"{report['audio_throughput']:.2f} audio s/s"
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
