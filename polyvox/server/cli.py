"""`polyvox serve` (also `python -m polyvox.server`): run the HTTP/WebSocket server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

API_KEY_ENV = "POLYVOX_API_KEY"


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "polyvox"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from polyvox.config import (
        PRECISIONS,
        SCHEDULES,
        add_chaining_argument,
        add_device_arguments,
    )
    from polyvox.models.registry import DEFAULT_MODEL

    model = parser.add_argument_group("model")
    model.add_argument("--model", default=DEFAULT_MODEL, help=f"default {DEFAULT_MODEL}")
    model.add_argument("--weights", help="checkpoint file, directory or cached HF repo id")
    model.add_argument("--tokenizer", help="tokenizer file (when not next to the weights)")
    model.add_argument("--device", default="cpu")
    model.add_argument("--precision", choices=PRECISIONS, default="float32",
                       help="weights of Pocket models' matmuls and convs, of Piper's decoder, "
                       "of joe-ar's student and decoder (bfloat16: ~2x faster Pocket, ~1.2x "
                       "joe-ar on CPUs with AVX512-BF16, ~1e-2 from float32; float16 for GPUs)")
    model.add_argument("--seed", type=int, default=0, help="seed of random weights")
    model.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine "
                     "only); 0.0.0.0 listens on every interface")
    net.add_argument("--port", type=int, default=8000)
    net.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                     help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV})")
    net.add_argument("--data-dir", type=Path, default=default_data_dir(),
                     help="where added voices are kept (default %(default)s)")
    net.add_argument("--log-level", default="info",
                     choices=["critical", "error", "warning", "info", "debug"])
    net.add_argument("--access-log", action="store_true", help="log every request")
    engine = parser.add_argument_group("engine")
    engine.add_argument("--schedule", default="batched", choices=SCHEDULES)
    engine.add_argument("--max-running", type=int, default=64,
                        help="streams the engine batches (and decoder slots)")
    engine.add_argument("--kv-memory-mb", type=float, default=512.0)
    add_chaining_argument(engine)
    add_device_arguments(engine)
    cluster = parser.add_argument_group("cluster (Ray Serve replicas: docs/deploy.md)")
    cluster.add_argument("--replicas", type=int, default=None,
                         help="run the engines as N Ray Serve replicas behind this server "
                         "(default: one engine in this process)")
    cluster.add_argument("--ray-address", default=None,
                         help="join this Ray cluster (default: $RAY_ADDRESS, else start a "
                         "local one)")
    cluster.add_argument("--cpus-per-replica", type=float, default=1.0,
                         help="CPUs Ray reserves for each replica (default 1)")
    cluster.add_argument("--max-replicas", type=int, default=None,
                         help="autoscale between --replicas and this many replicas on the "
                         "engines' streams against their limits (docs/deploy.md)")
    cluster.add_argument("--downscale-delay", type=float, default=30.0,
                         help="seconds a lower replica target must hold before a replica "
                         "is stopped (its streams finish first; default 30)")
    limits = parser.add_argument_group("admission and limits")
    limits.add_argument("--max-streams", type=int, default=None,
                        help="streams generating at once (default: --max-running)")
    limits.add_argument("--max-queued", type=int, default=64,
                        help="requests waiting for a turn; more get 429")
    limits.add_argument("--max-wait", type=float, default=0.25,
                        help="seconds: a request whose estimated wait is longer gets 429")
    limits.add_argument("--ttfa-floor-ms", type=float, default=250.0,
                        help="admission keeps a new caller's first audio within 2x an idle "
                        "engine's or this, whichever is longer (0: 2x idle alone)")
    limits.add_argument("--calibrate-seconds", type=float, default=15.0,
                        help="seconds of synthetic load at a first start to learn what the "
                        "engine sustains, for admission (skipped when --data-dir holds an "
                        "earlier start's; 0: no prediction, the reactive limit alone)")
    limits.add_argument("--max-input-chars", type=int, default=4096)
    limits.add_argument("--max-voice-mb", type=float, default=10.0)
    limits.add_argument("--max-voice-seconds", type=float, default=30.0)
    limits.add_argument("--ws-idle-seconds", type=float, default=300.0)
    limits.add_argument("--debug-state", action="store_true",
                        help="expose GET /debug/state (engine pools; for tests)")
    limits.add_argument("--no-eos", action="store_true",
                        help="random weights only, for benchmarks: every request runs to its "
                        "length cap, as `polyvox bench` in process (random EOS stops most "
                        "requests within a second)")


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `serve` to the polyvox command's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser("serve", help="run the streaming speech server",
                                   description=__doc__)
    add_arguments(parser)
    parser.set_defaults(func=serve)
    return parser


def add_prefetch_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `prefetch` to the polyvox command's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "prefetch", help="prepare this machine to start a server or replica fast",
        description="Do once, before a server or replica starts, what its first start "
        "would do: build or load the compiled kernels (cached per machine and torch "
        "version), read the weights (and train a random-weight model's tokenizer), learn "
        "what the engine sustains for admission (saved in --data-dir) and run the "
        "warm-up. Takes the options of `polyvox serve`; give it the same ones.")
    add_arguments(parser)
    parser.set_defaults(func=prefetch)
    return parser


def prefetch(args: argparse.Namespace) -> int:
    import torch

    from polyvox.server import load_file
    from polyvox.server.app import _load_served
    from polyvox.startup import StartupTimes, seconds_since_process_start

    if args.threads:
        torch.set_num_threads(args.threads)
    config = config_from_args(args)
    startup = StartupTimes()
    startup.add("process", seconds_since_process_start() or 0.0)
    path = load_file.load_file(config)
    served = _load_served(config, path, startup)
    served.stop()
    print(f"polyvox: {served.name} prefetched in {startup.total:.1f} s "
          f"({', '.join(f'{k} {v:.1f} s' for k, v in startup.phases.items())}); "
          f"admission's load model: {path}", flush=True)
    return 0


def config_from_args(args: argparse.Namespace) -> Any:
    from polyvox.config import EngineConfig, device_settings
    from polyvox.server.config import MiB, ServerConfig

    engine = EngineConfig(schedule=args.schedule, chaining=args.chaining,
                          max_running=args.max_running, kv_memory_mb=args.kv_memory_mb,
                          **device_settings(args.device, args.graphs, args.overlap))
    return ServerConfig(
        model=args.model, engine=engine, weights=args.weights, tokenizer=args.tokenizer,
        device=args.device, precision=args.precision, seed=args.seed, data_dir=args.data_dir, api_key=args.api_key,
        max_streams=args.max_streams or args.max_running, max_queued=args.max_queued,
        max_wait_seconds=args.max_wait, calibrate_seconds=args.calibrate_seconds,
        ttfa_floor_seconds=args.ttfa_floor_ms / 1000,
        max_input_chars=args.max_input_chars,
        max_voice_bytes=int(args.max_voice_mb * MiB), max_voice_seconds=args.max_voice_seconds,
        ws_idle_seconds=args.ws_idle_seconds, debug_state=args.debug_state,
        no_eos=args.no_eos)


def serve(args: argparse.Namespace) -> int:
    import torch
    import uvicorn

    from polyvox.server.app import create_app
    from polyvox.startup import seconds_since_process_start

    if args.threads and args.replicas is None:
        torch.set_num_threads(args.threads)
    config = config_from_args(args)
    extra: dict[str, Any] = {}
    if args.max_replicas is not None and args.replicas is None:
        print("error: --max-replicas needs --replicas (the fewest replicas)", file=sys.stderr)
        return 2
    if args.replicas is not None:
        # NOTE: before Ray loads: its crash handler would take SIGTERM over and abort the
        # process (exit 134) in the middle of the server's own shutdown, leaving Ray's
        # agent processes behind.
        os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
        from polyvox.cluster.deploy import ClusterOptions, cluster_router

        try:
            cluster = ClusterOptions(args.replicas, args.ray_address, args.cpus_per_replica,
                                     args.threads, args.max_replicas, args.downscale_delay)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        extra = {"loader": cluster.loader(), "routers": [cluster_router()]}
    failure: list[str] = []
    server: uvicorn.Server | None = None

    def on_fatal(message: str) -> None:
        failure.append(message)
        if server is not None:
            server.should_exit = True

    def on_ready(served: Any, startup: Any) -> None:
        if args.replicas is not None:
            print(f"polyvox: {args.replicas} replica(s) of {served.name} on Ray Serve, "
                  f"{startup.describe()}", flush=True)
        else:
            if served.family.is_random:
                print(f"note: no weights found for {served.name}: it runs with random "
                      "weights, so the audio is noise (pass --weights)", file=sys.stderr,
                      flush=True)
            print(f"polyvox: {startup.describe()}", flush=True)
        print(_how_to_call(args, served.name), flush=True)

    app = create_app(config, on_ready=on_ready, on_fatal=on_fatal,
                     process_seconds=seconds_since_process_start(), **extra)
    server = uvicorn.Server(uvicorn.Config(
        app, host=args.host, port=args.port, log_level=args.log_level,
        access_log=args.access_log, ws_max_size=2**20, timeout_graceful_shutdown=5))
    server.run()
    if failure:
        print(f"error: {failure[0]}", file=sys.stderr)
        return 2
    return 0


def _how_to_call(args: argparse.Namespace, model: str) -> str:
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
    url = f"http://{host}:{args.port}"
    auth = ' -H "Authorization: Bearer $POLYVOX_API_KEY"' if args.api_key else ""
    return (f"polyvox: serving {model} at {url} (try it in a browser: {url}/)\n"
            f"  curl -s {url}/v1/audio/speech{auth} -H 'Content-Type: application/json' \\\n"
            f"    -d '{{\"model\": \"tts-1\", \"input\": \"Hello there.\", \"voice\": \"alloy\", "
            f"\"response_format\": \"wav\"}}' -o hello.wav")
