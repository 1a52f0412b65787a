"""The trace-replay simulator: a real engine's recorded costs, the production planners,
a simulated clock."""

from __future__ import annotations

import asyncio

import pytest

from polyvox.bench.capacity import capacity_run
from polyvox.bench.metrics import summarize
from polyvox.bench.replay import Simulator, Trace, fit_costs, replay, trace_of
from polyvox.config import EngineConfig
from polyvox.engine.baselines import make_planner_of
from polyvox.engine.costs import Recording, Timing
from polyvox.engine.engine import Engine, run_to_completion
from polyvox.engine.plans import Rules



@pytest.fixture(scope="module")
def model():
    from polyvox.models.pocket.loader import load_pocket

    return load_pocket("english_2m", seed=0)


RULES = Rules(autoregressive=True, frame_seconds=0.08, first_chunk=2, chunk=4, max_chunk=4)


def synthetic_trace(step=(0.01, 0.002), decode=(0.008, 0.0015), prefill=(0.005, 0.0003),
                    clauses: int = 2, frames: int = 40) -> Trace:
    """Timings as a machine with these (per call, per unit) costs would record them."""
    timings = []
    for rows in (1, 2, 4, 8, 16, 1, 3, 7):
        timings.append(Timing("step", step[0] + step[1] * rows, 1, rows))
        timings.append(Timing("decode", decode[0] * 2 + decode[1] * rows * 4, 2, rows * 4))
        timings.append(Timing("prefill", prefill[0] + prefill[1] * rows * 12, 1, rows * 12))
        timings.append(Timing("engine_step", 0.05, 1, 0))
    requests = [[(12 + i, frames + 3 * i)] * clauses for i in range(5)]
    return Trace("synthetic", RULES, 24000, 1920, timings, requests)


def test_costs_are_fitted_from_the_timings() -> None:
    costs = fit_costs(synthetic_trace().timings)
    assert costs.step(10) == pytest.approx(0.01 + 0.02, rel=1e-3)
    assert costs.decode(8, calls=1) == pytest.approx(0.008 + 0.012, rel=1e-3)
    assert costs.prefill(100) == pytest.approx(0.005 + 0.03, rel=1e-3)
    assert costs.engine_step == pytest.approx(0.05)


def test_a_replay_is_deterministic_and_speaks_every_frame(tmp_path) -> None:
    trace = synthetic_trace()
    path = tmp_path / "trace.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded == trace
    runs = [Simulator(loaded, make_planner_of("batched", loaded.rules)).closed_loop(4, 2)
            for _ in range(2)]
    assert [r.chunk_times for r in runs[0][0]] == [r.chunk_times for r in runs[1][0]]
    records, wall = runs[0]
    assert len(records) == 8 and wall > 0
    for record in records:
        number = int(record.request_id.rsplit("-", 1)[1])
        frames = sum(f for _, f in trace.requests[number % len(trace.requests)])
        assert sum(record.chunk_samples) == frames * trace.samples_per_frame
        assert record.finished is not None and record.chunk_times == sorted(record.chunk_times)


def test_batching_beats_the_baselines_on_a_machine_with_fixed_costs_per_call() -> None:
    """Calls with large fixed parts: one batched call serves many streams for little more
    than one stream's call; the baselines pay it per stream."""
    trace = synthetic_trace(step=(0.03, 0.001), decode=(0.02, 0.0005))
    throughput = {}
    for mode in ("sequential", "interleaved", "batched"):
        records, wall = Simulator(trace, make_planner_of(mode, trace.rules)).closed_loop(8, 2, mode)
        row = summarize(records, wall, mode, 8, 500.0)
        throughput[mode] = row["audio_throughput"]
        if mode == "batched":
            assert row["underruns"] == 0 and row["viability"] == 1.0
    assert throughput["batched"] > 3 * throughput["interleaved"]
    assert throughput["batched"] > 3 * throughput["sequential"]


def test_the_capacity_search_runs_on_the_simulator() -> None:
    """A machine whose AR step costs 10 ms + 10 ms per row: with 80 ms frames, about 7
    streams fit in real time (less the decoder's share)."""
    trace = synthetic_trace(step=(0.01, 0.01), decode=(0.002, 0.0002), frames=60)
    simulator = Simulator(trace, make_planner_of("batched", trace.rules))

    async def loop(concurrency: int, requests: int):
        return simulator.closed_loop(concurrency, requests)

    run = asyncio.run(capacity_run(loop, limit=32))
    assert 3 <= run.capacity <= 7


def test_a_real_engine_run_records_a_trace_that_replays(model, tmp_path) -> None:
    engine = Engine(model, EngineConfig(kv_memory_mb=32))
    empty = model.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    engine.recording = Recording()
    for index, text in enumerate(["Hello world. How are you today?", "Short one!",
                                  "The quick brown fox jumps over the lazy dog."]):
        engine.add_request(text, "default", model.make_params(seed=index),
                           request_id=f"r{index}")
    audio = run_to_completion(engine)
    trace = trace_of(engine, "pocket/english_2m")
    stages = {timing.stage for timing in trace.timings}
    assert {"prefill", "step", "decode", "engine_step"} <= stages
    assert len(trace.requests) == 3
    # every frame the engine generated is in the trace's clauses
    spoken = sorted(sum(f for _, f in clauses) * trace.samples_per_frame
                    for clauses in trace.requests)
    assert spoken == sorted(int(samples.numel()) for samples in audio.values())
    path = tmp_path / "trace.json"
    trace.save(path)
    rows = replay(path, ["batched", "sequential"], [1, 2], 1)
    assert [(row["mode"], row["concurrency"]) for row in rows] == [
        ("batched", 1), ("batched", 2), ("sequential", 1), ("sequential", 2)]
    assert all(row["errors"] == 0 and row["audio_seconds"] > 0 for row in rows)
