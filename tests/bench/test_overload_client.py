"""The overload run's callers (bench/overload.py) against a simulated server that gives one
turn at a time, on a virtual clock: a refused text is asked for again, and the texts
served are the workload's first ones, whichever callers get the turns and however many
call."""

from __future__ import annotations

import asyncio

from bench_fakes import run_virtual

from polyvox.bench.overload import run_overload
from polyvox.bench.records import RequestRecord


class OneTurnServer:
    """Serves one request at a time, for 1-3 s by its text; refuses the rest with 429."""

    def __init__(self) -> None:
        self.busy = False

    async def speak(self, text: str, seed: int, mode: str, concurrency: int,
                    request_id: str) -> RequestRecord:
        now = asyncio.get_running_loop().time()
        record = RequestRecord(request_id, mode, concurrency, sent=now, sample_rate=1000,
                               text=text)
        if self.busy:
            record.status, record.retry_after, record.finished = 429, 0.4, now
            return record
        self.busy = True
        seconds = 1 + int(text.split()[-1]) % 3
        await asyncio.sleep(seconds)
        self.busy = False
        record.status = 200
        record.chunk_times, record.chunk_samples = [now + 0.1], [1000 * seconds]
        record.finished = now + seconds
        return record


def _number(record: RequestRecord) -> int:
    return int(record.text.split()[-1])


def test_a_refused_text_is_asked_for_again_and_the_texts_served_are_the_first_ones() -> None:
    server = OneTurnServer()
    records, wall = run_virtual(run_overload(server.speak, lambda i: f"text {i}",
                                             num_streams=4, seconds=20.0))
    assert wall >= 20.0
    served = [_number(r) for r in records if r.is_ok]
    refused = [r for r in records if r.is_rejected]
    assert len(served) >= 8 and len(refused) > len(served)  # the server was overloaded
    # Each text's attempts: refused ones (the id counts the retries), then the one served,
    # unless the run ended while it waited.
    attempts: dict[int, list[RequestRecord]] = {}
    for record in records:
        attempts.setdefault(_number(record), []).append(record)
    for number, tries in attempts.items():
        assert [r.request_id for r in tries] == [f"overload-{number}"] + [
            f"overload-{number}-retry{k}" for k in range(1, len(tries))]
        assert not any(r.is_ok for r in tries[:-1])
    unserved = [n for n, tries in attempts.items() if not tries[-1].is_ok]
    assert len(unserved) <= 4  # at most one waiting text per caller at the end
    # No text is skipped: the texts served are 0, 1, 2, ... of the workload but those
    # still waiting, so the same texts are served at any load (like with like).
    assert sorted(served + unserved) == list(range(len(attempts)))
