"""A server's start says where its time went (`polyvox serve` prints it once ready, GET
/ready reports it), and its warm-up request leaves nothing behind."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from server_harness import start_server


def test_the_start_is_reported_by_phase_and_the_warm_up_leaves_the_engine_idle(
        tmp_path: Path) -> None:
    began = time.monotonic()
    server = start_server(tmp_path, "--debug-state")
    waited = time.monotonic() - began
    try:
        ready = httpx.get(f"{server.url}/ready", timeout=30).json()
        phases = ready["startup_seconds"]
        # in the order they ran; no calibration (--calibrate-seconds 0)
        assert list(phases) == ["process", "imports", "files read", "weights placed",
                                "kernels", "engine", "warm-up", "voices"]
        assert all(seconds >= 0 for seconds in phases.values())
        # the loading phases happened while the test waited for /ready
        assert sum(seconds for name, seconds in phases.items() if name != "process") < waited
        assert f"ready in {sum(phases.values()):.1f} s (process" in server.log()
        state = server.state()  # the warm-up request is gone, nothing is held
        assert state["is_idle"] and state["is_consistent"]
        assert state["admission_running"] == 0
        response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
            "model": "tts-1", "input": "Hello there.", "voice": "alloy",
            "response_format": "pcm"})
        assert response.status_code == 200 and len(response.content) > 0
    finally:
        server.stop()
