"""A CPU engine lets the server's event loop answer the rest of a burst of arrivals before
it takes the cores for the burst's first step (AsyncEngine's `yield_to_loops`), but only
for a bounded time: a loop that stays busy does not starve the admitted streams."""

from __future__ import annotations

import asyncio
import time

from conftest import make_engine, params

from polyvox.engine.async_engine import AsyncEngine

TEXT = "The quick brown fox jumps over the lazy dog."
# One piece of the loop's own work. Long against a thread's wake-up on a busy machine: a
# round trip that happens to start near a piece's end must not look like an idle loop.
LINK_SECONDS = 0.02


def _first_step_against_busy_loop(model, yield_to_loops: float,
                                  links: int) -> tuple[float, float]:
    """(when the engine's first step began, when the loop's chain of `links` busy
    callbacks ended): the chain starts as the request is sent, as the other handlers
    of a burst would."""
    engine = make_engine(model)
    steps: list[float] = []
    step = engine.step

    def timed_step():
        steps.append(time.monotonic())
        return step()

    engine.step = timed_step  # type: ignore[method-assign]
    runner = AsyncEngine(engine, yield_to_loops=yield_to_loops)

    async def main() -> float:
        loop = asyncio.get_running_loop()
        chain_end = loop.create_future()

        def busy(left: int) -> None:
            time.sleep(LINK_SECONDS)  # holds the loop, not the GIL
            if left:
                loop.call_soon(busy, left - 1)
            else:
                chain_end.set_result(time.monotonic())

        stream = runner.generate(TEXT, "default", params(0, eos_threshold=float("inf")))
        first = asyncio.ensure_future(anext(stream))
        loop.call_soon(busy, links)
        await first
        await stream.aclose()
        await runner.call(lambda: None)  # after the abort (commands run in order)
        return await chain_end

    runner.start()
    try:
        ended = asyncio.run(main())
    finally:
        runner.stop()
    assert engine.is_idle() and engine.check_integrity()
    return steps[0], ended


def test_the_first_step_waits_for_the_loop_to_catch_up(model) -> None:
    began, ended = _first_step_against_busy_loop(model, yield_to_loops=5.0, links=5)
    assert began >= ended


def test_without_yielding_the_engine_steps_while_the_loop_is_busy(model) -> None:
    # The contrast that shows the test above can fail.
    began, ended = _first_step_against_busy_loop(model, yield_to_loops=0.0, links=15)
    assert began < ended


def test_a_loop_that_stays_busy_delays_the_engine_only_for_the_budget(model) -> None:
    began, ended = _first_step_against_busy_loop(model, yield_to_loops=0.05, links=45)
    assert began < ended  # the chain lasts ~0.9 s; the engine waited at most 0.05 s
