"""The cluster's tests run real `polyvox serve --replicas N` processes: each starts its own
local Ray instance and stops it when it stops (tests/server/server_harness.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray.serve")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from server_harness import Server, start_server  # noqa: E402


@pytest.fixture(scope="module")
def pocket_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """2 replicas of the small random-weights Pocket model (it clones voices), one stream
    each, a queue of 2 and a long --max-wait: the admission tests fill it exactly."""
    running = start_server(tmp_path_factory.mktemp("cluster"), "--replicas", "2",
                           "--max-streams", "1", "--max-queued", "2", "--max-wait", "60",
                           "--no-eos")
    yield running
    running.stop()
