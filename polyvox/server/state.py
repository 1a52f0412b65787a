"""What the endpoints share: the config, the served model (once loaded), admission,
metrics, voices; and `LiveStream`, one generation as the endpoints consume it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from polyvox.engine.engine import EngineError
from polyvox.request import AudioChunk
from polyvox.server.admission import Admission, Rejected, Ticket
from polyvox.server.config import ServerConfig
from polyvox.server.errors import APIError
from polyvox.server.metrics import Metrics
from polyvox.server.voice_store import VoiceStore
from polyvox.serving import Served
from polyvox.startup import StartupTimes


class ServerState:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.admission = Admission(config.max_streams, config.max_queued,
                                   config.max_wait_seconds)
        self.metrics = Metrics(self.admission)
        self.loaded: Served | None = None
        self.voices: VoiceStore | None = None  # once the model is loaded
        self.load_error: str | None = None
        self.load_path: Path | None = None  # the engine's saved load model (load_file.py)
        self.startup = StartupTimes()  # how long loading took, by phase (polyvox/startup.py)
        self.tasks: list[asyncio.Task[None]] = []  # the loader's background work, cancelled
        # at shutdown

    @property
    def served(self) -> Served:
        if self.loaded is None or not self.admission.is_ready:
            raise APIError(503, self.load_error or "the server is not ready (loading the "
                           "model or shutting down); retry shortly",
                           headers={"Retry-After": "5"})
        return self.loaded

    async def admit(self, started: float | None = None) -> Ticket:
        """A turn to generate, or APIError 429/503 with Retry-After. `started`: when the
        request's handling began (a refusal's latency counts from there)."""
        asked = time.monotonic()
        try:
            ticket = await self.admission.acquire()
        except Rejected as rejected:
            raise self.refused(rejected, asked if started is None else started) from None
        self.metrics.queue_wait.observe(time.monotonic() - asked)
        return ticket

    def refusal_now(self, started: float) -> APIError | None:
        """The error a request arriving now would be refused with for load (429), counted
        and timed as `admit` does; None if it would start or queue (or the server is not
        ready: that refusal is the endpoint's)."""
        if self.loaded is None or not self.admission.is_ready:
            return None
        try:
            self.admission.check()
        except Rejected as rejected:
            return self.refused(rejected, started)
        return None

    def refused(self, rejected: Rejected, started: float) -> APIError:
        """A refusal as the client gets it, counted and timed from `started`."""
        self.metrics.rejected.labels(rejected.reason).inc()
        self.metrics.refusal.observe(time.monotonic() - started)
        return APIError(rejected.status, rejected.message, code=rejected.reason,
                        headers=rejected.headers)

    def params(self, seed: int, temperature: float | None, speed: float) -> Any:
        try:
            return self.served.params(seed=seed, temperature=temperature, speed=speed)
        except ValueError as error:
            raise APIError(400, str(error)) from None

    def start(self, text: str | AsyncIterator[str], voice: str, params: Any, ticket: Ticket,
              endpoint: str, started: float, normalize: bool = True,
              word_timings: bool = False) -> LiveStream:
        """The stream of an admitted request (it takes over the ticket; never raises).
        `word_timings`: the client wants them (a cluster's replicas then send each
        clause's words with its audio)."""
        assert self.loaded is not None  # a ticket is only handed out once loaded
        chunks = self.loaded.generate(text, voice, params, normalize=normalize,
                                      word_timings=word_timings)
        return LiveStream(self, chunks, ticket, endpoint, started,
                          is_text_complete=isinstance(text, str),
                          sample_rate=self.loaded.sample_rate)


class LiveStream:
    """One request's audio as float arrays. Owns its admission turn: `close()` (always
    call it) aborts the request in the engine if it is still going, gives the turn back
    and records how the stream went."""

    def __init__(self, state: ServerState, chunks: AsyncIterator[AudioChunk], ticket: Ticket,
                 endpoint: str, started: float, is_text_complete: bool,
                 sample_rate: int) -> None:
        self.state, self.endpoint, self.ticket = state, endpoint, ticket
        self.started = started  # when the client asked (TTFA counts from here)
        self.is_text_complete = is_text_complete
        self.sample_rate = sample_rate
        self.num_samples = 0
        self.first_audio_at: float | None = None
        self.outcome: str | None = None  # completed | failed; None while going (or cut)
        self._chunks = chunks
        self._is_closed = False
        self.ends_clause = False  # the chunk last returned by next() ends a clause
        self.clause_index = 0
        self.word_frames: tuple[tuple[int, int], ...] | None = None  # of that chunk's clause
        self.clause_words: Any = None  # ... its words, from a cluster replica (AudioChunk)
        self.restarts_clause = False  # the chunk speaks its clause again (AudioChunk)

    async def next(self) -> np.ndarray | None:
        """The next chunk's new samples [N] float32; None at the end. Raises EngineError
        when the engine refused or failed the request."""
        try:
            chunk = await anext(self._chunks)
        except StopAsyncIteration:
            self.outcome = "completed"
            return None
        except EngineError:
            self.outcome = "failed"
            raise
        self.ends_clause, self.clause_index = chunk.ends_clause, chunk.clause_index
        self.word_frames = chunk.word_frames
        self.clause_words, self.restarts_clause = chunk.clause_words, chunk.restarts_clause
        if self.first_audio_at is None and chunk.samples.numel():
            self.first_audio_at = time.monotonic()
            self.state.metrics.ttfa.labels(self.endpoint).observe(
                self.first_audio_at - self.started)
        samples = chunk.samples.detach().cpu().numpy().astype(np.float32, copy=False)
        self.num_samples += len(samples)
        return samples

    @property
    def audio_seconds(self) -> float:
        return self.num_samples / self.sample_rate

    async def close(self) -> None:
        if self._is_closed:
            return
        self._is_closed = True
        try:
            await self._chunks.aclose()  # type: ignore[attr-defined]
        finally:
            state, metrics = self.state, self.state.metrics
            state.admission.release(self.ticket, record_service=self.is_text_complete)
            outcome = self.outcome or "disconnected"
            metrics.streams.labels(self.endpoint, outcome).inc()
            metrics.audio_seconds.labels(self.endpoint).inc(self.audio_seconds)
            if outcome == "completed" and self.is_text_complete and self.num_samples:
                busy = time.monotonic() - self.ticket.admitted_at
                metrics.rtf.labels(self.endpoint).observe(busy / self.audio_seconds)
