"""Fixtures: the shared live server (see server_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from server_harness import Server, start_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The shared server: default limits, but a long --max-wait (its tests start more
    streams at once than it admits, and want them queued, not refused), /debug/state on."""
    running = start_server(tmp_path_factory.mktemp("server"), "--debug-state", "--max-wait",
                           "60")
    yield running
    running.stop()
