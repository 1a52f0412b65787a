"""Servers for the tests: real `python -m polyvox.server` processes on free ports, with
the small random-weights model (its audio is noise, but the pipeline is the real one and
the audio is deterministic per seed)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

MODEL = "pocket/english_2m"
SAMPLE_RATE = 24000
START_TIMEOUT_SECONDS = 120


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    data_dir: Path
    api_key: str | None = None
    args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/v1/audio/stream"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def state(self) -> dict:
        """GET /debug/state (servers started with --debug-state)."""
        return httpx.get(f"{self.url}/debug/state", headers=self.headers, timeout=30).json()

    def metric(self, series: str) -> float:
        """One series' value in /metrics (0 before it has a sample), e.g.
        'polyvox_streams_total{endpoint="websocket",outcome="cancelled"}'."""
        for line in httpx.get(f"{self.url}/metrics", timeout=30).text.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0

    def wait_idle(self, timeout: float = 15.0) -> dict:
        deadline = time.monotonic() + timeout
        state = self.state()
        while not (state["is_idle"] and state["admission_running"] == 0
                   and state["admission_queued"] == 0):
            if time.monotonic() > deadline:
                raise AssertionError(f"the engine did not go idle: {state}")
            time.sleep(0.05)
            state = self.state()
        return state

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(directory: Path, *args: str, data_dir: Path | None = None,
                 api_key_env: str | None = None, wait_ready: bool = True,
                 port: int | None = None) -> Server:
    """Start a server (on `port`, else a free one); with wait_ready, return once GET
    /ready answers 200."""
    port = port or free_port()
    data_dir = data_dir or directory / "data"
    log_path = directory / f"server-{port}.log"
    env = {k: v for k, v in os.environ.items() if k != "POLYVOX_API_KEY"}
    if api_key_env is not None:
        env["POLYVOX_API_KEY"] = api_key_env
    command = [sys.executable, "-m", "polyvox.server", "--model", MODEL, "--port", str(port),
               "--data-dir", str(data_dir), "--log-level", "warning",
               "--calibrate-seconds", "0", *args]  # NOTE: admission tests set their own
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = Server(f"http://127.0.0.1:{port}", process, log_path, data_dir, api_key_env,
                    tuple(args))
    if "--api-key" in args:
        server.api_key = args[args.index("--api-key") + 1]
    if wait_ready:
        wait_until(server, "/ready")
    return server


def wait_until(server: Server, path: str, timeout: float = START_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"the server exited ({server.process.returncode}):\n"
                                 f"{server.log()}")
        try:
            if httpx.get(server.url + path, headers=server.headers, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    server.stop()
    raise AssertionError(f"{path} not ready within {timeout} s:\n{server.log()}")
