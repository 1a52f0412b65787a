"""A killed ingress leaves nothing that breaks the next start: `kill -9` during the start
(Ray coming up) and once ready; each next start on the same --data-dir is ready, and the
Ray agent processes a killed local instance leaves behind are stopped by it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from server_harness import start_server, wait_until

from polyvox.cluster.deploy import ORPHAN_AGENTS


def orphaned_agents() -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            name = (entry / "cmdline").read_bytes().split(b"\0")[0].strip()
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == 1 and name in ORPHAN_AGENTS:
            found.append(int(entry.name))
    return found


def test_a_killed_ingress_does_not_break_the_next_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    starting = start_server(tmp_path, "--replicas", "1", data_dir=data, wait_ready=False)
    time.sleep(4)  # Ray is starting (or the replica loading)
    os.kill(starting.process.pid, signal.SIGKILL)
    starting.process.wait()
    ready = start_server(tmp_path, "--replicas", "1", data_dir=data)
    os.kill(ready.process.pid, signal.SIGKILL)
    ready.process.wait()
    deadline = time.monotonic() + 15
    while not orphaned_agents() and time.monotonic() < deadline:
        time.sleep(0.2)  # the killed instance's raylet goes; Ray 2.60 leaves its agents
    left = orphaned_agents()
    again = start_server(tmp_path, "--replicas", "1", data_dir=data)
    try:
        wait_until(again, "/ready")
        assert not set(left) & set(orphaned_agents())  # the new start stopped them
    finally:
        again.stop()
    time.sleep(1)
    assert orphaned_agents() == []  # and a clean stop leaves none


@pytest.fixture(autouse=True)
def _no_agents_left_before() -> None:
    for pid in orphaned_agents():  # an earlier test's leftovers must not count here
        os.kill(pid, signal.SIGKILL)
