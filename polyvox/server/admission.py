"""Admission control: who may generate now, who waits, who is told to come back later.

NOTE (the rule): at most `current_limit` streams generate at once: the fewest of
`max_running`, the streams the engine is predicted to sustain in real time (`capacity`,
the engine's load model: polyvox/engine/load.py) and a reactive limit. A request that
finds a free turn, nobody waiting and no listener behind starts at once. Otherwise it
waits in a FIFO queue, so queued requests start in arrival order, unless
  - the queue already holds `max_queued` requests, or
  - its estimated wait exceeds `max_wait_seconds`, or the wait the engine's TTFA line
    leaves it (`wait_budget`: the TTFA target less the first audio predicted once its
    turn comes, so a queued caller still hears audio in time): position / limit x the
    mean time a stream holds its turn (an exponential average over finished streams;
    3 s before any has finished), times how much longer than so estimated the recent
    queued requests waited (an exponential average too, from 1: a turn can come later
    than a stream's mean says, e.g. while listeners behind hold everyone back; it fades
    back towards 1 with a half-life of 30 s without a queued request to measure),
in which case it is refused at once with 429, a Retry-After and a Retry-After-Ms (see
`retry_after_ms`: refused callers are spread over time, not sent back together). Before
the model is loaded and while shutting down every request is refused with 503. A refused
or queued request holds nothing in the engine: the engine sees a request only once it
has its turn.

The prediction keeps listeners from falling behind; the reactive limit is the safety net
for when it was wrong: `pressure()` (from the engine) says whether admitted listeners are
behind real time. While it does, nobody is let in and a stream that finishes is not
replaced (the reactive limit drops to what still runs); while it does not, each finished
stream raises the reactive limit by one, up to `max_running`. Queued requests are let in
as turns free up and as the prediction grows (`let_in`, also called periodically).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

SERVICE_AVERAGING = 0.2  # weight of the newest finished stream in the mean service time
NOT_READY_RETRY_SECONDS = 5
PRIOR_SERVICE_SECONDS = 3.0  # a turn's length before any has ended: a sentence or two
WAIT_AVERAGING = 0.2  # weight of the newest queued request in the waits' averages
WAIT_RATIO_BOUNDS = (0.5, 20.0)  # measured / estimated waits, as the estimates are scaled
WAIT_RATIO_HALF_LIFE_SECONDS = 30.0  # without new waits the ratio fades back towards 1
RETRY_SPREAD = 1.0  # a refusal's wait is stretched by a random 0 to this share of itself


class Rejected(Exception):
    """The request is refused; nothing was allocated for it."""

    def __init__(self, status: int, reason: str, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message
        self.retry_after_ms = retry_after_ms  # the Retry-After-Ms header
        # Retry-After: whole seconds, never sooner than the milliseconds
        self.retry_after = max(1, math.ceil(retry_after_ms / 1000))

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after),
                "Retry-After-Ms": str(self.retry_after_ms)}


@dataclass
class Ticket:
    """A turn to generate; give it back with `Admission.release`."""

    admitted_at: float = field(default_factory=time.monotonic)
    is_released: bool = False


class Admission:
    def __init__(self, max_running: int, max_queued: int, max_wait_seconds: float) -> None:
        self.max_running, self.max_queued = max_running, max_queued
        self.max_wait_seconds = max_wait_seconds
        self.limit = max_running  # reactive: between 1 and max_running (see the module doc)
        self.pressure: Callable[[], bool] | None = None  # listeners falling behind?
        self.capacity: Callable[[], int] | None = None  # streams the engine sustains
        # seconds a request may wait for a turn among this many streams and still hear
        # its first audio in time (None: only max_wait_seconds bounds the wait)
        self.wait_budget: Callable[[int], float | None] | None = None
        self.num_running = 0
        self.mean_service_seconds: float | None = None  # None until a stream finished
        self.is_ready = False
        self._queue: deque[asyncio.Future[None]] = deque()
        # exponential averages of queued requests' estimated and measured waits (seconds;
        # their ratio is what counts, so starting from zero weighs the first one fully)
        self._waits = (0.0, 0.0)
        self._waited_at = 0.0  # when the last queued request got its turn
        self.clock: Callable[[], float] = time.monotonic
        self.random = random.Random()  # the refusals' spread (seeded in tests)

    @property
    def num_queued(self) -> int:
        return len(self._queue)

    @property
    def current_limit(self) -> int:
        """Streams that may generate at once now (see the module doc)."""
        predicted = self.max_running if self.capacity is None else self.capacity()
        return max(1, min(self.limit, predicted))

    @property
    def headroom(self) -> int:
        """Streams that could be admitted right now without waiting."""
        if not self.is_ready or self._is_pressed():
            return 0
        return max(0, self.current_limit - self.num_running - len(self._queue))

    @property
    def wait_ratio(self) -> float:
        """How much longer than estimated from the streams' mean the recent queued
        requests waited (1 before any has), faded towards 1 since the last one."""
        if self._waits[0] <= 0:
            return 1.0
        low, high = WAIT_RATIO_BOUNDS
        ratio = min(high, max(low, self._waits[1] / self._waits[0]))
        fade = 0.5 ** ((self.clock() - self._waited_at) / WAIT_RATIO_HALF_LIFE_SECONDS)
        return 1.0 + (ratio - 1.0) * fade

    def estimated_wait(self, position: int) -> float:
        """Seconds until the `position`-th queued request (1 = next) gets its turn."""
        return self._mean_wait(position) * self.wait_ratio

    def _mean_wait(self, position: int) -> float:
        """The wait the mean time a stream holds its turn gives (`estimated_wait` before
        the measured correction)."""
        service = self.mean_service_seconds
        if service is None:  # no stream finished yet
            service = PRIOR_SERVICE_SECONDS
        return position / self.current_limit * service

    def record_wait(self, estimated: float, measured: float) -> None:
        """A queued request got its turn after `measured` seconds; `_mean_wait` had said
        `estimated`."""
        self._waited_at = self.clock()
        old_estimated, old_measured = self._waits
        self._waits = ((1 - WAIT_AVERAGING) * old_estimated + WAIT_AVERAGING * estimated,
                       (1 - WAIT_AVERAGING) * old_measured + WAIT_AVERAGING * measured)

    @property
    def wait_limit(self) -> float:
        """The longest estimated wait a request may queue for now."""
        budget = None if self.wait_budget is None else self.wait_budget(self.current_limit)
        return self.max_wait_seconds if budget is None else min(self.max_wait_seconds, budget)

    def retry_after(self) -> float:
        """Seconds until a request would likely be let in: until a turn frees up, or until
        the queue has drained below the wait limit (at least 1)."""
        excess = self.estimated_wait(self.num_queued + 1) - self.wait_limit
        return max(1.0, excess, self.estimated_wait(1))

    def retry_after_ms(self) -> int:
        """A refused caller's Retry-After-Ms: `retry_after` stretched by a random share of
        itself, up to RETRY_SPREAD.

        NOTE: callers refused together (a burst, or callers who were refused together
        before) and told the same wait come back together, and the server must answer
        them all at once again, on the cores the engine uses: on this 2-core box such
        waves made the 429's p99. Spread, they come back one by one. Never sooner than
        the prediction says (earlier retries only make more refusals), and the whole-second
        Retry-After is rounded up from this, so a client that reads only it comes back
        no sooner either. OpenAI's clients read Retry-After-Ms first."""
        stretch = 1.0 + RETRY_SPREAD * self.random.random()
        return math.ceil(1000 * self.retry_after() * stretch)

    def check(self) -> None:
        """Raise Rejected when a request arriving now would be refused."""
        if not self.is_ready:
            raise Rejected(503, "not_ready", "the server is not ready (loading the model or "
                           "shutting down); retry shortly", 1000 * NOT_READY_RETRY_SECONDS)
        if self._has_room():
            return
        if len(self._queue) >= self.max_queued:
            raise Rejected(429, "queue_full", f"too many requests: {self.num_running} streams "
                           f"running and {len(self._queue)} queued (the limit); retry later",
                           self.retry_after_ms())
        wait, limit = self.estimated_wait(len(self._queue) + 1), self.wait_limit
        if wait > limit:
            raise Rejected(429, "wait_too_long", f"too many requests: the estimated wait is "
                           f"{wait:.2f} s, over the {limit:.2f} s limit; retry later",
                           self.retry_after_ms())

    async def acquire(self) -> Ticket:
        """Wait for a turn (FIFO); raises Rejected at once when refused."""
        self.check()
        if self._has_room():
            self.num_running += 1
            return Ticket()
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        estimated, queued_at = self._mean_wait(len(self._queue)), self.clock()
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._give_back()  # the turn was handed to us as we gave up: pass it on
            else:
                self._queue.remove(turn)
            raise
        self.record_wait(estimated, self.clock() - queued_at)
        return Ticket()

    def release(self, ticket: Ticket, record_service: bool = True) -> None:
        """Give a turn back (idempotent). `record_service`: count how long it was held in
        the mean service time (not for WebSocket utterances, which wait on their client)."""
        if ticket.is_released:
            return
        ticket.is_released = True
        if record_service:
            held = time.monotonic() - ticket.admitted_at
            mean = self.mean_service_seconds
            self.mean_service_seconds = held if mean is None else (
                (1 - SERVICE_AVERAGING) * mean + SERVICE_AVERAGING * held)
        self._adapt()
        self._give_back()

    def _is_pressed(self) -> bool:
        return self.pressure is not None and self.num_running > 0 and self.pressure()

    def _has_room(self) -> bool:
        return (self.num_running < self.current_limit and not self._queue
                and not self._is_pressed())

    def _adapt(self) -> None:
        """At a release: hold the limit at what still runs while listeners fall behind,
        else raise it by one (up to max_running)."""
        if self._is_pressed():
            self.limit = max(1, min(self.limit, self.num_running - 1))
        else:
            self.limit = min(self.max_running, self.limit + 1)

    def _give_back(self) -> None:
        """A turn ends: the oldest waiters get turns while there is room."""
        self.num_running -= 1
        self.let_in()

    def let_in(self) -> None:
        """Give the oldest waiters turns while there is room (at a release, and
        periodically: the predicted capacity grows as the engine learns)."""
        while self._queue and self.num_running < self.current_limit and not self._is_pressed():
            turn = self._queue.popleft()
            if not turn.done():
                self.num_running += 1
                turn.set_result(None)
