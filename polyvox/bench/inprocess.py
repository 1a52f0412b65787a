"""The in-process benchmark run: every mode at every concurrency on one served model, the
open loop, the real-time capacity and the pocket-tts baseline, back to back in one
process, and the figures of the JSON computed from them.

What is measured is given by `Engines` (cli.py loads the real model; the tests pass
simulated ones whose timings are known), so the same code computes every figure of a real
run and of a test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from polyvox.bench import comparison
from polyvox.bench.baseline import PRECISION as BASELINE_PRECISION
from polyvox.bench.baseline import Baseline, baseline_run
from polyvox.bench.capacity import CapacityReport, describe_probe, measure_capacity
from polyvox.bench.driver import ServedModel, closed_loop, open_loop
from polyvox.bench.metrics import ModelCost, summarize
from polyvox.bench.records import RequestRecord
from polyvox.bench.workloads import Workload

Row = dict[str, Any]
CAPACITY_MODE = "batched"  # the serving mode: capacity is measured on it
EQUAL_PRECISION_MODE = f"batched-{BASELINE_PRECISION}"  # rows of the extra float32 run


@dataclass(frozen=True)
class BenchPlan:
    """What one run measures (the command line's choices)."""

    modes: tuple[str, ...]
    concurrencies: tuple[int, ...]
    requests_per_client: int = 2
    precision: str = "float32"  # polyvox's (--precision)
    ttfa_slo_ms: float = 500.0
    rate: float | None = None  # open loop: arrivals per second
    duration: float = 30.0
    burstiness: float = 1.0
    seed: int = 0
    baseline: bool = False  # also run pocket-tts' own loop
    # With the baseline and polyvox in another precision: also run polyvox batched in
    # float32, for an equal-precision headline.
    equal_precision: bool = True
    capacity: bool = False
    capacity_runs: int = 1

    def __post_init__(self) -> None:
        if not self.modes or not self.concurrencies:
            raise ValueError("give at least one mode (--modes) and one concurrency "
                             "(--concurrency)")
        if min(self.concurrencies) < 1 or self.requests_per_client < 1:
            raise ValueError("--concurrency values and --requests must be >= 1")
        if self.capacity and CAPACITY_MODE not in self.modes:
            raise ValueError(f"--capacity measures the {CAPACITY_MODE} engine: add "
                             f"{CAPACITY_MODE} to --modes")
        if self.capacity_runs < 1:
            raise ValueError(f"--capacity-runs must be >= 1, got {self.capacity_runs}")

    @property
    def runs_equal_precision(self) -> bool:
        """Whether polyvox also runs in the baseline's precision (batched mode)."""
        return self.baseline and self.equal_precision and self.precision != BASELINE_PRECISION

    @property
    def precisions(self) -> tuple[str, ...]:
        """Every precision a row runs in: the ceilings the run must measure."""
        extra = (BASELINE_PRECISION,) if self.baseline else ()
        return tuple(dict.fromkeys((self.precision, *extra)))


class Engines(Protocol):
    """Where the run gets what it measures."""

    def serve(self, mode: str, precision: str) -> ServedModel:
        """The model in `precision` behind an engine scheduling in `mode` (not started)."""
        ...

    def baseline(self) -> Baseline:
        """pocket-tts on the same config and weights (float32)."""
        ...


@dataclass
class BenchResult:
    rows: list[Row] = field(default_factory=list)
    records: list[RequestRecord] = field(default_factory=list)
    capacity: CapacityReport | None = None


def run_in_process(plan: BenchPlan, engines: Engines, texts: Workload,
                   ceilings: Mapping[str, float], gflop_per_audio_second: float | None,
                   log: Callable[[str], None] = print,
                   loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
                   ) -> BenchResult:
    """Run `plan`. `ceilings` maps each of `plan.precisions` to its matmul ceiling
    (GFLOP/s) measured in this run; each row's efficiency divides by its own precision's.
    `loop_factory` makes the event loop (the tests' has a simulated clock)."""
    missing = [name for name in plan.precisions if name not in ceilings]
    if missing:
        raise ValueError(f"no matmul ceiling measured for {missing}: efficiency needs the "
                         "ceiling in each row's precision")
    result = BenchResult()

    def add(records: list[RequestRecord], wall: float, mode: str, concurrency: int,
            precision: str) -> Row:
        cost = ModelCost(precision, gflop_per_audio_second, ceilings[precision])
        row = summarize(records, wall, mode, concurrency, plan.ttfa_slo_ms, cost)
        result.rows.append(row)
        result.records.extend(records)
        return row

    async def measure(served: ServedModel, mode: str, precision: str) -> None:
        await closed_loop(served, texts, 1, 1, f"warmup-{mode}")
        for concurrency in plan.concurrencies:
            log(f"{mode} ({precision}) c={concurrency} ...")
            add(*await closed_loop(served, texts, concurrency, plan.requests_per_client,
                                   mode), mode, concurrency, precision)
        if plan.rate and mode in plan.modes:  # not for the extra float32 run
            log(f"{mode} open loop at {plan.rate:g}/s for {plan.duration:g} s ...")
            add(*await open_loop(served, texts, plan.rate, plan.duration, mode, plan.seed,
                                 plan.burstiness), mode, 0, precision)["rate"] = plan.rate
        if plan.capacity and mode == CAPACITY_MODE:
            log(f"searching the real-time capacity ({plan.capacity_runs} run(s)) ...")
            result.capacity = await measure_capacity(
                lambda c, n: closed_loop(served, texts, c, n, "capacity"),
                plan.capacity_runs, plan.requests_per_client, plan.ttfa_slo_ms,
                on_probe=lambda probe: log(describe_probe(probe)))

    runs = [(mode, plan.precision, mode) for mode in plan.modes]
    if plan.runs_equal_precision:
        runs.append(("batched", BASELINE_PRECISION, EQUAL_PRECISION_MODE))
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        for schedule, precision, mode in runs:
            served = engines.serve(schedule, precision)
            served.start()
            try:
                runner.run(measure(served, mode, precision))
            finally:
                served.stop()
    if plan.baseline:
        baseline = engines.baseline()
        baseline_run(baseline, texts, 1, 1, "warmup-pocket-tts")
        for concurrency in plan.concurrencies:
            log(f"pocket-tts baseline ({BASELINE_PRECISION}) c={concurrency} ...")
            add(*baseline_run(baseline, texts, concurrency, plan.requests_per_client,
                              comparison.BASELINE), comparison.BASELINE, concurrency,
                BASELINE_PRECISION)
    return result


def figures(result: BenchResult, plan: BenchPlan, ceilings: Mapping[str, float],
            gflop_per_audio_second: float | None) -> dict[str, Any]:
    """The JSON's figures: the run's precision and its ceiling, the model's cost, the
    efficiency at polyvox's best throughput in that precision, the physical stream
    limit, the rows, the ratios (each naming both sides) and the capacity."""
    ceiling = ceilings[plan.precision]
    best = comparison.best_row(result.rows, lambda row: row["mode"] != comparison.BASELINE
                               and row.get("precision") == plan.precision)
    ratios = comparison.mode_ratios(result.rows)
    versus, headline, note = comparison.baseline_ratios(result.rows, plan.precision)
    capacity = result.capacity.to_json() if result.capacity else {
        "capacity": None, "capacity_runs": [], "capacity_probes": []}
    return {
        "precision": plan.precision,
        "ceiling_gflops": ceiling,
        "model_gflop_per_audio_second": gflop_per_audio_second,
        "efficiency": None if best is None else best.get("efficiency"),
        "efficiency_at": None if best is None or gflop_per_audio_second is None else {
            key: best[key] for key in ("mode", "precision", "concurrency")},
        "physical_stream_limit": (ceiling / gflop_per_audio_second
                                  if gflop_per_audio_second else None),
        "rows": result.rows,
        "ratios": ratios | versus,
        "headline_ratio": headline,
        "headline_note": note,
        **capacity,
    }
