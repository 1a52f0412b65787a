"""The cluster's tests run real `polyvox serve --replicas N` processes: each starts its own
local Ray instance and stops it when it stops (tests/server/server_harness.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("ray.serve")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from server_harness import Server, start_server  # noqa: E402


def cluster(server: Server) -> dict[str, Any]:
    return httpx.get(f"{server.url}/v1/cluster", headers=server.headers, timeout=30).json()


def wait_for(server: Server, condition: Any, timeout: float = 60.0) -> dict[str, Any]:
    """/v1/cluster once `condition(it)` holds."""
    deadline = time.monotonic() + timeout
    while True:
        state = cluster(server)
        if condition(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"the cluster never got there: {state}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def pocket_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """2 replicas of the small random-weights Pocket model (it clones voices), one stream
    each, a queue of 2 and a long --max-wait: the admission tests fill it exactly."""
    running = start_server(tmp_path_factory.mktemp("cluster"), "--replicas", "2",
                           "--max-streams", "1", "--max-queued", "2", "--max-wait", "60",
                           "--no-eos")
    yield running
    running.stop()
