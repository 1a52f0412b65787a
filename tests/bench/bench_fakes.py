"""Simulated models for the benchmark's tests, with timings known exactly.

- `VirtualClockLoop`: an asyncio loop whose clock jumps to the next timer instead of
  waiting, so a closed loop of simulated streams takes no real time and every time it
  records is exact (the clients read `loop.time()`).
- `ScheduledServed`: a served model whose chunks arrive on a schedule computed from how
  many streams it serves at once (`ScheduledRuntime`), so its real-time capacity is known.
- `SimulatedBaseline`: a pocket-tts stand-in for `baseline_run` (threads, real time), whose
  per-chunk time grows steeply with the number of concurrent streams.
"""

from __future__ import annotations

import asyncio
import selectors
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from polyvox.bench.capacity import MIN_REQUESTS_PER_CLIENT

SAMPLE_RATE = 1000  # samples per second: 250 samples = 0.25 s
CHUNK_SECONDS = 0.25
NUM_CHUNKS = 4  # 1 s of audio per request
FIRST_CHUNK_SECONDS = 0.05  # a lone stream's TTFA


class _VirtualSelector:
    """A selector that, asked to wait for `timeout` seconds with nothing to read, moves
    the loop's clock on by `timeout` instead. Waits without a timeout (a thread handing
    a result back, e.g. at shutdown) are real waits."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None or timeout <= 0:
            return self._real.select(timeout)
        events = self._real.select(0)
        if not events:
            self._loop.now += timeout
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop on a simulated clock, starting at 0 (pass it as `loop_factory`)."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(selector=_VirtualSelector(self))  # type: ignore[arg-type]

    def time(self) -> float:
        return self.now


def run_virtual(coroutine: Any) -> Any:
    """Run `coroutine` to the end on a virtual clock."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(coroutine)


def realtime_up_to(streams: int) -> tuple[Callable[[int], float], Callable[[int], float]]:
    """(first-chunk delay, chunk interval) by streams served at once: twice real time up to
    `streams`, half real time beyond (every gap after the first chunk is an underrun)."""
    return (lambda active: FIRST_CHUNK_SECONDS,
            lambda active: CHUNK_SECONDS / 2 if active <= streams else 2 * CHUNK_SECONDS)


class ScheduledRuntime:
    """`runtime.generate` of a simulated model: NUM_CHUNKS chunks of CHUNK_SECONDS each;
    the first after `first_chunk(active)` seconds, the next ones `interval(active)` apart,
    `active` being the number of streams in progress when the wait starts."""

    def __init__(self, first_chunk: Callable[[int], float],
                 interval: Callable[[int], float]) -> None:
        self.first_chunk, self.interval = first_chunk, interval
        self.active = 0
        self.request_ids: list[str] = []

    async def generate(self, text: str, voice: str, params: Any,
                       request_id: str) -> AsyncIterator[SimpleNamespace]:
        self.active += 1
        self.request_ids.append(request_id)
        try:
            await asyncio.sleep(0)  # let every client of a closed loop arrive first
            for index in range(NUM_CHUNKS):
                wait = self.interval if index else self.first_chunk
                await asyncio.sleep(wait(self.active))
                yield SimpleNamespace(samples=torch.zeros(int(CHUNK_SECONDS * SAMPLE_RATE)))
        finally:
            self.active -= 1


@dataclass
class ScheduledServed:
    """A `driver.ServedModel` around a `ScheduledRuntime`."""

    runtime: ScheduledRuntime
    sample_rate: int = SAMPLE_RATE
    is_started: bool = False

    def params(self, seed: int = 0) -> Any:
        return SimpleNamespace(seed=seed)

    def start(self) -> None:
        self.is_started = True

    def stop(self) -> None:
        self.is_started = False


class SimulatedBaseline:
    """A `baseline.Baseline`: chunks of CHUNK_SECONDS, each taking `seconds_per_chunk x
    streams^3` of real time, so its audio throughput is best alone and falls as clients
    are added (as pocket-tts' threads do on a small box)."""

    def __init__(self, seconds_per_chunk: float = 0.002, fail_text: str | None = None) -> None:
        self.sample_rate = SAMPLE_RATE
        self.seconds_per_chunk, self.fail_text = seconds_per_chunk, fail_text
        self.is_eos_disabled = False
        self._active = 0
        self._lock = threading.Lock()

    def stream(self, text: str) -> Iterator[torch.Tensor]:
        with self._lock:
            self._active += 1
        try:
            for _ in range(NUM_CHUNKS):
                if text == self.fail_text:
                    raise RuntimeError("simulated failure")
                time.sleep(self.seconds_per_chunk * self._active**3)
                yield torch.zeros(int(CHUNK_SECONDS * SAMPLE_RATE))
        finally:
            with self._lock:
                self._active -= 1

    def disable_eos(self) -> None:
        self.is_eos_disabled = True


class SimulatedEngines:
    """`inprocess.Engines` over simulated models: one runtime per precision (each keeps
    real time up to `streams` streams), the simulated baseline."""

    def __init__(self, streams: int = 6, baseline: SimulatedBaseline | None = None) -> None:
        self.streams = streams
        self.served: list[tuple[str, str, ScheduledServed]] = []
        self.simulated_baseline = baseline or SimulatedBaseline()

    def serve(self, mode: str, precision: str) -> ScheduledServed:
        served = ScheduledServed(ScheduledRuntime(*realtime_up_to(self.streams)))
        self.served.append((mode, precision, served))
        return served

    def baseline(self) -> SimulatedBaseline:
        return self.simulated_baseline


def texts(index: int) -> str:
    return f"Sentence number {index}."


def probe_requests(concurrency: int, requests_per_client: int = 1) -> int:
    """Requests one capacity probe sends at `concurrency`."""
    return concurrency * max(requests_per_client, MIN_REQUESTS_PER_CLIENT)
