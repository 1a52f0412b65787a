"""The server's start imports nothing beside the model load: two threads importing at
once can fail a start ("dictionary changed size during iteration", seen once in CI)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from polyvox.server import app
from polyvox.server.config import ServerConfig
from polyvox.server.state import ServerState


class _Stop(Exception):
    pass


def test_the_resampler_is_imported_after_the_model_not_beside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    def load_served(*args: object) -> None:
        events.append("model")
        time.sleep(0.2)  # long enough for a concurrent import to start meanwhile
        events.append("model loaded")

    def import_module(name: str) -> None:
        events.append(f"import {name}")
        raise _Stop  # the test ends here: nothing after the imports is under test

    monkeypatch.setattr(app, "_load_served", load_served)
    monkeypatch.setattr(app, "importlib", SimpleNamespace(import_module=import_module))
    state = ServerState(ServerConfig(model="piper/joe", data_dir=tmp_path))
    with pytest.raises(_Stop):
        asyncio.run(app.load_engine(state))
    assert events == ["model", "model loaded", "import scipy.signal"]
