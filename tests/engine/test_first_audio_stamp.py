"""The load model's first audio counts from when the caller handed the request in: a
request handed in while a long step runs waits for that step, and the TTFA cap must
count the wait (the engine's own arrival stamp is taken only after it)."""

from __future__ import annotations

import asyncio
import threading
import time

from conftest import make_engine, params

from polyvox.engine.async_engine import AsyncEngine

TEXT = "The quick brown fox jumps over the lazy dog."
STALL_SECONDS = 0.4  # one engine step held this long while the second caller hands in


def test_first_audio_counts_the_wait_for_the_running_step(model) -> None:
    engine = make_engine(model)
    seen: list[tuple[int, float]] = []
    observe = engine.load.observe_first_audio

    def recorded(other_streams: int, seconds: float) -> None:
        seen.append((other_streams, seconds))
        observe(other_streams, seconds)

    engine.load.observe_first_audio = recorded  # type: ignore[method-assign]
    added = []
    add_request = engine.add_request
    engine.add_request = lambda *a, **k: added.append(add_request(*a, **k)) or added[-1]  # type: ignore[method-assign]
    step = engine.step
    stall, stalling = threading.Event(), threading.Event()

    def stalled_step():
        if stall.is_set():  # the next step takes long (a big batch, a slow decoder call)
            stall.clear()
            stalling.set()
            time.sleep(STALL_SECONDS)
        return step()

    engine.step = stalled_step  # type: ignore[method-assign]
    runner = AsyncEngine(engine, yield_to_loops=0.0)
    endless = float("inf")

    async def main() -> tuple[float, float]:
        first = runner.generate(TEXT, "default", params(0, eos_threshold=endless))
        await anext(first)  # the first caller is playing
        stall.set()
        await asyncio.to_thread(stalling.wait)
        handed_in = time.monotonic()
        second = runner.generate(TEXT, "default", params(1, eos_threshold=endless))
        chunk = await anext(second)
        await second.aclose()
        await first.aclose()
        await runner.call(lambda: None)  # after the aborts (commands run in order)
        return handed_in, chunk.created - handed_in

    runner.start()
    try:
        handed_in, heard = asyncio.run(main())
    finally:
        runner.stop()
    assert engine.is_idle() and engine.check_integrity()
    assert len(seen) == 2 and seen[0][0] == 0 and seen[1][0] == 1
    second = added[1]
    taken_late = second.arrival - handed_in
    assert taken_late > STALL_SECONDS / 2  # the engine took it only after the long step
    # the load model heard what the caller heard, the wait for the running step included
    assert abs(seen[1][1] - heard) < 0.02
    assert seen[1][1] > (second.first_audio_time - second.arrival) + STALL_SECONDS / 2


def test_first_audio_is_learned_against_the_streams_that_shared_the_wait(model) -> None:
    """Callers handed in together share their first steps, whichever the engine took
    first: both count the other. A stream already playing counts for a newcomer, and a
    newcomer does not count for it."""
    engine = make_engine(model)
    endless = float("inf")
    first = engine.add_request(TEXT, "default", params(0, eos_threshold=endless))
    second = engine.add_request(TEXT, "default", params(1, eos_threshold=endless))
    assert (first.streams_sharing, second.streams_sharing) == (1, 1)
    while first.first_audio_time is None or second.first_audio_time is None:
        engine.step()
    third = engine.add_request(TEXT, "default", params(2, eos_threshold=endless))
    assert (first.streams_sharing, second.streams_sharing, third.streams_sharing) == (1, 1, 2)
    for request in (first, second, third):
        engine.abort(request.request_id)
    while engine.has_work():
        engine.step()
    assert engine.is_idle() and engine.check_integrity()
