"""One engine replica of a polyvox cluster: a Ray Serve deployment around one served model
(the model, its engine, the asyncio runtime), loaded as `polyvox serve` loads it.

The ingress (ingress.py) decides which replica runs a stream and calls it with a `Route`
naming it (router.py); the replica runs what it is given. It reports its load to the
router (`record_routing_stats`): ready, draining, the streams its engine is predicted to
sustain (`limit`), the streams it runs, its listeners behind, its voices.

Calls:
    generate(job)            a stream: first {"clauses": [...]}, then one message per
                             chunk {"samples", "clause_index", "ends_clause", "word_frames"}
    add_text / finish_text   more text of a streamed job (the WebSocket)
    voice_from_audio         a voice prefix made from a recording (the codec encoder)
    register_voice / unregister_voice   the voices the ingress keeps, on every replica
    describe                 id, pid, node, load, the start's phases
    drain                    take no new streams (the ingress stops routing here)
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from polyvox.engine.engine import EngineError
from polyvox.server.config import ServerConfig
from polyvox.startup import StartupTimes, seconds_since_process_start
from polyvox.text.words import ClauseWords, WordTracker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """One stream as the ingress sends it to a replica."""

    request_id: str
    voice: str
    seed: int = 0
    temperature: float | None = None
    speed: float = 1.0
    normalize: bool = True
    text: str | None = None  # the whole text (streamed: the text so far)
    clauses: tuple[str, ...] | None = None  # resumed: the clauses still to speak
    streamed: bool = False  # more text follows through add_text, then finish_text
    skip_clauses: int = 0  # resumed streamed text: its clauses already delivered
    first_clause: int = 0  # the index in the whole text of its first clause (clause seeds)
    # The WebSocket's word timings: each clause's last chunk carries its ClauseWords (its
    # index in the whole text); `text` then stays the whole text even when resumed.
    word_timings: bool = False


@dataclass(frozen=True)
class ReplicaOptions:
    config: ServerConfig
    threads: int = 0  # torch threads (0: torch's default)


class EngineReplica:
    def __init__(self, options: ReplicaOptions) -> None:
        from polyvox.server import load_file
        from polyvox.server.app import _load_served

        self.startup = StartupTimes()
        process = seconds_since_process_start()
        if process is not None:
            self.startup.add("process", process)
        if options.threads:
            torch.set_num_threads(options.threads)
        config = options.config
        self.config = config
        load_path = load_file.load_file(config)
        self.served = _load_served(config, load_path, self.startup)
        self.served.start()
        self.engine = self.served.engine
        self.is_draining = False
        self.running = 0
        self._texts: dict[str, asyncio.Queue[str | None]] = {}
        self.replica_id = _replica_id()
        log.info("replica %s: %s", self.replica_id, self.startup.describe())

    # --- load ------------------------------------------------------------------------------

    @property
    def limit(self) -> int:
        """Streams this replica may run at once: its engine's predicted capacity when
        calibrated, else --max-streams."""
        if self.config.calibrate_seconds > 0 and self.engine.load.is_fitted:
            return max(1, min(self.config.max_streams, self.engine.load.capacity()))
        return self.config.max_streams

    def record_routing_stats(self) -> dict[str, Any]:
        return {"is_ready": True, "is_draining": self.is_draining, "limit": self.limit,
                "running": self.running, "behind": int(self.engine.num_behind),
                "voices": sorted(self.engine.voices)}

    def record_autoscaling_stats(self) -> dict[str, float]:
        """What Serve's autoscaling policy reads (autoscale.py)."""
        return {"streams": float(self.running), "limit": float(self.limit),
                "behind": float(self.engine.num_behind)}

    def describe(self, route: Any = None) -> dict[str, Any]:
        return {"id": self.replica_id, "pid": os.getpid(), "node": _node_id(),
                **self.record_routing_stats(), "model": self.served.name,
                "sample_rate": self.served.sample_rate,
                "samples_per_frame": self.served.samples_per_frame,
                "supports_voice_cloning": self.served.supports_voice_cloning,
                "kv_shape": list(getattr(self.served.family, "kv_shape", ()) or ()),
                "startup_seconds": dict(self.startup.phases)}

    async def drain(self, route: Any = None) -> int:
        """Take no new streams from now on; the streams running now (returned) finish."""
        self.is_draining = True
        return self.running

    # --- streams ---------------------------------------------------------------------------

    async def generate(self, job: Job, route: Any = None) -> AsyncIterator[dict[str, Any]]:
        served = self.served
        try:
            params = served.params(seed=job.seed, temperature=job.temperature,
                                   speed=job.speed)
        except ValueError as error:
            raise EngineError(str(error)) from None
        self.running += 1
        try:
            text: str | AsyncIterator[str]
            clauses: list[str] | None = None
            words = _ClauseWordsOf(served.text_pipeline(job.normalize)) \
                if job.word_timings else None
            if job.streamed:
                text = self._text_of(job.request_id, job.text or "", words)
            elif job.clauses is not None:
                clauses, text = list(job.clauses), ""
            else:
                engine, whole = self.engine, job.text or ""
                clauses = await served.runtime.call(
                    lambda: engine.clauses_of(whole, job.normalize))
                text = ""
            if words is not None and not job.streamed:
                words.feed(job.text or "", end=True)
            yield {"clauses": clauses}
            chunks = served.runtime.generate(text, job.voice, params, request_id=job.request_id,
                                             normalize=job.normalize, clauses=clauses,
                                             skip_clauses=job.skip_clauses,
                                             clause_seed_base=job.first_clause)
            async for chunk in chunks:
                message = {"samples": chunk.samples.detach().cpu().numpy().astype(np.float32,
                                                                                copy=False),
                           "clause_index": chunk.clause_index, "ends_clause": chunk.ends_clause,
                           "word_frames": chunk.word_frames, "sent_at": time.time()}
                if words is not None and chunk.ends_clause:
                    message["clause_words"] = words.take(job.first_clause + chunk.clause_index)
                yield message
        finally:
            self.running -= 1
            self._texts.pop(job.request_id, None)

    def _text_of(self, request_id: str, first: str,
                 words: _ClauseWordsOf | None = None) -> AsyncIterator[str]:
        """A streamed job's text: what it came with, then the pieces add_text brings (each
        one split into its words' clauses first, when the client wants word timings)."""
        pieces: asyncio.Queue[str | None] = asyncio.Queue()
        self._texts[request_id] = pieces

        async def read() -> AsyncIterator[str]:
            if first:
                if words is not None:
                    words.feed(first)
                yield first
            while (piece := await pieces.get()) is not None:
                if words is not None:
                    words.feed(piece)
                yield piece
            if words is not None:
                words.feed("", end=True)

        return read()

    async def add_text(self, request_id: str, piece: str, route: Any = None) -> bool:
        """More text of a streamed job; False when the stream has ended."""
        pieces = self._texts.get(request_id)
        if pieces is None:
            return False
        pieces.put_nowait(piece)
        return True

    async def finish_text(self, request_id: str, route: Any = None) -> bool:
        pieces = self._texts.get(request_id)
        if pieces is None:
            return False
        pieces.put_nowait(None)
        return True

    # --- voices ----------------------------------------------------------------------------

    async def voice_from_audio(self, audio: np.ndarray, sample_rate: int, name: str,
                               route: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """The voice prefix (k, v) of a recording, made by this replica's codec encoder."""
        from polyvox.engine.threads import run_single_threaded

        prefix = await asyncio.to_thread(run_single_threaded, self.served.voice_from_audio,
                                         torch.from_numpy(audio), sample_rate, name)
        return prefix.k.float().numpy(), prefix.v.float().numpy()

    async def register_voice(self, name: str, k: np.ndarray, v: np.ndarray,
                             route: Any = None) -> None:
        from polyvox.models.pocket.voice import VoicePrefix

        await self.unregister_voice(name)  # registered again: the ingress's copy wins
        await self.served.register_voice(
            name, VoicePrefix(torch.from_numpy(k), torch.from_numpy(v), name))

    async def unregister_voice(self, name: str, route: Any = None) -> None:
        if name in self.engine.voices:
            await self.served.unregister_voice(name)

    def __del__(self) -> None:
        served = getattr(self, "served", None)
        if served is not None:
            served.stop()


def _replica_id() -> str:
    try:
        from ray import serve

        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # noqa: BLE001 - outside Serve (tests build a replica directly)
        return f"local-{os.getpid()}"


def _node_id() -> str:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # noqa: BLE001
        return "local"


class _ClauseWordsOf:
    """Which client words each clause of a job speaks (polyvox.text.words): the text goes
    through the engine's own pipeline a second time, which splits it exactly as the
    engine does, so clause k here is the engine's clause k."""

    def __init__(self, pipeline: Any) -> None:
        self.tracker = WordTracker(pipeline)
        self.clauses: dict[int, ClauseWords] = {}

    def feed(self, piece: str, end: bool = False) -> None:
        found = self.tracker.feed(piece) + (self.tracker.flush() if end else [])
        self.clauses.update((clause.index, clause) for clause in found)

    def take(self, index: int) -> ClauseWords | None:
        return self.clauses.pop(index, None)
