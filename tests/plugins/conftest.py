"""The plugins' tests run real `polyvox serve` processes (tests/server/server_harness.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from server_harness import Server, start_server  # noqa: E402


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with the small random-weights model and /debug/state."""
    running = start_server(tmp_path_factory.mktemp("plugins"), "--debug-state")
    yield running
    running.stop()
