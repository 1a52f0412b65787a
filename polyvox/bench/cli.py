"""`polyvox bench`: the command line of the benchmark (see ../shared/BENCHMARKS.md and
docs/bench.md). In-process (inprocess.py), every figure is measured in one run: the modes,
the concurrencies and the pocket-tts baseline share the process and the weights; with
--url it is a client of a running server (remote.py).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from polyvox.config import (
    PRECISIONS,
    EngineConfig,
    add_chaining_argument,
    add_device_arguments,
    device_settings,
)


def add_bench_parser(commands: Any) -> None:
    bench = commands.add_parser("bench", help="benchmark the engine in-process")
    bench.add_argument("--model", default="pocket/english")
    bench.add_argument("--weights")
    bench.add_argument("--precision", choices=PRECISIONS,
                       default="float32", help="weights of pocket models' matmuls (the "
                       "pocket-tts baseline stays float32)")
    bench.add_argument("--equal-precision", action=argparse.BooleanOptionalAction,
                       default=True, help="with --baseline and another --precision: also "
                       "run polyvox batched in float32, for the equal-precision headline")
    bench.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    add_device_arguments(bench)
    bench.add_argument("--modes", default="sequential,interleaved,batched")
    bench.add_argument("--concurrency", default="1,4,16,32")
    bench.add_argument("--requests", type=int, default=2, help="requests per client")
    bench.add_argument("--rate", type=float, help="open loop: arrivals per second")
    bench.add_argument("--duration", type=float, default=30.0, help="open loop: seconds")
    bench.add_argument("--burstiness", type=float, default=1.0)
    bench.add_argument("--baseline", choices=["pocket-tts"], help="also run the reference loop")
    bench.add_argument("--capacity", action="store_true", help="search real-time capacity")
    bench.add_argument("--capacity-runs", type=int, default=1, help="repeat the capacity "
                       "search; the capacity is the median over runs")
    bench.add_argument("--threads", type=int, default=2)
    bench.add_argument("--ttfa-slo-ms", type=float, default=500.0)
    bench.add_argument("--first-chunk-frames", type=int, help="default: the model's choice")
    bench.add_argument("--chunk-frames", type=int, help="default: the model's choice")
    bench.add_argument("--max-chunk-frames", type=int, help="default: the model's choice")
    bench.add_argument("--max-running", type=int, default=64)
    add_chaining_argument(bench)
    bench.add_argument("--no-clause-pieces", dest="clause_pieces", action="store_false",
                       help="compute each clause whole (Piper), not its first chunk first")
    bench.add_argument("--kv-memory-mb", type=float, default=512.0,
                       help="KV pool size (raise it for hundreds of streams on a GPU)")
    bench.add_argument("--json", dest="json_path")
    bench.add_argument("--plot")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--record-trace", metavar="FILE",
                       help="keep the batched engine's stage timings and clauses in FILE "
                       "(for --replay)")
    bench.add_argument("--replay", metavar="FILE",
                       help="no model: run the planners of --modes over a recorded trace's "
                       "costs on a simulated clock (--concurrency, --requests, --capacity)")
    remote = bench.add_argument_group(
        "a running server", "with --url the benchmark is a client of `polyvox serve` over "
        "HTTP or WebSocket (bench/remote.py); no model is loaded here")
    remote.add_argument("--url", help="the server, e.g. http://127.0.0.1:8000")
    remote.add_argument("--transport", choices=["http", "ws"], default="http",
                        help="POST /v1/audio/speech (http) or WS /v1/audio/stream (ws)")
    remote.add_argument("--api-key", default=os.environ.get("POLYVOX_API_KEY"),
                        help="the server's key (default: $POLYVOX_API_KEY)")
    remote.add_argument("--overload", action="store_true",
                        help="offer --overload-factor x capacity streams; report admission")
    remote.add_argument("--overload-seconds", type=float, default=30.0)
    remote.add_argument("--overload-factor", type=float, default=3.0)
    remote.add_argument("--overload-streams", type=int,
                        help="the capacity to overload (default: measured, as --capacity)")
    bench.set_defaults(func=run_bench)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def _console() -> Any:
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)  # logs: not 80 columns


class LoadedEngines:
    """`inprocess.Engines` over the real model: a family per precision (loaded once), an
    engine per mode, pocket-tts on the float32 family's weights."""

    def __init__(self, args: argparse.Namespace, family: Any, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.families = {args.precision: family}
        self.device = device_settings(args.device, args.graphs, args.overlap)
        from polyvox.serving import length_cap_overrides

        self.overrides = length_cap_overrides(family) if family.is_random else {}
        self.recorded: Any = None  # the engine whose timings --record-trace keeps

    def family(self, precision: str) -> Any:
        from polyvox.models.registry import load_model

        if precision not in self.families:
            args = self.args
            self.families[precision] = load_model(args.model, weights=args.weights,
                                                  seed=args.seed, precision=precision,
                                                  device=args.device)
        return self.families[precision]

    def serve(self, mode: str, precision: str) -> Any:
        from polyvox.serving import serve_family

        args = self.args
        config = EngineConfig(schedule=mode, chaining=args.chaining,
                              first_chunk_frames=args.first_chunk_frames,
                              chunk_frames=args.chunk_frames,
                              max_chunk_frames=args.max_chunk_frames,
                              max_running=args.max_running,
                              num_decoder_slots=max(args.max_running, 64),
                              kv_memory_mb=args.kv_memory_mb,
                              clause_pieces=args.clause_pieces, **self.device)
        served = serve_family(args.model, self.family(precision), config, args.device)
        served.param_overrides = self.overrides
        if args.record_trace and mode == "batched" and self.recorded is None:
            from polyvox.engine.costs import Recording

            served.engine.recording = Recording()
            self.recorded = served.engine
        return served

    def baseline(self) -> Any:
        from polyvox.bench.baseline import PRECISION, PocketBaseline

        baseline = PocketBaseline(self.family(PRECISION), self.workdir)
        if self.overrides:
            baseline.disable_eos()
        return baseline


def plan_from_args(args: argparse.Namespace) -> Any:
    from polyvox.bench.inprocess import BenchPlan

    return BenchPlan(
        modes=tuple(m for m in args.modes.split(",") if m),
        concurrencies=tuple(_ints(args.concurrency)), requests_per_client=args.requests,
        precision=args.precision, ttfa_slo_ms=args.ttfa_slo_ms, rate=args.rate,
        duration=args.duration, burstiness=args.burstiness, seed=args.seed,
        baseline=args.baseline == "pocket-tts", equal_precision=args.equal_precision,
        capacity=args.capacity, capacity_runs=args.capacity_runs)


def run_replay(args: argparse.Namespace) -> int:
    """`--replay FILE`: the planners over a recorded trace, on a simulated clock."""
    import asyncio

    from polyvox.bench import capacity, report
    from polyvox.bench.replay import Simulator, Trace, replay
    from polyvox.engine.baselines import make_planner_of

    console = _console()
    modes = [m for m in args.modes.split(",") if m]
    rows = replay(args.replay, modes, _ints(args.concurrency), args.requests, args.ttfa_slo_ms)
    trace = Trace.load(args.replay)
    report.print_table(rows, title=f"polyvox bench --replay {args.replay} ({trace.model}, "
                       "simulated clock)", console=console)
    payload: dict[str, Any] = {"replay": str(args.replay), "model": trace.model, "rows": rows}
    if args.capacity:
        simulator = Simulator(trace, make_planner_of("batched", trace.rules))

        async def loop(concurrency: int, requests: int) -> Any:
            return simulator.closed_loop(concurrency, requests, "capacity")

        found = asyncio.run(capacity.measure_capacity(loop, 1, args.requests, args.ttfa_slo_ms))
        payload.update(found.to_json())
        console.print(capacity.describe(payload))
    if args.json_path:
        report.write_json(args.json_path, payload)
    return 0


def run_bench(args: argparse.Namespace) -> int:
    if args.replay:
        return run_replay(args)
    if args.url:  # a client of a running server: nothing is loaded in this process
        from polyvox.bench.remote import run_remote_bench

        return run_remote_bench(args)
    import torch

    from polyvox.bench import ceilings, physics, report
    from polyvox.bench.inprocess import figures, run_in_process
    from polyvox.bench.texts import pick_texts
    from polyvox.models.registry import load_model

    plan = plan_from_args(args)  # checks the choices before anything slow
    console = _console()
    if args.plot:
        report.require_matplotlib()
    torch.set_num_threads(args.threads)
    family = load_model(args.model, weights=args.weights, seed=args.seed,
                        precision=args.precision, device=args.device)
    console.print(f"measuring this machine's matmul ceilings ({args.device}, {args.threads} "
                  f"threads; {', '.join(plan.precisions)}) ...")
    machine = ceilings.measure_ceilings(args.threads, plan.precisions, repeats=3,
                                        device=args.device)
    gflop = None
    if hasattr(family, "config"):
        gflop = physics.pocket_flops_per_audio_second(family.config)["total"] / 1e9
    pool = pick_texts(500, seed=args.seed)

    def texts(index: int) -> str:
        return pool[index % len(pool)]

    with tempfile.TemporaryDirectory() as workdir:
        engines = LoadedEngines(args, family, Path(workdir))
        if engines.overrides:
            console.print("random weights: EOS disabled, requests run to the length cap")
        result = run_in_process(plan, engines, texts, machine.matmul_gflops, gflop,
                                log=console.print)
    if args.record_trace and engines.recorded is not None:
        from polyvox.bench.replay import trace_of

        trace_of(engines.recorded, args.model).save(args.record_trace)
        console.print(f"trace of the batched engine: {args.record_trace}")
    payload = figures(result, plan, machine.matmul_gflops, gflop)
    device = engines.device
    where = f"{args.threads} threads" if args.device == "cpu" else (
        f"{args.device}, graphs {device['graphs']}, overlap {device['overlap']}")
    report.print_table(result.rows, title=f"polyvox bench {args.model} ({where})",
                       console=console)
    report.print_figures(payload, machine.matmul_gflops, console)
    payload = {"model": args.model, "threads": args.threads, "device": args.device,
               "graphs": device["graphs"], "overlap": device["overlap"],
               "machine": machine.to_dict(), **payload}
    if args.json_path:
        report.write_json(args.json_path, payload)
    if args.plot:
        report.plot(result.rows, args.plot, result.records)
    return 0
