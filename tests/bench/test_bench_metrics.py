"""Metrics on hand-made records with known answers. Times and durations are multiples of
1/16 s so every expected figure is exact in binary floating point."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from polyvox.bench.capacity import search_capacity, verdict
from polyvox.bench.metrics import (
    ModelCost,
    percentile,
    request_metrics,
    summarize,
    ttfas_ms,
)
from polyvox.bench.records import RequestRecord

RATE = 1000  # samples per second: 250 samples = 0.25 s


def smooth() -> RequestRecord:
    """Every chunk arrives while the previous audio still plays."""
    return RequestRecord("smooth", "batched", 2, sent=0.0, chunk_times=[0.5, 0.625, 0.875],
                         chunk_samples=[250, 250, 250], sample_rate=RATE, finished=1.0)


def stalling() -> RequestRecord:
    """An empty chunk first (a header, not audio), then a 62.5 ms gap (late, below the
    100 ms threshold), a 250 ms gap (an underrun), an on-time chunk, an empty last one."""
    return RequestRecord(
        "stalling", "batched", 2, sent=0.0,
        chunk_times=[0.5, 1.0, 1.3125, 1.8125, 2.0, 2.5],
        chunk_samples=[0, 250, 250, 250, 250, 0], sample_rate=RATE, finished=2.5,
    )


def failed() -> RequestRecord:
    return RequestRecord("failed", "batched", 2, sent=0.0, chunk_times=[0.25],
                         chunk_samples=[100], sample_rate=RATE, error="out of memory")


def test_smooth_stream() -> None:
    m = request_metrics(smooth())
    assert (m.ttfa, m.e2e, m.audio_seconds) == (0.5, 0.875, 0.75)
    assert m.rtf == pytest.approx(1.0 / 0.75)
    assert (m.underruns, m.underrun_seconds) == (0, 0.0)
    assert (m.num_on_time_chunks, m.num_checked_chunks) == (2, 2)
    assert m.is_viable and m.chunk_viability == 1.0


def test_underruns_count_only_gaps_over_100_ms() -> None:
    m = request_metrics(stalling())
    assert m.ttfa == 1.0  # the empty first chunk is not audio
    assert m.e2e == 2.0  # nor is the empty last one
    assert m.audio_seconds == 1.0
    assert m.rtf == 2.5  # (finished - sent) / audio
    assert (m.underruns, m.underrun_seconds) == (1, 0.25)
    # the 62.5 ms gap is late (not viable) but not an underrun; the last chunk is on time
    assert (m.num_on_time_chunks, m.num_checked_chunks) == (1, 3)
    assert m.chunk_viability == pytest.approx(1 / 3)
    assert not m.is_viable


@pytest.mark.parametrize(("gap", "underruns"), [(0.09, 0), (0.11, 1)])
def test_underrun_threshold(gap: float, underruns: int) -> None:
    record = RequestRecord("r", "batched", 1, sent=0.0, chunk_times=[0.0, 0.25 + gap],
                           chunk_samples=[250, 250], sample_rate=RATE, finished=1.0)
    m = request_metrics(record)
    assert m.underruns == underruns
    assert m.underrun_seconds == pytest.approx(gap if underruns else 0.0)
    assert not m.is_viable  # late either way


def test_player_resumes_after_a_stall() -> None:
    """After a stall the buffer restarts at the late chunk's arrival: the next chunk is
    measured against that, not against the original schedule."""
    record = RequestRecord("r", "batched", 1, sent=0.0, chunk_times=[0.0, 0.5, 0.625],
                           chunk_samples=[250, 250, 250], sample_rate=RATE, finished=1.0)
    m = request_metrics(record)
    assert (m.underruns, m.underrun_seconds) == (1, 0.25)
    assert (m.num_on_time_chunks, m.num_checked_chunks) == (1, 2)


def test_failed_and_silent_requests() -> None:
    m = request_metrics(failed())
    assert not m.is_ok and not m.is_viable and m.rtf is None
    silent = RequestRecord("s", "batched", 1, sent=0.0, chunk_times=[0.1],
                           chunk_samples=[0], sample_rate=RATE, finished=0.2)
    m = request_metrics(silent)
    assert (m.ttfa, m.e2e, m.rtf, m.audio_seconds) == (None, None, None, 0.0)
    assert not m.is_viable


def test_percentile_matches_numpy_linear() -> None:
    rng = np.random.default_rng(0)
    for size in (1, 2, 5, 17, 100):
        values = rng.exponential(size=size).tolist()
        for q in (0, 10, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0], 90) == pytest.approx(1.9)
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarize() -> None:
    records = [smooth(), stalling(), failed()]
    row = summarize(records, wall_seconds=4.0, mode="batched", concurrency=2, ttfa_slo_ms=600,
                    cost=ModelCost("float32", gflop_per_audio_second=1.0, ceiling_gflops=1.0))
    assert (row["mode"], row["concurrency"], row["requests"], row["errors"]) == ("batched", 2, 3, 1)
    assert row["ttfa_p50_ms"] == pytest.approx(750)  # finished requests: 500 and 1000 ms
    assert row["ttfa_p90_ms"] == pytest.approx(950)
    assert row["ttfa_p99_ms"] == pytest.approx(995)
    assert row["e2e_p50_ms"] == pytest.approx((875 + 2000) / 2)
    assert row["rtf_p50"] == pytest.approx((1 / 0.75 + 2.5) / 2)
    assert row["audio_throughput"] == pytest.approx((0.75 + 1.0 + 0.1) / 4)  # failed one too
    assert row["request_throughput"] == 0.5
    assert (row["underruns"], row["underrun_seconds"]) == (1, 0.25)
    assert row["viability"] == pytest.approx(1 / 3)
    assert row["chunk_viability"] == pytest.approx(3 / 5)
    assert row["goodput"] == 0.25  # only "smooth" meets TTFA <= 600 ms with no underrun
    assert row["efficiency"] == pytest.approx(row["audio_throughput"])
    assert (row["precision"], row["ceiling_gflops"], row["model_gflop_per_audio_second"]) == (
        "float32", 1.0, 1.0)
    # a bfloat16 row is divided by the bfloat16 ceiling it is given, and by nothing else
    lowered = summarize(records, 4.0, "batched", 2, 600, ModelCost("bfloat16", 1.0, 4.0))
    assert lowered["efficiency"] == pytest.approx(row["efficiency"] / 4)
    assert lowered["precision"] == "bfloat16" and "efficiency_model_dtype" not in lowered
    uncounted = summarize(records, 4.0, "batched", 2, 600, ModelCost("float32", None, 1.0))
    assert uncounted["precision"] == "float32" and "efficiency" not in uncounted
    # a looser SLO does not forgive the underrun
    assert summarize(records, 4.0, "batched", 2, ttfa_slo_ms=5000)["goodput"] == 0.25


def test_summarize_of_nothing_has_no_percentiles() -> None:
    row = summarize([failed()], 1.0, "batched", 1, 500)
    assert row["ttfa_p50_ms"] is None and row["rtf_p50"] is None
    assert row["viability"] == 0.0 and row["goodput"] == 0.0


def test_ttfas_ms() -> None:
    assert ttfas_ms([smooth(), stalling(), failed()]) == [500, 1000, 250]


def test_capacity_verdict() -> None:
    def row(c: int, ttfa_p90: float, viability: float, underruns: int = 0) -> dict:
        return {"concurrency": c, "ttfa_p90_ms": ttfa_p90, "viability": viability,
                "errors": 0, "underruns": underruns}

    passing = [c for c, r in [(1, row(1, 120, 1.0)), (4, row(4, 250, 1.0)),
                              (8, row(8, 290, 1.0)), (16, row(16, 280, 0.9, 2)),
                              (32, row(32, 900, 1.0))] if verdict(r, 100.0)[0]]
    assert passing == [1, 4, 8]  # 16 has a stall, 32 is over 3 x 100 ms
    assert verdict(row(16, 280, 0.9, 2), 100.0)[1] == (
        "TTFA p90 280 ms <= limit 300 ms (3 x 100); viable 90%; 2 underruns")
    assert verdict(row(32, 900, 1.0), 100.0)[1].startswith("TTFA p90 900 ms > limit 300 ms")
    assert verdict(row(1, 120, 1.0) | {"rejected": 1}, 100.0)[0] is False  # refused
    assert verdict(row(1, 120, 1.0), None)[0] is False  # no single-stream TTFA


def test_search_capacity_doubles_then_bisects() -> None:
    measured: list[int] = []

    async def passes(concurrency: int) -> bool:
        measured.append(concurrency)
        return concurrency <= 5

    assert asyncio.run(search_capacity(passes)) == 5
    # c=1 is measured too (it used to be assumed); O(log c) runs, none above the first failure
    assert measured == [1, 2, 4, 8, 6, 5]
    measured.clear()
    assert asyncio.run(search_capacity(passes, limit=4)) == 4
    assert measured == [1, 2, 4]
    measured.clear()
    assert asyncio.run(search_capacity(lambda c: passes(c + 5))) == 0  # even 1 fails
    assert measured == [6]
