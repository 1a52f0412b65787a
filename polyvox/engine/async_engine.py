"""AsyncEngine: the asyncio face of the engine.

The engine runs in one background thread (the only thread that touches it); asyncio code
sends it commands and receives audio chunks on per-request queues. A stream that its
consumer stops reading (client disconnect, cancellation) is aborted, and its blocks and
slots are free within one engine step.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from polyvox.engine.engine import Engine, EngineError
from polyvox.engine.threads import single_threaded_openmp
from polyvox.request import AudioChunk

T = TypeVar("T")

# A loop that answers a call from the engine thread this fast has nothing else queued.
LOOP_CAUGHT_UP_SECONDS = 0.001


class AsyncEngine:
    def __init__(self, engine: Engine, idle_wait: float = 0.05,
                 yield_to_loops: float = 0.0) -> None:
        """`yield_to_loops`: after new requests arrive, wait up to this many seconds before
        the next step for the event loops to catch up, so that where the engine's kernels
        and the loops share the cores (a CPU engine), the rest of a burst of arrivals is
        answered (refused or admitted) before the engine takes them; 0: never. The burst's
        admitted requests get their first step that much later."""
        self.engine = engine
        self._yield_to_loops = yield_to_loops
        self._arrived = False  # a request was added since the last step (engine thread)
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[AudioChunk]]] = {}
        self._idle_wait = idle_wait
        self._thread: threading.Thread | None = None
        self._restore_openmp: tuple[int, Callable[[], None]] | None = None
        self.step_error: BaseException | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the engine thread. The calling thread (usually the one that loaded the
        model) gives up its OpenMP workers until stop(), so that the engine's parallel
        regions keep spinning workers (polyvox/engine/threads.py)."""
        if self._thread is None:
            if self._restore_openmp is None:
                self._restore_openmp = (threading.get_ident(), single_threaded_openmp())
            self._thread = threading.Thread(target=self._loop, name="polyvox-engine", daemon=True)
            self._thread.start()

    @property
    def is_running(self) -> bool:
        """The engine thread is stepping the engine (nothing else may touch it)."""
        return self._thread is not None

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._restore_openmp is not None and self._restore_openmp[0] == threading.get_ident():
            self._restore_openmp[1]()
            self._restore_openmp = None

    def _loop(self) -> None:
        # Audio goes to its stream as soon as its decoder call is done, mid-step (only while
        # this loop steps the engine: a caller stepping it directly gets chunks from step()).
        self.engine.on_chunks = self._deliver_all
        try:
            self._run()
        finally:
            self.engine.on_chunks = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._run_commands()
            if self._arrived and self._yield_to_loops > 0:
                self._let_loops_catch_up(self._yield_to_loops)
                self._run_commands()  # what the loops sent meanwhile (the rest of a burst)
            self._arrived = False
            if not self.engine.has_work():
                self._wake.wait(self._idle_wait)
                self._wake.clear()
                continue
            try:
                chunks = self.engine.step()
            except BaseException as error:  # an engine bug: fail every stream loudly
                self.step_error = error
                failed = list(self.engine.requests)
                for request_id in failed:
                    self.engine.abort(request_id)
                self._deliver_all([AudioChunk(rid, _empty(), 0, 0, 0.0, is_last=True,
                                              error=f"engine failure: {error!r}")
                                   for rid in failed])
                continue
            self._deliver_all(chunks)

    def _run_commands(self) -> None:
        while True:
            try:
                self._commands.get_nowait()()
            except queue.Empty:
                return

    def _let_loops_catch_up(self, budget: float) -> None:
        """Wait, at most `budget` seconds, until every event loop with a live stream
        answers a round trip within `LOOP_CAUGHT_UP_SECONDS`: it has nothing else queued."""
        deadline = time.monotonic() + budget
        # NOTE: list() copies at once: the loops' threads pop from _streams meanwhile.
        for loop in {target[0] for target in list(self._streams.values())}:
            while True:
                answered = threading.Event()
                sent = time.monotonic()
                try:
                    loop.call_soon_threadsafe(answered.set)
                except RuntimeError:
                    break  # that loop is closed
                if not answered.wait(max(0.0, deadline - sent)):
                    return
                if time.monotonic() - sent < LOOP_CAUGHT_UP_SECONDS:
                    break

    def _deliver_all(self, chunks: list[AudioChunk]) -> None:
        """Hand a step's chunks to their streams with one wake-up per event loop: every
        wake-up steals a core from the engine's parallel kernels."""
        batches: dict[asyncio.AbstractEventLoop, list[tuple[Any, AudioChunk]]] = {}
        for chunk in chunks:
            target = self._streams.get(chunk.request_id)
            if target is None:
                continue
            if chunk.is_last:
                self._streams.pop(chunk.request_id, None)
            batches.setdefault(target[0], []).append((target[1], chunk))
        for loop, items in batches.items():
            loop.call_soon_threadsafe(_put_all, items)

    async def call(self, function: Callable[[], T]) -> T:
        """Run `function` on the engine thread and return its result (or raise its error)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def run() -> None:
            try:
                result = function()
            except BaseException as error:
                loop.call_soon_threadsafe(_set_exception, future, error)
            else:
                loop.call_soon_threadsafe(_set_result, future, result)

        self._commands.put(run)
        self._wake.set()
        return await future

    # --- requests --------------------------------------------------------------------------

    async def generate(self, text: str | AsyncIterator[str], voice: str, params: Any,
                       request_id: str | None = None, normalize: bool = True,
                       clauses: Sequence[str] | None = None,
                       skip_clauses: int = 0,
                       clause_seed_base: int | None = None) -> AsyncIterator[AudioChunk]:
        """Audio chunks of one request, as they are decoded. Raises EngineError before the
        first chunk if the engine refuses the request, and at the end if it failed.
        `clauses`, `skip_clauses`, `clause_seed_base`: as Engine.add_request."""
        chunks: asyncio.Queue[AudioChunk] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        streamed = not isinstance(text, str)

        added: list[str] = []
        handed_in = self.engine.clock()

        def add() -> str:
            request = self.engine.add_request("" if streamed else text, voice, params,  # type: ignore[arg-type]
                                              request_id, text_complete=not streamed,
                                              normalize=normalize, clauses=clauses,
                                              skip_clauses=skip_clauses,
                                              clause_seed_base=clause_seed_base,
                                              handed_in=handed_in)
            self._streams[request.request_id] = (loop, chunks)
            added.append(request.request_id)
            self._arrived = True
            return request.request_id

        try:
            rid = await self.call(add)
        except asyncio.CancelledError:
            # NOTE: the caller left while `add` waited its turn: it still runs (commands
            # run in order), so this command, queued after it, aborts what it added. A
            # streamed request would otherwise wait for text for ever, holding its slot.
            self._commands.put(lambda: [self._abort_now(added_id) for added_id in added])
            self._wake.set()
            raise
        feeder = asyncio.create_task(self._feed(rid, text)) if streamed else None  # type: ignore[arg-type]
        finished = False
        try:
            while True:
                chunk = await chunks.get()
                if chunk.is_last:
                    finished = True
                    if chunk.error:
                        raise EngineError(chunk.error)
                    return
                yield chunk
        finally:
            if feeder is not None:
                feeder.cancel()
            if not finished:
                self.abort(rid)

    async def _feed(self, request_id: str, pieces: AsyncIterator[str]) -> None:
        try:
            async for piece in pieces:
                await self.call(lambda p=piece: self.engine.add_text(request_id, p))
            await self.call(lambda: self.engine.finish_text(request_id))
        except EngineError:
            pass  # the request ended meanwhile (aborted or failed)
        except Exception as error:  # a piece the text path cannot take: end the stream
            # loudly, never leave its listener waiting for text that will not come
            message = f"the text could not be read: {error!r}"
            await self.call(lambda: self.engine.fail(request_id, message))

    def abort(self, request_id: str) -> None:
        """Abort from any thread; takes effect before the next engine step."""
        self._streams.pop(request_id, None)
        self._commands.put(lambda: self.engine.abort(request_id))
        self._wake.set()

    def _abort_now(self, request_id: str) -> None:
        """Abort on the engine thread."""
        self._streams.pop(request_id, None)
        self.engine.abort(request_id)


def _put_all(items: list[tuple[Any, AudioChunk]]) -> None:
    for queue_, chunk in items:
        queue_.put_nowait(chunk)


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _empty() -> Any:
    import torch

    return torch.zeros(0)
