"""How long a start took, by phase: what `polyvox serve` prints once ready and `GET
/ready` reports, so a slow start says where its time went (issue #23: fast replica
start).

Phases of a server's start, in order:
    process   interpreter start and the server's imports (torch among them), until the
              model starts loading
    imports   the model's own code (Piper: onnx, onnxruntime, the phonemizer)
    files read      the model's files into memory (weights memory-mapped: into the page
                    cache, whose pages replicas on one machine share)
    weights placed  modules built, weights put in them (precision, prepacking), onnx
                    sessions made: the rest of loading the model
    kernels   the compiled CPU kernels (autoregressive families on CPU): built once per
              machine and torch version (polyvox prefetch), loaded afterwards
    engine    the engine built around it (KV cache, decoder slots; CUDA graphs captured)
    calibration  admission's first-start calibration (absent when a saved one was loaded)
    warm-up   one short request to its first audio (compiled kernels loaded or built,
              first calls of every stage), so the first caller does not pay for them
    voices    the voices added through the API, loaded from --data-dir
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


def seconds_since_process_start() -> float | None:
    """How long this process has run (Linux: from /proc), None where that is unknown."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            # the command name (field 2) may hold spaces: count fields after its ")"
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as uptime:
            up = float(uptime.read().split()[0])
        return max(0.0, up - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class StartupTimes:
    """Seconds per phase, in the order they ran."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + max(0.0, seconds)

    @contextmanager
    def measure(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - began)

    @contextmanager
    def collecting(self) -> Iterator[None]:
        """Parts of the code run inside (a model's loader) add their `startup_part`s here."""
        token = _COLLECTING.set(self)
        try:
            yield
        finally:
            _COLLECTING.reset(token)

    @property
    def total(self) -> float:
        return sum(self.phases.values())

    def describe(self) -> str:
        """One line: 'ready in 3.2 s (process 1.1 s, model 0.9 s, ...)'."""
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.phases.items())
        return f"ready in {self.total:.1f} s ({parts})"


_COLLECTING: ContextVar[StartupTimes | None] = ContextVar("polyvox_startup", default=None)


@contextmanager
def startup_part(name: str) -> Iterator[None]:
    """Time a part of a start (e.g. "files read" inside a model's loader) into the
    StartupTimes that is collecting, if any: a no-op outside a start."""
    times = _COLLECTING.get()
    if times is None:
        yield
    else:
        with times.measure(name):
            yield
