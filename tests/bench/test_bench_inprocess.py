"""The in-process bench driver (bench/inprocess.py) on simulated engines: efficiency
against the ceiling of each row's precision, the pocket-tts headline at equal precision
against pocket-tts' best throughput, the capacity search, and the pocket-tts baseline's
own loop (bench/baseline.py)."""

from __future__ import annotations

import pytest
from bench_fakes import (
    SimulatedBaseline,
    SimulatedEngines,
    VirtualClockLoop,
    probe_requests,
    texts,
)
from rich.console import Console

from polyvox.bench import report
from polyvox.bench.baseline import baseline_run
from polyvox.bench.cli import plan_from_args
from polyvox.bench.inprocess import BenchPlan, figures, run_in_process
from polyvox.cli import build_parser

CEILINGS = {"float32": 100.0, "bfloat16": 400.0}  # GFLOP/s, as if measured in the run
GFLOP = 2.0  # model GFLOP per second of audio


def _run(plan: BenchPlan, engines: SimulatedEngines | None = None) -> dict:
    engines = engines or SimulatedEngines(streams=6)
    result = run_in_process(plan, engines, texts, CEILINGS, GFLOP, log=lambda line: None,
                            loop_factory=VirtualClockLoop)
    payload = figures(result, plan, CEILINGS, GFLOP)
    assert all(not served.is_started for _, _, served in engines.served)  # all stopped
    return payload


def _plan(**changes: object) -> BenchPlan:
    settings: dict = {"modes": ("batched",), "concurrencies": (1, 2),
                      "requests_per_client": 1, "precision": "bfloat16", "baseline": True}
    return BenchPlan(**(settings | changes))


def test_efficiency_divides_by_the_ceiling_of_each_rows_precision() -> None:
    payload = _run(_plan())
    rows = payload["rows"]
    assert {(row["mode"], row["precision"]) for row in rows} == {
        ("batched", "bfloat16"), ("batched-float32", "float32"), ("pocket-tts", "float32")}
    for row in rows:
        assert row["ceiling_gflops"] == CEILINGS[row["precision"]]
        assert row["model_gflop_per_audio_second"] == GFLOP
        assert row["model_gflops_per_s"] == pytest.approx(row["audio_throughput"] * GFLOP)
        assert row["efficiency"] == pytest.approx(
            row["model_gflops_per_s"] / CEILINGS[row["precision"]])
        assert "efficiency_model_dtype" not in row  # the mixed figure is gone
    assert (payload["precision"], payload["ceiling_gflops"]) == ("bfloat16", 400.0)
    assert payload["model_gflop_per_audio_second"] == GFLOP
    best = max((r for r in rows if r["mode"] == "batched"), key=lambda r: r["audio_throughput"])
    assert payload["efficiency"] == best["efficiency"]
    assert payload["efficiency_at"] == {"mode": "batched", "precision": "bfloat16",
                                        "concurrency": best["concurrency"]}
    assert payload["physical_stream_limit"] == pytest.approx(400.0 / GFLOP)


def test_the_pocket_tts_headline_is_at_equal_precision_against_its_best() -> None:
    payload = _run(_plan())
    rows, ratios = payload["rows"], payload["ratios"]
    headline = ratios[payload["headline_ratio"]]
    baseline = [row for row in rows if row["mode"] == "pocket-tts"]
    best_baseline = max(baseline, key=lambda row: row["audio_throughput"])
    equal = max((r for r in rows if r["mode"] == "batched-float32"),
                key=lambda r: r["audio_throughput"])
    assert headline["equal_precision"] is True
    assert headline["numerator"] == {"mode": "batched-float32", "precision": "float32",
                                     "concurrency": equal["concurrency"],
                                     "audio_throughput": equal["audio_throughput"]}
    assert headline["denominator"] == {"mode": "pocket-tts", "precision": "float32",
                                       "concurrency": best_baseline["concurrency"],
                                       "audio_throughput": best_baseline["audio_throughput"]}
    assert headline["value"] == equal["audio_throughput"] / best_baseline["audio_throughput"]
    # the simulated pocket-tts is at its best alone (8x the time per chunk with 2 streams),
    # polyvox with 2 streams: the headline does not divide by pocket-tts where it is worst
    assert (equal["concurrency"], best_baseline["concurrency"]) == (2, 1)
    [cross_name] = [name for name in ratios if name != payload["headline_ratio"]]
    cross = ratios[cross_name]
    assert "NOT equal precision" in cross_name and cross["equal_precision"] is False
    assert (cross["numerator"]["precision"], cross["denominator"]["precision"]) == (
        "bfloat16", "float32")
    assert cross["denominator"] == headline["denominator"]
    assert payload["headline_note"] is None


def test_without_a_float32_polyvox_run_there_is_no_headline() -> None:
    engines = SimulatedEngines()
    payload = _run(_plan(equal_precision=False), engines)
    assert payload["headline_ratio"] is None
    assert "no equal-precision ratio in this run" in payload["headline_note"]
    assert [name for name in payload["ratios"] if "NOT equal precision" in name]
    assert all(ratio["equal_precision"] is False for ratio in payload["ratios"].values())
    assert [(mode, precision) for mode, precision, _ in engines.served] == [
        ("batched", "bfloat16")]


def test_a_float32_run_compares_its_own_rows_and_modes() -> None:
    engines = SimulatedEngines()
    payload = _run(_plan(precision="float32", modes=("sequential", "batched")), engines)
    assert [(m, p) for m, p, _ in engines.served] == [("sequential", "float32"),
                                                      ("batched", "float32")]
    ratios = payload["ratios"]
    assert ratios[payload["headline_ratio"]]["numerator"]["mode"] in ("sequential", "batched")
    assert all(ratio["equal_precision"] for ratio in ratios.values())
    mode_ratio = ratios["batched/sequential audio throughput at c=2 (float32)"]
    assert mode_ratio["numerator"]["concurrency"] == mode_ratio["denominator"]["concurrency"]


def test_capacity_in_process() -> None:
    payload = _run(_plan(baseline=False, capacity=True, capacity_runs=2))
    assert payload["capacity"] == 6
    assert [run["capacity"] for run in payload["capacity_runs"]] == [6, 6]
    probes = payload["capacity_probes"]
    assert [(p["concurrency"], p["attempt"]) for p in probes if p["run"] == 1][:2] == [
        (1, 1), (1, 2)]
    assert len(probes) == 2 * 10  # every probe of both runs
    assert all(p["requests"] == probe_requests(p["concurrency"]) for p in probes)


def test_the_table_and_the_summary_name_precision_and_both_sides() -> None:
    payload = _run(_plan(capacity=True))
    console = Console(record=True, width=250)
    report.print_table(payload["rows"], console=console)
    report.print_figures(payload, CEILINGS, console)
    text = console.export_text()
    assert "prec" in text and "bf16" in text and "fp32" in text and "ciency" in text
    assert "in the row's precision" in text and "bfloat16 400" in text
    assert "headline polyvox/pocket-tts" in text and "NOT equal precision" in text
    assert "real-time capacity: 6 streams" in text


def test_plans_are_checked_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="add batched to --modes"):
        _plan(modes=("sequential",), capacity=True)
    with pytest.raises(ValueError, match="capacity-runs"):
        _plan(capacity_runs=0)
    with pytest.raises(ValueError, match="no matmul ceiling measured for"):
        run_in_process(_plan(), SimulatedEngines(), texts, {"bfloat16": 1.0}, GFLOP)


def test_the_command_line_makes_the_plan() -> None:
    args = build_parser().parse_args(["bench", "--precision", "bfloat16", "--baseline",
                                      "pocket-tts", "--capacity", "--capacity-runs", "3",
                                      "--modes", "batched", "--concurrency", "1,8"])
    plan = plan_from_args(args)
    assert (plan.capacity_runs, plan.equal_precision, plan.baseline) == (3, True, True)
    assert plan.precisions == ("bfloat16", "float32") and plan.runs_equal_precision
    assert plan.concurrencies == (1, 8)
    default = plan_from_args(build_parser().parse_args(["bench", "--no-equal-precision"]))
    assert (default.capacity_runs, default.equal_precision) == (1, False)


def test_the_baseline_loop_records_every_stream() -> None:
    baseline = SimulatedBaseline(seconds_per_chunk=0.001, fail_text=texts(3))
    records, wall = baseline_run(baseline, texts, concurrency=2, requests_per_client=2,
                                 mode="pocket-tts")
    assert sorted(r.request_id for r in records) == [f"pocket-tts-{i}" for i in range(4)]
    assert wall > 0
    for record in records:
        assert (record.mode, record.concurrency, record.sample_rate) == ("pocket-tts", 2, 1000)
        if record.text == texts(3):
            assert record.error and "simulated failure" in record.error
            assert not record.is_ok and not record.chunk_samples
        else:
            assert record.is_ok and record.chunk_samples == [250] * 4
            assert record.sent <= record.chunk_times[0]
            assert record.chunk_times == sorted(record.chunk_times) and record.finished


def test_the_bench_serves_the_chaining_it_is_given(tmp_path) -> None:
    from polyvox.bench.cli import LoadedEngines
    from polyvox.models.registry import load_model

    family = load_model("pocket/english_2m")
    for given, served_as in (([], "chained"), (["--chaining", "pocket"], "pocket")):
        args = build_parser().parse_args(["bench", "--model", "pocket/english_2m", *given])
        served = LoadedEngines(args, family, tmp_path).serve("batched", "float32")
        try:
            assert served.engine.config.chaining == served_as
        finally:
            served.stop()
