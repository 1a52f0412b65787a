"""What a refusal costs the server: `pocket/english_2m` with its only turn held by a
WebSocket utterance (`--max-streams 1 --max-queued 0`, the engine otherwise idle), then
batches of refused speech requests in a row on one keep-alive connection; the server's
CPU per request from /proc (docs/perf.md). `--health` asks GET /health instead.

    python scripts/refusal_cost.py [--requests 2000] [--batches 3] [--port 8811] [--health]

Run it from the tree whose server you want to measure (`python -m polyvox.server` runs
the cwd's code)."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

from websockets.sync.client import connect


def server_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(port: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/ready")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server was not ready in time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--port", type=int, default=8811)
    parser.add_argument("--health", action="store_true")
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="refusal-cost-")
    server = subprocess.Popen(
        [sys.executable, "-m", "polyvox.server", "--model", "pocket/english_2m", "--port",
         str(args.port), "--max-streams", "1", "--max-queued", "0", "--calibrate-seconds",
         "0", "--data-dir", data, "--log-level", "warning"])
    try:
        wait_ready(args.port)
        with connect(f"ws://127.0.0.1:{args.port}/v1/audio/stream") as holder:
            holder.send(json.dumps({"type": "configure"}))
            holder.recv()
            holder.send(json.dumps({"type": "text", "text": "Hello there. "}))  # no end
            time.sleep(3)  # its clause spoken: the turn is held, the engine idle
            body = json.dumps({"model": "tts-1", "input": "Hello there, how are you today?",
                               "voice": "alloy", "response_format": "pcm"})
            connection = http.client.HTTPConnection("127.0.0.1", args.port)
            for _ in range(args.batches):
                statuses: dict[int, int] = {}
                cpu, wall = server_cpu_seconds(server.pid), time.perf_counter()
                for _ in range(args.requests):
                    if args.health:
                        connection.request("GET", "/health")
                    else:
                        connection.request("POST", "/v1/audio/speech", body,
                                           {"Content-Type": "application/json"})
                    response = connection.getresponse()
                    response.read()
                    statuses[response.status] = statuses.get(response.status, 0) + 1
                wall = time.perf_counter() - wall
                cpu = server_cpu_seconds(server.pid) - cpu
                print(f"statuses {statuses}: server CPU {1000 * cpu / args.requests:.3f} ms "
                      f"a request, wall {1000 * wall / args.requests:.3f} ms", flush=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
