"""The planner: what one engine step does, decided from a snapshot of the streams.

A planner is pure: `plan_work(view, now, costs)` and `plan_decodes(view, now, costs,
work)` read an immutable `View` of the streams (the types: plans.py), one `now` and the cost model
(`costs.StageCosts`), keep nothing between calls and never read a clock. The engine
applies the plan (KV blocks, decoder slots, request state) and runs the stages. A step is
planned in two phases: the work (packed prefill, the AR step, the rest of clauses computed
in pieces), then, once the AR step's frames are in, the decoder chunks (`WorkPlan` passes
what phase one decided to phase two).

The policy, in terms of deadlines and costs:

- **Deadlines.** A listener runs dry at `first_audio + audio_seconds`; its work is due a
  delivery margin (`margin`) before. A request awaiting its first audio comes first: while
  one does, steps are kept to `first_audio_step` seconds so that its first audio comes
  soon, and its prefill packs other new requests' clauses as far as the playing
  listeners can wait (at most `max_step`).
- **The step's deadline** is the least buffer of an on-time listener with frames waiting,
  less the margin, at most `max_step` (so that a new arrival waits little). After the AR
  step it is brought forward so that a fresh listener (less than `FRESH_SECONDS` heard,
  a thin buffer) can still get its next chunk from the next step.
- **What is always taken**: the first prefill in line, every stream's AR step (up to
  `max_running`, least slack first), decoder chunks of listeners who would run dry before
  the next step could serve them (an AR step plus the margin) or within the horizon (two
  step budgets; one budget plus the margin while a request awaits first audio), and first
  chunks already overdue (the request would have waited `first_audio_wait` by the end of
  one more engine step: a burst's first chunks then go together, in one call).
- **What is taken while it fits** the deadline, by the cost model: further prefills (and
  a token budget), the other chunks, least slack first (a chunk joining a decoder call of
  its shape costs its frames only; one of a new shape also the call's fixed part).
- **Chunk sizes**: the first is small; later ones double from `chunk` up to `max_chunk`
  while the listener has that much buffered (bigger chunks cost less per frame); one close
  to running dry takes what is ready (at least `min_chunk`); one already behind takes
  everything ready, up to the largest chunk. While a request awaits first audio, a stream
  whose listener can wait out this step and the next (`_can_wait_two_steps`) puts its
  chunk off.
- **The decode tick**: AR streams with time to spare decode on a shared tick (every
  `chunk` AR steps), so that their chunks go in one decoder call instead of one call per
  stream at its own phase.
- **Overload** (more than `OVERLOAD_SHARE` of the listeners already behind): nobody is
  protected, chunks are the largest, no tick. Admission's job is to keep it from
  happening; this keeps the engine's throughput when it does.
"""

from __future__ import annotations

from collections.abc import Iterable

from polyvox.engine.costs import StageCosts
from polyvox.engine.plans import Chunk, Rules, StreamView, View, WorkPlan


class BatchedPlanner:
    """Continuous batching of every stage across streams (the policy above)."""

    OVERLOAD_SHARE = 0.25
    FRESH_SECONDS = 0.8
    max_admitted: int | None = None

    def __init__(self, rules: Rules) -> None:
        self.rules = rules

    # --- phase one: prefill, AR step, rests --------------------------------------------

    def plan_work(self, view: View, now: float, costs: StageCosts,
                  candidates: tuple[StreamView, ...] | None = None) -> WorkPlan:
        rules, streams = self.rules, view.streams
        candidates = streams if candidates is None else candidates
        listening = [s for s in streams if s.is_playing and s.has_work]
        behind = sum(1 for s in listening if s.ready and s.is_behind(now))
        # NOTE: one straggler does not make an overload: the others stay protected.
        overloaded = behind > self.OVERLOAD_SHARE * len(listening)
        starting = any(not s.is_playing and s.has_work for s in streams)
        least = _least_slack(streams, now, with_frames_only=True)
        if starting:
            budget = rules.first_audio_step
        elif least is None:
            budget = rules.max_step
        else:
            budget = min(rules.max_step, max(0.0, least - rules.margin))
        deadline = now + budget
        generating = [s for s in candidates if s.generating]
        wanting = [s for s in candidates if s.prefill_tokens is not None]
        if not rules.autoregressive:
            return self._plan_clauses(candidates, wanting, now, costs, starting, overloaded,
                                      budget, deadline)
        # Prefills: while a request awaits its first audio, a burst's clauses are packed
        # into one call as far as the most pressed on-time listener can wait.
        if starting:
            least_any = _least_slack(streams, now, with_frames_only=False)
            spare = rules.max_step if least_any is None else least_any - rules.margin
            prefill_deadline = now + min(rules.max_step, max(rules.first_audio_step, spare))
        else:
            prefill_deadline = deadline
        prefills: list[StreamView] = []
        tokens = 0
        for stream in wanting:  # admission order: the oldest first
            count = stream.prefill_tokens or 0
            if prefills and (tokens + count > rules.prefill_token_budget or now
                             + costs.step(len(generating) + len(prefills) + 1)
                             + costs.prefill(tokens + count) > prefill_deadline):
                break
            prefills.append(stream)
            tokens += count
        # NOTE: a clause prefilled in this step also takes its first AR step in it (the
        # runner writes the prefill's KV first): its first frame comes one engine step
        # sooner, which under load is a whole step of everyone's work.
        generating += prefills
        stepping = sorted(generating, key=lambda s: s.slack(now))[: rules.max_running]
        kept = {id(s) for s in stepping}
        steps = tuple(s.key for s in candidates if id(s) in kept)
        return WorkPlan(tuple(s.key for s in prefills), steps, (), starting, overloaded,
                        budget, deadline)

    def _plan_clauses(self, candidates: tuple[StreamView, ...], wanting: list[StreamView],
                      now: float, costs: StageCosts, starting: bool, overloaded: bool,
                      budget: float, deadline: float) -> WorkPlan:
        """Non-autoregressive families: whole clauses (or a first clause's first piece)
        per prefill, and the rest of clauses that came in pieces: first those whose
        listener would run dry within the horizon without it, then the others once no
        request awaits its first audio, while the step's deadline allows."""
        rules = self.rules
        horizon = 0.0 if overloaded else (budget + rules.margin if starting else 2 * budget)
        urgent, later = [], []
        for stream in candidates:
            if not stream.rest_frames or not stream.running:
                continue
            heard = max(0.0, stream.slack(now)) if stream.is_playing else 0.0
            runway = heard + stream.ready * rules.frame_seconds
            cost = costs.piece(stream.rest_frames)
            (urgent if horizon > 0 and runway < horizon + cost else later).append(stream)
        spent = sum(costs.piece(s.rest_frames) for s in urgent)
        prefills: list[StreamView] = []
        for stream in wanting:
            if prefills and (now + spent + costs.clause(len(prefills) + 1,
                                                         calls=len(prefills) + 1) > deadline):
                break
            prefills.append(stream)
        if not starting:  # nobody awaits first audio: the rest may run now
            for stream in later:
                cost = costs.piece(stream.rest_frames)
                if now + spent + cost <= deadline:
                    urgent.append(stream)
                    spent += cost
        return WorkPlan(tuple(s.key for s in prefills), (), tuple(s.key for s in urgent),
                        starting, overloaded, budget, deadline)

    # --- phase two: decoder chunks -------------------------------------------------------

    def plan_decodes(self, view: View, now: float, costs: StageCosts, work: WorkPlan,
                     candidates: Iterable[StreamView] | None = None) -> list[Chunk]:
        rules = self.rules
        candidates = list(view.streams if candidates is None else candidates)
        rows = sum(1 for s in view.streams if s.generating)
        # NOTE: requests of one burst take their first chunk together: once the longest
        # waiting of them is overdue, all take what is ready (one decoder call, one phase).
        overdue = any(not s.is_playing and s.ready and self._overdue(s, now, costs)
                      for s in candidates)
        chunks: list[tuple[Chunk, StreamView]] = []
        for stream in candidates:
            if not stream.ready:
                continue
            slack = stream.slack(now) if stream.is_playing else None
            # NOTE: while a request still waits for its first audio, streams with a long
            # buffer let it go first (their chunk waits a step); work is reordered, not lost.
            if work.starting and slack is not None and self._can_wait_two_steps(slack, costs):
                continue
            lookahead = rules.lookahead if stream.lookahead is None else stream.lookahead
            size = self._chunk_size(slack, stream.ready - lookahead)
            waits = self._waits_for_tick(view, slack, work.overloaded, costs, rows)
            # NOTE: on the tick a stream takes what is ready, so that it joins the phase;
            # so do first chunks once one of them is overdue.
            if waits is None or (slack is None and overdue):
                size = min(size, max(rules.min_chunk, stream.ready - lookahead))
            history = min(rules.max_history, stream.decoded_in_clause)
            if stream.to_clause_end is not None:  # no more frames will come for that clause
                until_end = stream.to_clause_end
                if until_end == 0:
                    continue  # already decoded: the engine marks the clause end
                if until_end < size + lookahead:
                    frames = min(size, until_end)
                    # NOTE: lookahead never crosses a clause end (clauses may be separate
                    # utterances); in chained Pocket mode lookahead is 0 anyway.
                    chunks.append((Chunk(stream.key, frames,
                                         min(lookahead, until_end - frames), history),
                                   stream))
                    continue
            if stream.ready >= size + lookahead and not waits:
                chunks.append((Chunk(stream.key, size, lookahead, history), stream))
        deadline = self._leave_room_for_next_chunks(view, chunks, now, costs, work, rows)
        return self._within_deadline(chunks, now, costs, work, deadline, rows, overdue)

    def _can_wait_two_steps(self, slack: float, costs: StageCosts) -> bool:
        """Whether a listener can wait out this step and the next, each as long as a full
        step (`max_step`) or as the engine's steps take now, if longer (under load)."""
        rules = self.rules
        return slack > rules.margin + 2 * max(rules.max_step, costs.engine_step)

    def _overdue(self, stream: StreamView, now: float, costs: StageCosts) -> bool:
        """Whether an AR request would have waited `first_audio_wait` for its first audio
        by the end of one more engine step (then its first chunk is what is ready now:
        under load the next frame would cost it a whole step of everyone's work)."""
        wait = self.rules.first_audio_wait
        return (self.rules.autoregressive and wait is not None
                and now + costs.engine_step - stream.arrival >= wait)

    def _chunk_size(self, slack: float | None, ready: int) -> int:
        """Frames in a stream's next chunk (see the module's docstring)."""
        rules = self.rules
        if slack is None:
            return rules.first_chunk
        if slack < 0:
            # NOTE: a stream already behind gets all that is ready, up to the biggest chunk;
            # its listener is better off with one long pause than with many short ones.
            # It does not wait for more than a regular chunk, though.
            return min(rules.max_chunk, max(ready, rules.chunk))
        size = rules.chunk
        while size * 2 <= rules.max_chunk and size * 2 * rules.frame_seconds <= slack:
            size *= 2
        if slack < rules.chunk * rules.frame_seconds and ready >= 1:
            size = min(size, max(ready, rules.min_chunk))  # close to running dry: what is ready
        return size

    def _waits_for_tick(self, view: View, slack: float | None, overloaded: bool,
                        costs: StageCosts, rows: int) -> bool | None:
        """True off the tick if the listener has buffered more than the wait costs, None on
        the tick (decode what is ready), False where the tick does not apply (first chunks,
        overload, non-AR families, other schedules, a step without AR work: the clock
        stands still, so the tick would never come)."""
        rules = self.rules
        period = rules.chunk
        if (slack is None or overloaded or period == 1 or not rules.tick
                or not rules.autoregressive or not view.stepped):
            return False
        to_tick = -view.ar_steps % period
        if to_tick == 0:
            return None
        # NOTE: the chunk comes at most `to_tick` steps later; a step lasts about a frame
        # when the engine keeps up (less when it is ahead).
        step_seconds = max(rules.frame_seconds, costs.step(rows))
        return slack > (to_tick + 1) * step_seconds + rules.margin

    def _leave_room_for_next_chunks(self, view: View, chunks: list[tuple[Chunk, StreamView]],
                                    now: float, costs: StageCosts, work: WorkPlan,
                                    rows: int) -> float:
        """The step's deadline, brought forward so that every fresh on-time listener can
        still get its next chunk from the next step (an AR step, a frame's decoding, the
        margin): the step budget was set before the AR step, from listeners with frames
        waiting then; a fresh stream living on one-frame chunks did not count."""
        rules = self.rules
        if work.overloaded or not rules.autoregressive:
            return work.deadline
        frames = {id(chunk.key): chunk.frames for chunk, _ in chunks}
        next_chunk = costs.step(rows) + costs.decode(1) + rules.margin
        deadline = work.deadline
        for stream in view.streams:
            if (stream.generating and stream.is_playing
                    and stream.audio_seconds < self.FRESH_SECONDS and stream.slack(now) >= 0):
                ahead = stream.slack(now) + frames.get(id(stream.key), 0) * rules.frame_seconds
                deadline = min(deadline, now + ahead - next_chunk)
        return deadline

    def _within_deadline(self, chunks: list[tuple[Chunk, StreamView]], now: float,
                         costs: StageCosts, work: WorkPlan, deadline: float,
                         rows: int, overdue: bool) -> list[Chunk]:
        """The chunks this step decodes: urgent ones always (a listener who would run dry
        within the horizon or could not wait for the next step; a first chunk overdue),
        the others, least slack first, while the step still ends by its deadline; at
        least one. The rest wait a step."""
        if len(chunks) <= 1:
            return [chunk for chunk, _ in chunks]
        rules = self.rules
        # NOTE: under overload nobody is protected: listeners stall anyway, and short
        # steps keep new requests' first audio quick.
        horizon = 0.0 if work.overloaded else (
            work.budget + rules.margin if work.starting else 2 * work.budget)
        # NOTE: an AR listener who could not wait for the next step is urgent however
        # short this step's budget (a budget near zero must not leave all but one of
        # several such listeners to run dry).
        floor = 0.0 if work.overloaded or not rules.autoregressive else (
            costs.step(rows) + rules.margin)
        chosen: list[Chunk] = []
        shapes: set[tuple[int, int, int]] = set()
        spent = 0.0
        for chunk, stream in sorted(chunks, key=lambda pair: pair[1].slack(now)):
            shape = (chunk.frames, chunk.lookahead, chunk.history)
            cost = costs.decode(chunk.window_frames, calls=int(shape not in shapes))
            slack = stream.slack(now)
            # On time, not for long (behind: stalled anyway); or a first chunk once one is
            # overdue (a burst's first chunks go in one call, not split by the deadline).
            is_urgent = 0 <= slack < max(horizon, floor) or not stream.is_playing and overdue
            if chosen and not is_urgent and now + spent + cost > deadline:
                continue
            chosen.append(chunk)
            shapes.add(shape)
            spent += cost
        return chosen


def _least_slack(streams: Iterable[StreamView], now: float,
                 with_frames_only: bool) -> float | None:
    """The least audio buffered by a running on-time listener (optionally only those with
    frames waiting for the decoder); None when there is none."""
    return min((slack for s in streams
                if s.running and s.is_playing and (s.ready or not with_frames_only)
                and (slack := s.slack(now)) >= 0), default=None)
