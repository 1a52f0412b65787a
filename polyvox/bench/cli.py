"""`polyvox bench`: the in-process benchmark (see ../shared/BENCHMARKS.md).

Every figure is measured in one run: the modes, the concurrencies and the pocket-tts
baseline share the process, the model object and the weights.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from polyvox.bench.metrics import (
    CAPACITY_REFERENCE_REQUESTS,
    CAPACITY_TTFA_FACTOR,
    is_within_capacity,
    search_capacity,
    summarize,
)
from polyvox.config import EngineConfig, add_device_arguments, device_settings


def add_bench_parser(commands: Any) -> None:
    bench = commands.add_parser("bench", help="benchmark the engine in-process")
    bench.add_argument("--model", default="pocket/english")
    bench.add_argument("--weights")
    bench.add_argument("--precision", choices=["float32", "bfloat16", "float16"],
                       default="float32", help="weights of pocket models' matmuls (the "
                       "pocket-tts baseline stays float32)")
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
    bench.add_argument("--threads", type=int, default=2)
    bench.add_argument("--ttfa-slo-ms", type=float, default=500.0)
    bench.add_argument("--first-chunk-frames", type=int, help="default: the model's choice")
    bench.add_argument("--chunk-frames", type=int, help="default: the model's choice")
    bench.add_argument("--max-chunk-frames", type=int, help="default: the model's choice")
    bench.add_argument("--max-running", type=int, default=64)
    bench.add_argument("--no-clause-pieces", dest="clause_pieces", action="store_false",
                       help="compute each clause whole (Piper), not its first chunk first")
    bench.add_argument("--kv-memory-mb", type=float, default=512.0,
                       help="KV pool size (raise it for hundreds of streams on a GPU)")
    bench.add_argument("--json", dest="json_path")
    bench.add_argument("--plot")
    bench.add_argument("--seed", type=int, default=0)
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


def run_bench(args: argparse.Namespace) -> int:
    if args.url:  # a client of a running server: nothing is loaded in this process
        from polyvox.bench.remote import run_remote_bench

        return run_remote_bench(args)
    import torch
    from rich.console import Console
    from rich.progress import Progress

    from polyvox.bench import physics, report
    from polyvox.bench.driver import PocketBaseline, baseline_run, closed_loop, open_loop
    from polyvox.bench.texts import pick_texts
    from polyvox.models.registry import load_model
    from polyvox.serving import serve_family

    console = Console()
    if args.plot:
        report.require_matplotlib()
    torch.set_num_threads(args.threads)
    from polyvox.models.layers.precision import parse_precision

    family = load_model(args.model, weights=args.weights, seed=args.seed,
                        precision=args.precision, device=args.device)
    console.print(f"measuring this machine's matmul ceiling ({args.device}, {args.threads} "
                  "threads) ...")
    ceilings = physics.measure_ceilings(args.threads, repeats=3,
                                        dtype=parse_precision(args.precision),
                                        device=args.device)
    flops = None
    if hasattr(family, "config"):
        flops = physics.pocket_flops_per_audio_second(family.config)["total"]
    overrides: dict[str, Any] = {}
    if getattr(family, "is_random", False):
        # NOTE: random weights stop at an arbitrary EOS; with EOS off every request runs to
        # the family's length cap, so audio length follows the text as real speech would.
        overrides["eos_threshold"] = float("inf")
        console.print("random weights: EOS disabled, requests run to the length cap")
    pool = pick_texts(500, seed=args.seed)

    def texts(index: int) -> str:
        return pool[index % len(pool)]

    device = device_settings(args.device, args.graphs, args.overlap)

    def engine_config(mode: str) -> EngineConfig:
        return EngineConfig(schedule=mode, first_chunk_frames=args.first_chunk_frames,
                            chunk_frames=args.chunk_frames,
                            max_chunk_frames=args.max_chunk_frames, max_running=args.max_running,
                            num_decoder_slots=max(args.max_running, 64),
                            kv_memory_mb=args.kv_memory_mb,
                            clause_pieces=args.clause_pieces, **device)

    def row_for(records: list[Any], wall: float, mode: str, concurrency: int) -> dict[str, Any]:
        return summarize(records, wall, mode, concurrency, args.ttfa_slo_ms, flops,
                         ceilings.matmul_gflops, ceilings.model_dtype_matmul_gflops)

    modes = [m for m in args.modes.split(",") if m]
    concurrencies = _ints(args.concurrency)
    rows: list[dict[str, Any]] = []
    all_records: list[Any] = []
    capacity: int | None = None
    probes: list[dict[str, Any]] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmark", total=len(modes) * len(concurrencies))
        for mode in modes:
            served = serve_family(args.model, family, engine_config(mode), args.device)
            served.param_overrides = overrides
            served.start()

            async def run_mode(served: Any = served, mode: str = mode) -> None:
                nonlocal capacity
                await closed_loop(served, texts, 1, 1, f"warmup-{mode}")
                for concurrency in concurrencies:
                    progress.update(task, description=f"{mode} c={concurrency}")
                    records, wall = await closed_loop(served, texts, concurrency,
                                                      args.requests, mode)
                    rows.append(row_for(records, wall, mode, concurrency))
                    all_records.extend(records)
                    progress.advance(task)
                if args.rate:
                    records, wall = await open_loop(served, texts, args.rate, args.duration,
                                                    mode, args.seed, args.burstiness)
                    rows.append(row_for(records, wall, mode, 0) | {"rate": args.rate})
                    all_records.extend(records)
                if args.capacity and mode == "batched":
                    capacity = await _capacity(served, texts, args, row_for, probes)

            asyncio.run(run_mode())
            served.stop()
    if args.baseline == "pocket-tts":
        with tempfile.TemporaryDirectory() as workdir:
            # NOTE: pocket-tts runs its own float32 modules, whatever polyvox's precision.
            reference = family if args.precision == "float32" else load_model(
                args.model, weights=args.weights, seed=args.seed)
            baseline = PocketBaseline(reference, Path(workdir))
            if overrides:
                baseline.disable_eos()
            baseline_run(baseline, texts, 1, 1, "warmup-pocket-tts")
            for concurrency in concurrencies:
                console.print(f"pocket-tts baseline c={concurrency} ...")
                records, wall = baseline_run(baseline, texts, concurrency, args.requests,
                                             "pocket-tts")
                rows.append(row_for(records, wall, "pocket-tts", concurrency))
                all_records.extend(records)
    where = f"{args.threads} threads" if args.device == "cpu" else (
        f"{args.device}, graphs {device['graphs']}, overlap {device['overlap']}")
    report.print_table(rows, title=f"polyvox bench {args.model} ({where})",
                       console=console)
    ratios = _ratios(rows)
    for name, value in ratios.items():
        console.print(f"{name}: {value:.2f}")
    # NOTE: the limit takes the machine's best matmul (bfloat16 where the model runs in it):
    # efficiency follows the fp32 definition, the limit must not flatter the engine.
    limit = physics.realtime_stream_limit(flops, ceilings.best_matmul_gflops) if flops else None
    if capacity is not None:
        for probe in probes:
            ttfa, viable = probe["ttfa_p90_ms"], probe["viability"]
            console.print(f"  capacity probe c={probe['concurrency']}: "
                          f"{'pass' if probe['passed'] else 'fail'} (TTFA p90 "
                          f"{'-' if ttfa is None else f'{ttfa:.0f}'} ms, limit "
                          f"{probe['ttfa_limit_ms']:.0f}; viable "
                          f"{'-' if viable is None else f'{viable:.0%}'}, "
                          f"{probe['underruns']} underruns)")
        console.print(f"real-time capacity: {capacity} streams"
                      + (f" (physical limit ~{limit:.0f})" if limit else ""))
    payload = {
        "model": args.model, "precision": args.precision, "threads": args.threads,
        "device": args.device, "graphs": device["graphs"], "overlap": device["overlap"],
        "machine": ceilings.to_dict(),
        "flops_per_audio_second": flops, "physical_stream_limit": limit,
        "rows": rows, "ratios": ratios, "capacity": capacity, "capacity_probes": probes,
    }
    if args.json_path:
        report.write_json(args.json_path, payload)
    if args.plot:
        report.plot(rows, args.plot, all_records)
    return 0


async def _capacity(served: Any, texts: Any, args: argparse.Namespace, row_for: Any,
                    probes: list[dict[str, Any]]) -> int:
    """Largest concurrency with every stream viable and TTFA p90 <= 3x single-stream.
    Each run of the search is appended to `probes` (the JSON's `capacity_probes`)."""
    from polyvox.bench.driver import closed_loop

    async def passes(concurrency: int, reference: float) -> bool:
        records, wall = await closed_loop(served, texts, concurrency, args.requests, "capacity")
        row = row_for(records, wall, "capacity", concurrency)
        passed = is_within_capacity(row, reference)
        probes.append({"concurrency": concurrency, "passed": passed,
                       "ttfa_p90_ms": row["ttfa_p90_ms"], "ttfa_limit_ms":
                       CAPACITY_TTFA_FACTOR * reference, "viability": row["viability"],
                       "underruns": row["underruns"]})
        return passed

    records, wall = await closed_loop(served, texts, 1,
                                      max(args.requests, CAPACITY_REFERENCE_REQUESTS), "capacity")
    reference = row_for(records, wall, "capacity", 1)["ttfa_p50_ms"]
    return await search_capacity(lambda concurrency: passes(concurrency, reference))


def _ratios(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Audio-throughput ratios of batched against the other modes at equal concurrency."""
    by = {(row["mode"], row["concurrency"]): row for row in rows}
    ratios: dict[str, float] = {}
    for (mode, concurrency), row in by.items():
        if mode != "batched" or concurrency == 0:
            continue
        for other in ("sequential", "interleaved", "pocket-tts"):
            base = by.get((other, concurrency))
            if base and base["audio_throughput"]:
                ratios[f"batched/{other} audio throughput at c={concurrency}"] = (
                    row["audio_throughput"] / base["audio_throughput"])
    return ratios
