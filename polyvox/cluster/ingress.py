"""The ingress of a polyvox cluster: what the HTTP/WebSocket server serves when its
engines are Ray Serve replicas (replica.py) instead of one engine in its own process.

`ClusterServed` stands where a `Served` model stands in the single-box server
(polyvox/serving.py), so the endpoints, the page, the voice store and admission are the
same code. What it adds:

- The cluster's view: the replicas Serve runs (read from the router, router.py), what
  each reports (its limit, its listeners behind, draining) and the streams this ingress
  runs on each (counted here, exactly, as every stream passes through it).
- Admission across the cluster: the server's one FIFO admission (server/admission.py)
  with `capacity()` = the streams the ready replicas can take, so a request waits only
  while no replica has a free turn, and starts on whichever frees first. Before any
  replica is ready every request gets 503.
- Routing: a stream goes to the first replica `rank_replicas` (routing.py) picks.
- Streams that survive their replica: the ingress keeps a stream's clauses and how many
  were fully delivered. When its replica dies (killed, node lost) the stream continues
  on another from the first clause not fully delivered: a clause cut mid-way is spoken
  again from its beginning, faded in over `RESUME_FADE_SECONDS`, so the listener hears
  the cut clause's start twice but loses no clause and hears no finished clause again.
  Each clause of a cluster stream is seeded on its own (its index in the text and the
  request's seed), so a restarted clause samples the same noise as the first time; where
  clauses are chained (a clause reads its predecessors' context, the Pocket default) the
  restarted one starts from the voice alone, so its prosody may differ a little. A
  streamed text (the WebSocket) starts again with all of its text so far and its
  delivered clauses skipped (the text is split again the same way), and its later pieces
  follow it.
- Voices: the voices added through the API live here and are registered on every
  replica, also on replicas that join later (a replacement, a scale-up) before they take
  a stream.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray.exceptions import RayActorError, RayTaskError

from polyvox.bench.metrics import percentile
from polyvox.cluster.replica import Job
from polyvox.cluster.router import ROUTERS, Route, load_of
from polyvox.cluster.routing import ReplicaLoad, rank_replicas
from polyvox.engine.engine import EngineError
from polyvox.request import AudioChunk
from polyvox.serving import DEFAULT_VOICE, check_speed, require_voice_cloning

log = logging.getLogger(__name__)
RESUME_FADE_SECONDS = 0.02  # the fade-in of a clause restarted on another replica
HOPS_KEPT = 2000  # the latest chunks whose replica-to-ingress time GET /v1/cluster sums up
_ids = itertools.count(1)


@dataclass(frozen=True)
class JobParams:
    """A request's parameters as the ingress checks and forwards them (each replica makes
    its family's parameters from them)."""

    seed: int = 0
    temperature: float | None = None
    speed: float = 1.0


@dataclass
class ReplicaView:
    """The ingress's record of one replica."""

    replica_id: str
    state: str = "starting"  # starting (voices being pushed), ready, draining
    reported: ReplicaLoad | None = None
    streams: int = 0  # streams this ingress runs on it now
    served: int = 0  # streams it was given in all
    pid: int | None = None
    node: str | None = None
    startup_seconds: dict[str, float] = field(default_factory=dict)

    def load(self) -> ReplicaLoad:
        reported = self.reported or ReplicaLoad(self.replica_id)
        return replace(reported, replica_id=self.replica_id, running=self.streams,
                       is_ready=self.state != "starting",
                       is_draining=self.state == "draining" or reported.is_draining)

    def describe(self) -> dict[str, Any]:
        load = self.load()
        return {"id": self.replica_id, "pid": self.pid, "node": self.node,
                "state": "draining" if load.is_draining else self.state,
                "streams": self.streams, "streams_served": self.served,
                "limit": load.limit, "listeners_behind": load.behind,
                "voices": sorted(load.voices), "startup_seconds": self.startup_seconds}


class ClusterServed:
    """The served model of a cluster ingress (see the module doc)."""

    def __init__(self, handle: Any, deployment: str, info: dict[str, Any],
                 on_stop: Callable[[], None] | None = None) -> None:
        self.handle, self.deployment, self.on_stop = handle, deployment, on_stop
        self.name = str(info["model"])
        self.sample_rate = int(info["sample_rate"])
        self.samples_per_frame = int(info["samples_per_frame"])  # word timings' frames
        self.supports_voice_cloning = bool(info["supports_voice_cloning"])
        self.kv_shape = tuple(info.get("kv_shape") or ())
        self.builtin_voices = {DEFAULT_VOICE}
        self.replicas: dict[str, ReplicaView] = {}
        self.voices: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # added through the API
        self.failovers = 0  # streams moved off a dead replica
        self.recoveries: list[float] = []  # seconds from a replica's death to the next audio
        # seconds from a replica sending a chunk to the ingress having it (wall clocks: on
        # several machines, their skew is in it too)
        self.hops: deque[float] = deque(maxlen=HOPS_KEPT)
        self._refreshing = asyncio.Lock()

    # --- what the server reads (as of Served) ----------------------------------------------

    def params(self, seed: int = 0, temperature: float | None = None,
               speed: float = 1.0) -> JobParams:
        check_speed(speed)
        return JobParams(seed, temperature, speed)

    def voice_names(self) -> list[str]:
        return sorted(self.builtin_voices | set(self.voices))

    def start(self) -> None:
        pass

    def stop(self) -> None:
        if self.on_stop is not None:  # the deployment's end (deploy.py)
            self.on_stop()

    async def engine_state(self) -> dict[str, Any] | None:
        return None  # the pools are per replica: GET /v1/cluster

    async def barrier(self) -> None:
        """Streams closed before this call have been told to stop (see Served.barrier)."""
        await asyncio.sleep(0)

    def text_pipeline(self, normalize: bool = True) -> Any:
        """None: the ingress holds no model; each clause's words come from the replica
        that speaks it, with its last chunk (AudioChunk.clause_words)."""
        return None

    # --- the cluster's view ----------------------------------------------------------------

    async def refresh(self) -> None:
        """Read the replicas Serve runs and what they report; a replica seen for the first
        time gets the cluster's voices before it takes a stream."""
        async with self._refreshing:
            router = ROUTERS.get(self.deployment)
            running = {r.replica_id.unique_id: r for r in router.replicas()} if router else {}
            for replica_id in list(self.replicas):
                if replica_id not in running:
                    log.warning("replica %s is gone", replica_id)
                    del self.replicas[replica_id]
            for replica_id, replica in running.items():
                view = self.replicas.setdefault(replica_id, ReplicaView(replica_id))
                view.reported = load_of(replica)
                if view.state == "starting":
                    await self._join(view)

    async def _join(self, view: ReplicaView) -> None:
        route = Route(replica=view.replica_id)
        try:
            info = await self.handle.options(method_name="describe").remote(route=route)
            for name, (k, v) in list(self.voices.items()):
                await self.handle.options(method_name="register_voice").remote(
                    name, k, v, route=route)
        except RayActorError:
            return  # it died while joining: the next refresh drops it
        view.pid, view.node = info["pid"], info["node"]
        view.startup_seconds = info["startup_seconds"]
        if view.state == "starting":
            view.state = "ready"
            log.info("replica %s (pid %s) is ready", view.replica_id, view.pid)

    @property
    def has_ready(self) -> bool:
        return any(v.state == "ready" for v in self.replicas.values())

    def capacity(self) -> int:
        """Streams the ready replicas can run now: each one's limit, or only what it runs
        while its listeners are behind; the one FIFO admission gives turns up to this."""
        total = 0
        for view in self.replicas.values():
            load = view.load()
            if load.is_ready and not load.is_draining:
                total += view.streams if load.behind else max(load.limit, view.streams)
        return total

    def choose(self, voice: str | None, exclude: Collection[str] = ()) -> ReplicaView | None:
        loads = [v.load() for v in self.replicas.values() if v.replica_id not in exclude]
        ranks = rank_replicas(loads, voice)
        return self.replicas[ranks[0][0].replica_id] if ranks else None

    async def drain(self, replica_id: str) -> ReplicaView:
        """Send no new stream to a replica; its streams finish there."""
        view = self.replicas[replica_id]
        view.state = "draining"
        await self.handle.options(method_name="drain").remote(route=Route(replica=replica_id))
        return view

    def describe(self) -> dict[str, Any]:
        return {"object": "cluster", "model": self.name,
                "replicas": [v.describe() for v in self.replicas.values()],
                "failovers": self.failovers,
                "recovery_seconds": [round(s, 3) for s in self.recoveries[-20:]],
                "chunk_hop_ms": _milliseconds(self.hops)}

    # --- voices ----------------------------------------------------------------------------

    def voice_from_audio(self, audio: torch.Tensor, sample_rate: int, name: str) -> Any:
        """A voice prefix from a recording, made by a replica (blocking: the voice store
        calls it on a worker thread)."""
        from polyvox.models.pocket.voice import VoicePrefix

        require_voice_cloning(self)
        view = self.choose(None)
        if view is None:
            raise EngineError("no replica is ready to make the voice; retry shortly")
        k, v = self.handle.options(method_name="voice_from_audio").remote(
            audio.numpy(), sample_rate, name, route=Route(replica=view.replica_id)).result()
        return VoicePrefix(torch.from_numpy(k), torch.from_numpy(v), name)

    def voice_from_file(self, path: Path) -> Any:
        from polyvox.models.pocket.voice import load_voice_file

        require_voice_cloning(self)
        return load_voice_file(path, *self.kv_shape)

    async def register_voice(self, name: str, prefix: Any) -> None:
        k, v = prefix.k.float().numpy(), prefix.v.float().numpy()
        await self._on_every_replica("register_voice", name, k, v)
        self.voices[name] = (k, v)

    async def unregister_voice(self, name: str) -> None:
        self.voices.pop(name, None)
        await self._on_every_replica("unregister_voice", name)

    async def _on_every_replica(self, method: str, *args: Any) -> None:
        calls = [self.handle.options(method_name=method).remote(
            *args, route=Route(replica=replica_id)) for replica_id in list(self.replicas)]
        for result in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(result, RayTaskError):
                raise EngineError(_message(result))
            # a replica that died meanwhile is dropped; its replacement gets the voices

    # --- streams ---------------------------------------------------------------------------

    async def generate(self, text: str | AsyncIterator[str], voice: str, params: JobParams,
                       normalize: bool = True,
                       word_timings: bool = False) -> AsyncIterator[AudioChunk]:
        """One request's audio chunks, as the replicas make them (see the module doc)."""
        job = Job(request_id=f"c{next(_ids)}-{uuid.uuid4().hex[:8]}", voice=voice,
                  seed=params.seed, temperature=params.temperature, speed=params.speed,
                  normalize=normalize, text=text if isinstance(text, str) else None,
                  streamed=not isinstance(text, str), word_timings=word_timings)
        stream = _Stream(job) if isinstance(text, str) else _StreamedText(job, text, self)
        try:
            async for chunk in self._run(stream):
                yield chunk
        finally:
            stream.close()

    async def _run(self, stream: _Stream) -> AsyncIterator[AudioChunk]:
        """A stream's chunks, moved to another replica each time its replica dies, from its
        first clause not fully delivered."""
        job = stream.job
        done = index = 0  # clauses fully delivered, chunks yielded
        exclude: set[str] = set()
        died_at: float | None = None
        is_mid_clause = False  # some of clause `done` was delivered
        for number in itertools.count():
            view = self.choose(job.voice, exclude)
            if view is None:
                raise EngineError("no replica is ready to continue this stream" if number
                                  else "no replica is ready; retry shortly")
            attempt = _Attempt(f"{job.request_id}.{number}", Route(replica=view.replica_id))
            call, offset = stream.call(attempt, done), done
            view.streams += 1
            view.served += 1
            response = self.handle.options(method_name="generate", stream=True).remote(
                call, route=attempt.route)
            finished = False
            try:
                async for message in response:
                    if "clauses" in message:
                        await stream.started(attempt, message["clauses"])
                        continue
                    self.hops.append(time.time() - message["sent_at"])
                    samples = np.array(message["samples"])  # Ray's buffer is read-only
                    restarts = False
                    if died_at is not None and len(samples):
                        samples = _faded_in(samples, self.sample_rate)
                        self.recoveries.append(time.monotonic() - died_at)
                        died_at, restarts = None, is_mid_clause
                    clause_index = offset + int(message["clause_index"])
                    yield AudioChunk(job.request_id, torch.from_numpy(samples),
                                     self.sample_rate, index, time.monotonic(),
                                     clause_index=clause_index,
                                     ends_clause=bool(message["ends_clause"]),
                                     word_frames=message["word_frames"],
                                     clause_words=message.get("clause_words"),
                                     restarts_clause=restarts)
                    index += 1
                    is_mid_clause = not message["ends_clause"] and (is_mid_clause or
                                                                   len(samples) > 0)
                    if message["ends_clause"]:
                        done = clause_index + 1
                finished = True
                return
            except RayActorError as error:
                finished = True
                exclude.add(view.replica_id)
                self.failovers += 1
                died_at = time.monotonic()
                log.warning("replica %s died under stream %s (%d clauses delivered): "
                            "continuing on another: %s", view.replica_id, job.request_id,
                            done, type(error).__name__)
                if stream.is_done(done):
                    return
            except RayTaskError as error:
                finished = True
                raise EngineError(_message(error)) from None
            finally:
                view.streams -= 1
                if not finished:
                    response.cancel()  # the listener left: stop the replica's request


class _Stream:
    """A stream of complete text: resumed with the clauses not yet delivered."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.clauses: list[str] | None = None  # as the first replica split the text

    def call(self, attempt: _Attempt, done: int) -> Job:
        if self.clauses is None:
            return replace(self.job, request_id=attempt.request_id)
        # (with word timings the replica reads the clauses' words off the whole text)
        return replace(self.job, request_id=attempt.request_id,
                       text=self.job.text if self.job.word_timings else None,
                       clauses=tuple(self.clauses[done:]), first_clause=done)

    async def started(self, attempt: _Attempt, clauses: list[str] | None) -> None:
        if self.clauses is None and clauses is not None:
            self.clauses = list(clauses)

    def is_done(self, done: int) -> bool:
        return self.clauses is not None and done >= len(self.clauses)

    def close(self) -> None:
        pass


class _StreamedText(_Stream):
    """A stream whose text arrives in pieces (the WebSocket). The pieces follow the stream
    to its replica; all of them are kept, so a resumed stream gets all of its text so far,
    its delivered clauses skipped (the text is split again the same way), and the pieces
    still to come."""

    def __init__(self, job: Job, pieces: AsyncIterator[str], served: ClusterServed) -> None:
        super().__init__(job)
        self.pieces, self.handle = pieces, served.handle
        self.text: list[str] = []
        self.attempt: _Attempt | None = None  # where the next piece goes
        self.is_complete = False  # every piece is in
        self.feeder: asyncio.Task[None] | None = None

    def call(self, attempt: _Attempt, done: int) -> Job:
        self.attempt = attempt
        attempt.is_complete = self.is_complete
        return replace(self.job, request_id=attempt.request_id, text="".join(self.text),
                       skip_clauses=done, first_clause=done)

    async def started(self, attempt: _Attempt, clauses: list[str] | None) -> None:
        attempt.ready.set()
        if self.feeder is None:
            self.feeder = asyncio.create_task(self._feed())
        if attempt.is_complete:
            await self._forward(attempt, "finish_text")

    def is_done(self, done: int) -> bool:
        return False  # more text may come: the next replica decides what is left

    def close(self) -> None:
        if self.feeder is not None:
            self.feeder.cancel()

    async def _feed(self) -> None:
        async for piece in self.pieces:
            self.text.append(piece)
            await self._forward(self.attempt, "add_text", piece)  # type: ignore[arg-type]
        self.is_complete = True
        await self._forward(self.attempt, "finish_text")  # type: ignore[arg-type]

    async def _forward(self, attempt: _Attempt, method: str, *args: Any) -> None:
        await attempt.ready.wait()
        try:
            await self.handle.options(method_name=method).remote(
                attempt.request_id, *args, route=attempt.route)
        except RayActorError:
            pass  # the stream moves to another replica with all of its text


@dataclass
class _Attempt:
    """One replica's run of a stream."""

    request_id: str
    route: Route
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # it takes text now
    is_complete: bool = False  # all of the text was in when it started


def _faded_in(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    length = min(len(samples), max(1, int(RESUME_FADE_SECONDS * sample_rate)))
    faded = samples.copy()
    faded[:length] *= np.linspace(0.0, 1.0, length, endpoint=False, dtype=np.float32)
    return faded


def _milliseconds(seconds: deque[float]) -> dict[str, float] | None:
    """p50, p90 and p99 in milliseconds, and how many there were."""
    if not seconds:
        return None
    return {f"p{q}": round(1000 * (percentile(seconds, q) or 0.0), 2)
            for q in (50, 90, 99)} | {"chunks": len(seconds)}


def _message(error: RayTaskError) -> str:
    """What a replica's exception said (without Ray's traceback)."""
    cause = getattr(error, "cause", None)
    return str(cause) if cause is not None else str(error).strip().splitlines()[-1]
