"""A few seconds of synthetic load at start, so admission knows what the engine sustains
before the first caller arrives (a cold load model would let a burst in a stream at a
time while it learned, or, trusting nothing, let everyone in and stall them).

Levels of 1, 2, 4, ... concurrent callers run through the real engine (its steps feed the
load model as served requests' do), each speaking short sentences back to back as a voice
agent's callers do, so that a level pays for requests starting (prefill, a fresh
listener's thin first buffer) and not only for streams already playing, until the model predicts
the engine is full, the level reaches `max_streams`, or the time is up. Listeners are
simulated by the engine's own clock: a level whose streams fell behind real time does
not count as kept up. Every request is aborted at the end of its level: nothing stays
allocated (the engine's integrity check runs after).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from polyvox.engine.engine import Engine
from polyvox.engine.load import LoadModel

WARM_UP_SECONDS = 0.3
LEVEL_SECONDS = 3.0  # of steady load per level, after every stream's first audio

# NOTE: one long paragraph per caller made levels of streams already deep into their
# audio, with no request starting within a level, unlike served traffic. Replies of a few
# seconds each, one to three clauses, turn every caller over about once a level.
SENTENCES = (
    "Thank you for calling, how can I help you today?",
    "Your order shipped this morning and should arrive on Thursday.",
    "I can change the delivery address for you now, if you like.",
    "Let me check that for you. It will only take a moment.",
    "The refund was issued yesterday; it can take three to five days to appear.",
    "Is there anything else I can help you with?",
    "I have booked the appointment for Monday at ten in the morning.",
    "Sorry about the wait. I found your account, and the payment went through.",
)


def calibrate(engine: Engine, voice: str, make_params: Any, max_streams: int,
              seconds: float) -> int:
    """Run levels on `engine` (idle, not yet serving) for about `seconds` of wall time at
    most; returns the capacity the load model then predicts.

    Levels double (1, 2, 4, ...) until one falls behind (a listener's buffer runs out) or
    the model predicts the next would not fit; then they bisect between the most that
    kept up and the fewest that fell behind.
    """
    # NOTE: a stage's first calls are slow (kernels chosen, buffers allocated): a short
    # first run warms them, and the model forgets it.
    _run_level(engine, voice, make_params, 1, 0.0, time.perf_counter() + WARM_UP_SECONDS)
    engine.load = load = LoadModel()
    deadline = time.perf_counter() + seconds
    kept_up, fell_behind = 0, max_streams + 1
    level = 1
    while kept_up < level < fell_behind and time.perf_counter() < deadline:
        if _run_level(engine, voice, make_params, level, LEVEL_SECONDS, deadline):
            fell_behind = level
        else:
            kept_up = level
        is_full = load.is_fitted and load.demand(kept_up + 1) * (1 + load.margin) > 1
        if fell_behind > max_streams and not is_full:
            level = min(2 * level, max_streams)
        else:
            level = (kept_up + min(fell_behind, max_streams + 1)) // 2
    _check_left_nothing(engine, "calibration")
    return load.capacity()


def _run_level(engine: Engine, voice: str, make_params: Any, num_streams: int,
               seconds: float, deadline: float) -> bool:
    """`num_streams` callers back to back (a finished request is replaced at once, as the
    benchmark's closed loop does); the load model learns from the steps once every first
    request has its first audio, for `seconds` or until `deadline`. True when a listener
    fell behind meanwhile."""
    seeds = itertools.count()
    texts = itertools.cycle(SENTENCES)
    requests = [engine.add_request(next(texts), voice, make_params(seed=next(seeds)))
                for _ in range(num_streams)]
    load = engine.load
    load.is_learning = False
    fell_behind = False
    try:
        until = deadline
        while time.perf_counter() < until:
            engine.step()
            fell_behind = fell_behind or (load.is_learning and engine.num_behind > 0)
            for index, request in enumerate(requests):
                if request.status.is_done:
                    requests[index] = engine.add_request(next(texts), voice,
                                                         make_params(seed=next(seeds)))
            if not load.is_learning and all(r.first_audio_time is not None for r in requests):
                load.is_learning = True
                until = min(deadline, time.perf_counter() + seconds)
    finally:
        load.is_learning = False
        _abort_and_drain(engine, [request.request_id for request in requests])
        load.is_learning = True
    return fell_behind


WARM_UP_TEXT = "Hello, how can I help you?"


def warm_up(engine: Engine, voice: str, params: Any) -> None:
    """One short request on `engine` (idle, not yet serving) to its first audio, then
    aborted: the compiled kernels are loaded (or built) and every stage makes its first
    call now, not while the first caller waits. The load model learns nothing from it."""
    load = engine.load
    was_learning, load.is_learning = load.is_learning, False
    request = engine.add_request(WARM_UP_TEXT, voice, params)
    try:
        while request.first_audio_time is None and not request.status.is_done:
            engine.step()
    finally:
        _abort_and_drain(engine, [request.request_id])
        load.is_learning = was_learning
    _check_left_nothing(engine, "the warm-up")


def _abort_and_drain(engine: Engine, request_ids: list[str]) -> None:
    """Abort these requests and step until the aborts took effect (between steps)."""
    for request_id in request_ids:
        engine.abort(request_id)
    while engine.has_work():
        engine.step()


def _check_left_nothing(engine: Engine, what: str) -> None:
    if not engine.is_idle() or not engine.check_integrity():
        raise RuntimeError(f"{what} left the engine holding work: a bug, please report")
