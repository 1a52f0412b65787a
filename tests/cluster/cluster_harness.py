"""Helpers of the cluster's tests: GET /v1/cluster, and waiting for a state of it."""

from __future__ import annotations

import time
from typing import Any

import httpx
from server_harness import Server


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
