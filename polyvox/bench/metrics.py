"""Metrics of ../shared/BENCHMARKS.md, computed from `RequestRecord`s.

Per request: TTFA, E2E, audio seconds, RTF, underruns and streaming viability, all from a
simulated player. Per group of requests (one mode at one concurrency): percentiles,
throughputs and goodput, as one row of the report (`summarize`).

The player starts at the first non-empty chunk and plays in real time. When the next
chunk arrives after the buffered audio has run out, playback stalls until it arrives:

    play_end = t_0 + d_0;  for each next chunk i:  gap_i = t_i - play_end
        gap_i <= 0   on time (counts towards viability)
        gap_i > 0    late; an underrun if gap_i > 100 ms (vLLM-Omni's threshold)
        play_end = max(play_end, t_i) + d_i

A request is viable when every chunk after the first is on time, i.e. the player never
stalls (so a viable request has no underrun; the converse needs no gap at all).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from polyvox.bench.records import RequestRecord

UNDERRUN_GAP_SECONDS = 0.100  # gaps up to this are not counted as underruns


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0 <= q <= 100) of `values`, None when there are none.

    Linear interpolation between the two nearest ranks, as numpy's default ("linear"):
    with the values sorted as x_0 <= ... <= x_{n-1}, the percentile sits at fractional
    rank r = q / 100 * (n - 1) and is x_lo + (x_hi - x_lo) * (r - lo), lo = floor(r),
    hi = min(lo + 1, n - 1). So p0 is the minimum, p100 the maximum, p50 the median.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be between 0 and 100, got {q}")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = q / 100 * (len(ordered) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


@dataclass(frozen=True)
class RequestMetrics:
    """What one request measured. Times in seconds; None where undefined (no audio, or
    the stream never finished)."""

    ttfa: float | None  # sent -> first non-empty chunk
    e2e: float | None  # sent -> last non-empty chunk
    audio_seconds: float
    rtf: float | None  # (finished - sent) / audio_seconds
    underruns: int
    underrun_seconds: float  # total length of the counted gaps
    num_checked_chunks: int  # non-empty chunks after the first
    num_on_time_chunks: int
    is_ok: bool  # finished without an error

    @property
    def chunk_viability(self) -> float:
        """Fraction of chunks (after the first) that arrived before the player ran dry."""
        if self.num_checked_chunks == 0:
            return 1.0
        return self.num_on_time_chunks / self.num_checked_chunks

    @property
    def is_viable(self) -> bool:
        """Finished without error, with audio, and never stalled the player."""
        return (self.is_ok and self.ttfa is not None
                and self.num_on_time_chunks == self.num_checked_chunks)


def request_metrics(record: RequestRecord,
                    gap_threshold: float = UNDERRUN_GAP_SECONDS) -> RequestMetrics:
    """Per-request metrics of one record (see the module docstring for the player)."""
    chunks = sorted(
        (time, samples / record.sample_rate)
        for time, samples in zip(record.chunk_times, record.chunk_samples)
        if samples > 0
    )  # (arrival, duration) of each non-empty chunk, in arrival order
    audio_seconds = sum(duration for _, duration in chunks)
    is_ok = record.is_ok
    rtf = None
    if is_ok and audio_seconds > 0:
        assert record.finished is not None
        rtf = (record.finished - record.sent) / audio_seconds
    if not chunks:
        return RequestMetrics(None, None, 0.0, rtf, 0, 0.0, 0, 0, is_ok)

    first_time, first_duration = chunks[0]
    play_end = first_time + first_duration
    underruns, underrun_seconds, on_time = 0, 0.0, 0
    for time, duration in chunks[1:]:
        gap = time - play_end
        if gap <= 0:
            on_time += 1
        elif gap > gap_threshold:
            underruns += 1
            underrun_seconds += gap
        play_end = max(play_end, time) + duration
    return RequestMetrics(
        ttfa=first_time - record.sent,
        e2e=chunks[-1][0] - record.sent,
        audio_seconds=audio_seconds,
        rtf=rtf,
        underruns=underruns,
        underrun_seconds=underrun_seconds,
        num_checked_chunks=len(chunks) - 1,
        num_on_time_chunks=on_time,
        is_ok=is_ok,
    )


@dataclass(frozen=True)
class ModelCost:
    """What a row's work cost, for its efficiency: the precision its matmuls ran in, the
    model's GFLOP per second of audio (None when not counted, e.g. Piper) and the matmul
    ceiling measured in this run **in that precision** (ceilings.MachineCeilings)."""

    precision: str
    gflop_per_audio_second: float | None
    ceiling_gflops: float | None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def summarize(
    records: Sequence[RequestRecord],
    wall_seconds: float,
    mode: str,
    concurrency: int,
    ttfa_slo_ms: float,
    cost: ModelCost | None = None,
) -> dict[str, Any]:
    """One report row for a group of requests run in `wall_seconds`.

    Latency percentiles and RTF cover requests that finished without error; audio
    throughput counts all audio received; viability is the fraction of all requests that
    are viable (a failed request is not). Goodput counts finished requests with TTFA <=
    `ttfa_slo_ms` and no underrun, per wall second.

    With a `cost`, the row names its `precision`; with the model's GFLOP per audio second
    it holds the achieved `model_gflops_per_s` (audio throughput x that) and, with the
    ceiling, `ceiling_gflops` and `efficiency` = achieved / ceiling, both in the row's
    precision (../shared/BENCHMARKS.md: a bf16 run is divided by the bf16 ceiling).

    Requests a server refused (429/503, `RequestRecord.is_rejected`) started no stream:
    they count in `requests` and, for records from a server, in `rejected` and in how
    fast the refusals came (`refusal_p50_ms`, `refusal_p99_ms`: sent to answered), but in
    no other figure (so they are neither errors nor non-viable streams).
    """
    if wall_seconds <= 0:
        raise ValueError(f"wall_seconds must be > 0, got {wall_seconds}")
    accepted = [record for record in records if not record.is_rejected]
    measured = [request_metrics(record) for record in accepted]
    ok = [m for m in measured if m.is_ok]
    ttfas = [m.ttfa for m in ok if m.ttfa is not None]
    e2es = [m.e2e for m in ok if m.e2e is not None]
    rtfs = [m.rtf for m in ok if m.rtf is not None]
    audio_seconds = sum(m.audio_seconds for m in measured)
    checked = sum(m.num_checked_chunks for m in measured)
    on_time = sum(m.num_on_time_chunks for m in measured)
    meets_slo = [m for m in ok if m.ttfa is not None and m.ttfa * 1000 <= ttfa_slo_ms
                 and m.underruns == 0]
    rtf_p50 = percentile(rtfs, 50)
    row: dict[str, Any] = {
        "mode": mode,
        "concurrency": concurrency,
        "requests": len(records),
        "errors": len(measured) - len(ok),
        "ttfa_p50_ms": _ms(percentile(ttfas, 50)),
        "ttfa_p90_ms": _ms(percentile(ttfas, 90)),
        "ttfa_p99_ms": _ms(percentile(ttfas, 99)),
        "e2e_p50_ms": _ms(percentile(e2es, 50)),
        "e2e_p90_ms": _ms(percentile(e2es, 90)),
        "e2e_p99_ms": _ms(percentile(e2es, 99)),
        "rtf_p50": rtf_p50,
        "rtf_p90": percentile(rtfs, 90),
        "x_realtime_p50": None if not rtf_p50 else 1 / rtf_p50,
        "audio_seconds": audio_seconds,
        "wall_seconds": wall_seconds,
        "audio_throughput": audio_seconds / wall_seconds,
        "request_throughput": len(ok) / wall_seconds,
        "underruns": sum(m.underruns for m in measured),
        "underrun_seconds": sum(m.underrun_seconds for m in measured),
        "viability": sum(m.is_viable for m in measured) / len(measured) if measured else None,
        "chunk_viability": on_time / checked if checked else None,
        "goodput": len(meets_slo) / wall_seconds,
        "ttfa_slo_ms": ttfa_slo_ms,
    }
    if any(record.status is not None for record in records):  # answered by a server
        row["rejected"] = len(records) - len(accepted)
        refusal_ms = [1000 * (record.finished - record.sent) for record in records
                      if record.is_rejected and record.finished is not None]
        row["refusal_p50_ms"] = percentile(refusal_ms, 50)
        row["refusal_p99_ms"] = percentile(refusal_ms, 99)
    if cost is not None:
        row["precision"] = cost.precision
        if cost.gflop_per_audio_second is not None:
            achieved = row["audio_throughput"] * cost.gflop_per_audio_second  # GFLOP/s
            row["model_gflop_per_audio_second"] = cost.gflop_per_audio_second
            row["model_gflops_per_s"] = achieved
            if cost.ceiling_gflops:
                row["ceiling_gflops"] = cost.ceiling_gflops
                row["efficiency"] = achieved / cost.ceiling_gflops
    return row


def ttfas_ms(records: Iterable[RequestRecord]) -> list[float]:
    """TTFA of every request that produced audio, in ms (for CDF plots)."""
    values = (request_metrics(record).ttfa for record in records)
    return [ttfa * 1000 for ttfa in values if ttfa is not None]
