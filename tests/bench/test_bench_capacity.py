"""The real-time capacity search (bench/capacity.py) on simulated models whose capacity is
known exactly: c=1 probed, >= 4 requests per client, two passes in a row, every probe
listed, the median over runs."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
from bench_fakes import (
    FIRST_CHUNK_SECONDS,
    NUM_CHUNKS,
    ScheduledRuntime,
    ScheduledServed,
    probe_requests,
    realtime_up_to,
    run_virtual,
    texts,
)

from polyvox.bench.capacity import (
    MIN_REQUESTS_PER_CLIENT,
    CapacityReport,
    capacity_run,
    describe,
    measure_capacity,
)
from polyvox.bench.driver import closed_loop
from polyvox.bench.records import RequestRecord

RATE = 1000


def _served(first_chunk: Callable[[int], float],
            interval: Callable[[int], float]) -> ScheduledServed:
    return ScheduledServed(ScheduledRuntime(first_chunk, interval))


def _search(served: ScheduledServed, runs: int = 1, requests_per_client: int = 1,
            ) -> CapacityReport:
    loop = partial(_closed_loop, served)
    return run_virtual(measure_capacity(loop, runs, requests_per_client))


async def _closed_loop(served: ScheduledServed, concurrency: int,
                       requests: int) -> tuple[list[RequestRecord], float]:
    return await closed_loop(served, texts, concurrency, requests, "capacity")


def _pairs(report: CapacityReport) -> list[tuple[int, int, bool]]:
    return [(p.concurrency, p.attempt, p.passed) for run in report.runs for p in run.probes]


def test_finds_the_capacity_of_a_model_that_keeps_real_time_up_to_6_streams() -> None:
    served = _served(*realtime_up_to(6))
    report = _search(served)
    assert report.capacity == 6
    # c=1 is probed like any other concurrency (twice); a failure is never retried; the
    # search doubles to the first failure (8), then bisects (6 passes twice, 7 fails)
    assert _pairs(report) == [(1, 1, True), (1, 2, True), (2, 1, True), (2, 2, True),
                              (4, 1, True), (4, 2, True), (8, 1, False), (6, 1, True),
                              (6, 2, True), (7, 1, False)]
    [run] = report.runs
    assert run.single_stream_ttfa_ms == pytest.approx(1000 * FIRST_CHUNK_SECONDS)
    for probe in run.probes:  # >= 4 requests per client, even with --requests 1
        assert probe.requests == probe_requests(probe.concurrency)
        assert probe.ttfa_limit_ms == pytest.approx(3 * 1000 * FIRST_CHUNK_SECONDS)
    failed = run.probes[6]
    stalls = probe_requests(8) * (NUM_CHUNKS - 1)  # every chunk after the first is late
    assert (failed.viability, failed.underruns) == (0.0, stalls)
    assert "viable 0%" in failed.why and f"{stalls} underruns" in failed.why
    lone = [r for r in served.runtime.request_ids if "-c1-" in r]
    assert len(lone) == 2 * MIN_REQUESTS_PER_CLIENT  # the single-stream TTFA's requests


def test_ttfa_over_3x_single_stream_fails_a_concurrency() -> None:
    def first_chunk(active: int) -> float:  # 4x the lone TTFA from 4 streams on
        return FIRST_CHUNK_SECONDS * (1 if active <= 3 else 4)

    report = _search(_served(first_chunk, realtime_up_to(100)[1]))
    assert report.capacity == 3
    [failed] = [p for p in report.runs[0].probes if p.concurrency == 4]
    assert not failed.passed and failed.viability == 1.0
    assert failed.why.startswith("TTFA p90 200 ms > limit 150 ms (3 x 50)")


def test_more_requests_per_client_when_asked() -> None:
    report = _search(_served(*realtime_up_to(2)), requests_per_client=5)
    assert report.capacity == 2
    assert all(p.requests == probe_requests(p.concurrency, 5) for p in report.runs[0].probes)


def _records(concurrency: int, requests: int, is_on_time: bool) -> list[RequestRecord]:
    """Requests whose second chunk is on time, or 250 ms late (an underrun)."""
    late = 0.0 if is_on_time else 0.5
    return [RequestRecord(f"r{i}", "capacity", concurrency, sent=0.0,
                          chunk_times=[0.05, 0.175 + late], chunk_samples=[250, 250],
                          sample_rate=RATE, finished=0.3 + late)
            for i in range(concurrency * requests)]


class ScriptedLoop:
    """A closed loop whose probes pass or fail as told: `fails(run, concurrency, nth)`,
    nth counting the probes at that concurrency in the run (from 1)."""

    def __init__(self, fails: Callable[[int, int, int], bool]) -> None:
        self.fails = fails
        self.run = 0
        self.calls: list[int] = []
        self.counts: dict[int, int] = {}

    async def __call__(self, concurrency: int, requests: int) -> tuple[list, float]:
        if concurrency == 1 and (not self.calls or self.calls[-1] != 1):
            self.run, self.counts = self.run + 1, {}  # a new search starts at c=1
        self.calls.append(concurrency)
        nth = self.counts[concurrency] = self.counts.get(concurrency, 0) + 1
        is_on_time = not self.fails(self.run, concurrency, nth)
        return _records(concurrency, requests, is_on_time), 1.0


def test_a_concurrency_that_passes_once_then_fails_does_not_count() -> None:
    loop = ScriptedLoop(lambda run, c, nth: c >= 5 or (c == 4 and nth == 2))
    run = run_virtual(capacity_run(loop))
    assert run.capacity == 3  # 4 passed once, then failed: 3 passes twice
    assert [(p.concurrency, p.attempt, p.passed) for p in run.probes] == [
        (1, 1, True), (1, 2, True), (2, 1, True), (2, 2, True), (4, 1, True), (4, 2, False),
        (3, 1, True), (3, 2, True)]


def test_a_lone_stream_that_fails_gives_capacity_0() -> None:
    loop = ScriptedLoop(lambda run, c, nth: c == 1 and nth == 2)
    run = run_virtual(capacity_run(loop))
    assert run.capacity == 0
    assert [(p.concurrency, p.attempt, p.passed) for p in run.probes] == [
        (1, 1, True), (1, 2, False)]
    assert loop.calls == [1, 1]


def test_the_capacity_is_the_median_over_runs_never_the_best() -> None:
    capacities = {1: 6, 2: 2, 3: 4}
    loop = ScriptedLoop(lambda run, c, nth: c > capacities[run])
    report = run_virtual(measure_capacity(loop, runs=3))
    assert [run.capacity for run in report.runs] == [6, 2, 4]
    assert report.capacity == 4
    summary = report.to_json()
    assert summary["capacity"] == 4
    assert [(r["run"], r["capacity"]) for r in summary["capacity_runs"]] == [(1, 6), (2, 2),
                                                                              (3, 4)]
    probes = summary["capacity_probes"]
    assert len(probes) == sum(len(run.probes) for run in report.runs)
    assert {p["run"] for p in probes if p["concurrency"] == 1} == {1, 2, 3}  # each run's c=1
    assert set(probes[0]) >= {"run", "concurrency", "attempt", "passed", "why",
                              "ttfa_p90_ms", "ttfa_limit_ms", "viability", "underruns"}
    assert "median of 3 run(s): 6, 2, 4" in describe(summary)
    even = run_virtual(measure_capacity(ScriptedLoop(
        lambda run, c, nth: c > {1: 6, 2: 2}[run]), runs=2))
    assert even.capacity == 2  # the lower middle: never rounded up towards the best run
    with pytest.raises(ValueError, match="capacity-runs"):
        run_virtual(measure_capacity(loop, runs=0))
