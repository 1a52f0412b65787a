"""Trace replay: the planner against recorded stage costs, on a simulated clock.

`polyvox bench --record-trace F` keeps every stage timing of a real run (prefill calls,
AR steps, decoder calls, ...: `costs.Timing`) and each request's clauses (tokens, frames
generated). `polyvox bench --replay F` fits one cost model to those timings and runs a
planner over simulated streams: each step costs what the model says, AR steps give each
stepped stream a frame, decoder calls deliver audio when they end. The same planner code
as the engine's, deterministic, in seconds: for comparing policies and fleets, not for
absolute figures (no noise, no memory limit, non-autoregressive clauses come whole).

The simulated clients make the same `RequestRecord`s as the real ones, so the figures
(TTFA, underruns, viability, the capacity search) are computed by the same code.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyvox.bench.records import RequestRecord
from polyvox.engine.baselines import make_planner_of
from polyvox.engine.costs import LinearCost, StageCosts, Timing
from polyvox.engine.plans import Planner, Rules, StreamView, View

TRACE_FORMAT = "polyvox-trace/1"
IDLE_TICK = 0.001  # seconds the simulated engine waits when a step has nothing to do


@dataclass
class Trace:
    """What a real run leaves for replay."""

    model: str
    rules: Rules
    sample_rate: int
    samples_per_frame: int
    timings: list[Timing] = field(default_factory=list)
    requests: list[list[tuple[int, int]]] = field(default_factory=list)  # (tokens, frames)

    def save(self, path: str | Path) -> None:
        payload = {"format": TRACE_FORMAT, "model": self.model,
                   "rules": dataclasses.asdict(self.rules), "sample_rate": self.sample_rate,
                   "samples_per_frame": self.samples_per_frame,
                   "timings": [list(t) for t in self.timings],
                   "requests": [[list(c) for c in r] for r in self.requests]}
        Path(path).write_text(json.dumps(payload), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        if payload.get("format") != TRACE_FORMAT:
            raise ValueError(f"{path}: not a polyvox trace (format {payload.get('format')!r})")
        # NOTE: a trace from another version may name rules this one does not have.
        known = {f.name for f in dataclasses.fields(Rules)}
        rules = Rules(**{k: v for k, v in payload["rules"].items() if k in known})
        return cls(payload["model"], rules, payload["sample_rate"],
                   payload["samples_per_frame"],
                   [Timing(str(s), float(t), int(c), float(u))
                    for s, t, c, u in payload["timings"]],
                   [[(int(a), int(b)) for a, b in r] for r in payload["requests"]])


def fit_costs(timings: Iterable[Timing]) -> StageCosts:
    """One cost model from all of a trace's timings, each weighing the same (a stage's
    first, cold timing left out, as in the engine)."""
    costs = StageCosts()
    fitted: dict[str, LinearCost] = {}
    steps = []
    for timing in timings:
        if timing.stage == "engine_step":
            steps.append(timing.seconds)
            continue
        stage = fitted.get(timing.stage)
        if stage is None:  # every observation weighs the same; the prior next to nothing
            prior: LinearCost = getattr(costs, timing.stage)
            stage = fitted[timing.stage] = LinearCost(prior.per_call, prior.per_unit, 1,
                                                      weight=0.0, prior=1e-9)
        stage.observe(timing.seconds, timing.calls, timing.units)
    for name, stage in fitted.items():
        setattr(costs, name, stage)
    if len(steps) > 1:
        steps = sorted(steps[1:])
        costs.engine_step = steps[len(steps) // 2]
    return costs


class _Stream:
    """A simulated request: its clauses, what is generated, decoded and heard."""

    def __init__(self, record: RequestRecord, clauses: Sequence[tuple[int, int]]) -> None:
        self.record = record
        self.clauses = deque(clauses)  # not started: (tokens, frames)
        self.left = 0  # frames of the clause generating still to come (AR)
        self.generating = False
        self.ready = 0
        self.ends: deque[int] = deque()  # clause ends, in frames decoded so far + ready
        self.decoded = 0
        self.decoded_in_clause = 0
        self.first_audio: float | None = None
        self.samples = 0

    def view(self, sample_rate: int, may_prefill: bool) -> StreamView:
        until_end = self.ends[0] - self.decoded if self.ends else None
        tokens = self.clauses[0][0] if may_prefill and self.clauses and not self.generating \
            else None
        return StreamView(self, self.record.sent, self.first_audio, self.samples / sample_rate,
                          True, self.has_work, self.generating, tokens, self.ready, until_end,
                          self.decoded_in_clause, 0)

    @property
    def has_work(self) -> bool:
        return bool(self.clauses) or self.generating or bool(self.ready)


class Simulator:
    """A planner over simulated streams, with a trace's costs."""

    def __init__(self, trace: Trace, planner: Planner, costs: StageCosts | None = None,
                 max_steps: int = 2_000_000) -> None:
        self.trace, self.planner = trace, planner
        self.costs = costs or fit_costs(trace.timings)
        self.rules = trace.rules
        self.max_steps = max_steps

    def closed_loop(self, concurrency: int, requests_per_client: int,
                    mode: str = "replay") -> tuple[list[RequestRecord], float]:
        """`concurrency` clients, each sending its next request (the trace's requests in
        turn) as soon as the last one ended; returns the records and the simulated wall."""
        plans = self.trace.requests
        if not plans:
            raise ValueError("the trace holds no requests to replay")
        queues = {c: [turn * concurrency + c for turn in range(requests_per_client)]
                  for c in range(concurrency)}
        records: list[RequestRecord] = []
        clock = 0.0
        streams: list[_Stream] = []
        client_of: dict[int, int] = {}

        def send(client: int, now: float) -> None:
            if queues[client]:
                number = queues[client].pop(0)
                record = RequestRecord(f"{mode}-c{concurrency}-{number}", mode, concurrency,
                                       sent=now, sample_rate=self.trace.sample_rate)
                records.append(record)
                stream = _Stream(record, plans[number % len(plans)])
                client_of[id(stream)] = client
                streams.append(stream)

        for client in range(concurrency):
            send(client, clock)
        ar_steps = turns = 0
        for _ in range(self.max_steps):
            if not streams:
                break
            admitted = streams if self.planner.max_admitted is None else \
                streams[: self.planner.max_admitted]
            clock, stepped, did = self._step(admitted, clock, ar_steps, turns)
            ar_steps += stepped
            turns += 1
            for stream in [s for s in admitted if not s.has_work]:
                stream.record.finished = clock
                streams.remove(stream)
                send(client_of.pop(id(stream)), clock)
            if not did:
                clock += IDLE_TICK
        else:
            raise RuntimeError("the simulation did not finish: the planner left work undone")
        return records, clock

    def _step(self, streams: list[_Stream], now: float, ar_steps: int,
              turns: int) -> tuple[float, bool, bool]:
        rules, costs, rate = self.rules, self.costs, self.trace.sample_rate
        view = View(tuple(s.view(rate, True) for s in streams), ar_steps, False, turns)
        work = self.planner.plan_work(view, now, costs)
        clock = now
        prefills: list[_Stream] = list(work.prefills)
        if prefills:
            if rules.autoregressive:
                clock += costs.prefill(sum(s.clauses[0][0] for s in prefills))
            else:
                clock += costs.clause(len(prefills), calls=len(prefills))
        for stream in prefills:
            _, frames = stream.clauses.popleft()
            if stream.decoded_in_clause and not rules.autoregressive:
                stream.decoded_in_clause = 0  # a fresh decoder per clause
            if rules.autoregressive:
                stream.generating, stream.left = True, frames
            else:
                stream.ready += frames
                stream.ends.append(stream.decoded + stream.ready)
        stepping: list[_Stream] = list(work.steps)
        if stepping:
            clock += costs.step(len(stepping))
        for stream in stepping:
            if stream.left > 0:
                stream.ready += 1
                stream.left -= 1
            if stream.left <= 0:
                stream.generating = False
                stream.ends.append(stream.decoded + stream.ready)
        view = View(tuple(s.view(rate, False) for s in streams), ar_steps + bool(stepping),
                    bool(stepping), turns)
        chunks = self.planner.plan_decodes(view, clock, costs, work)
        groups: dict[tuple[int, int, int], list[Any]] = {}
        for chunk in chunks:
            groups.setdefault((chunk.frames, chunk.lookahead, chunk.history), []).append(chunk)
        for (frames, _, _), group in groups.items():
            clock += costs.decode(sum(c.window_frames for c in group))
            for chunk in group:  # delivered as its call ends
                stream = chunk.key
                stream.ready -= frames
                stream.decoded += frames
                stream.decoded_in_clause += frames
                samples = frames * self.trace.samples_per_frame
                stream.samples += samples
                stream.record.add_chunk(clock, samples)
                if stream.first_audio is None:
                    stream.first_audio = clock
        for stream in streams:
            while stream.ends and stream.ends[0] <= stream.decoded:
                stream.ends.popleft()
        did = bool(prefills or stepping or chunks)
        return clock, bool(stepping), did


def trace_of(engine: Any, model: str) -> Trace:
    """The trace of an engine that kept a recording (`engine.recording`)."""
    family, recording = engine.family, engine.recording
    if recording is None:
        raise ValueError("the engine kept no recording")
    return Trace(model, Rules.of(engine.config, family), family.audio.sample_rate,
                 family.audio.samples_per_frame, list(recording.timings),
                 [list(clauses) for clauses in recording.clauses.values()])


def replay(path: str | Path, modes: Sequence[str], concurrencies: Sequence[int],
           requests_per_client: int, ttfa_slo_ms: float = 500.0) -> list[dict[str, Any]]:
    """Report rows (as `polyvox bench` prints) of each mode at each concurrency."""
    from polyvox.bench.metrics import summarize

    trace = Trace.load(path)
    rows = []
    for mode in modes:
        simulator = Simulator(trace, make_planner_of(mode, trace.rules))
        for concurrency in concurrencies:
            records, wall = simulator.closed_loop(concurrency, requests_per_client, mode)
            rows.append(summarize(records, wall, mode, concurrency, ttfa_slo_ms))
    return rows
