"""Stage-aware scheduling: who is admitted, who prefills, who steps, who decodes.

NOTE (the rule): new requests come first until their first chunk is out — admission and
prefill run before anything else, in arrival order, under a token budget. Then running
streams step, ordered by slack (seconds of audio delivered minus seconds since their first
chunk; the least slack first) when more streams run than `max_running`. A request never
has two chunks in one decoder batch.

Time: each step gets a deadline (`_step_budget`): shorter than the audio the most pressed
on-time listener has buffered, short (`first_audio_step_seconds`) while a request waits
for its first audio, never over `max_step_seconds`; after the step's AR step it is brought
forward so that a fresh stream (`FRESH_SECONDS`) can still get its next chunk from the
next step. Work costs come from the engine's own timings (`StageCosts`). Prefills beyond
the first and decoder chunks that do not fit wait a step, except chunks for listeners who
could not wait for the next step, and first chunks already overdue. A clause takes its
first AR step in the step that prefills it. Chunks start small (time to first audio; an
autoregressive request that would have waited `first_audio_wait_seconds` by the end of
one more engine step takes whatever frames are ready) and grow while a listener's
buffer allows (bigger chunks cost less per frame); under overload (more than a quarter
of the listeners already behind) nobody is protected and chunks are the largest.
Autoregressive streams with time to spare decode on a shared tick (every `chunk_frames`
AR steps, batched mode): each AR step gives every stream one frame, so on the tick they
all hold a full chunk and decode in one batch, instead of one call per stream as each
reaches a chunk at its own phase (a decoder call has a large fixed cost).
A non-autoregressive family may start a request's first clause in pieces (the first
chunk's frames only); the rest of the clause is planned like a decoder chunk: first when
its listener would run dry soon, else once no request awaits first audio.

Memory: KV blocks are reserved before work runs (`can_allocate` then `allocate`). When a
running stream cannot grow, the newest running stream is preempted: its own KV blocks are
swapped out to host memory and it resumes, identical, when blocks free up. New requests
are admitted only when no preempted stream waits and their first clause fits.

Modes: `batched` does all of the above; `sequential` admits one request at a time;
`interleaved` admits like batched but runs one request's work per engine step.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import torch

from polyvox.config import EngineConfig
from polyvox.engine.decoder_pool import DecoderSlotPool
from polyvox.engine.kv_cache import BlockManager
from polyvox.engine.runner import DecodeItem, PrefillItem, Runner, StepItem
from polyvox.models.base import ModelFamily
from polyvox.request import Clause, Request, Status


class Plan(NamedTuple):
    prefills: list[PrefillItem]
    steps: list[StepItem]
    # Non-autoregressive clauses that started in pieces: the requests whose rest runs now.
    continuations: tuple[Request, ...] = ()


class StageCosts:
    """What work costs on this machine: exponential averages of the engine's own timings,
    starting from rough priors. The scheduler uses them to keep each step shorter than
    the audio the most pressed listener still has buffered."""

    WEIGHT = 0.2  # of the newest measurement
    # NOTE: a packed prefill call costs a fixed part plus a part per token; the fixed part
    # is counted as this many tokens' worth (pocket/english on 2 cores: ~10 ms + 0.55 ms
    # per token, from 10 to 320 tokens), so that small prefills do not teach the
    # scheduler that every token costs what a lone short clause's tokens did.
    PREFILL_CALL_TOKENS = 16

    def __init__(self) -> None:
        self.prefill_clause = 0.05  # s per clause, non-autoregressive families (whole clause)
        self.prefill_token = 0.0005  # s per packed prefill token and call (autoregressive)
        self.step = 0.02  # s per batched AR step
        self.continue_frame = 0.0002  # s per latent frame of a clause's later pieces
        self.decode_frame = 0.0005  # s per frame of decoder input (window included)
        self.engine_step = 0.05  # s per engine step with AR work (all its stages)
        self._warm: set[str] = set()  # stages measured at least once

    def observe(self, name: str, seconds: float, count: int) -> None:
        if count <= 0:
            return
        if name not in self._warm:
            # NOTE: a stage's first run is cold (kernels chosen, weights packed, buffers
            # allocated) and can cost several times its usual; it would take the average
            # many steps to forget it.
            self._warm.add(name)
            return
        old = getattr(self, name)
        setattr(self, name, (1 - self.WEIGHT) * old + self.WEIGHT * seconds / count)

    def observe_prefill(self, seconds: float, tokens: int) -> None:
        """One packed prefill call of `tokens` tokens (autoregressive families)."""
        if tokens > 0:
            self.observe("prefill_token", seconds, tokens + self.PREFILL_CALL_TOKENS)

    def prefill_seconds(self, tokens: int) -> float:
        """What a packed prefill call of `tokens` tokens should cost."""
        return self.prefill_token * (tokens + self.PREFILL_CALL_TOKENS)


class Scheduler:
    # Overload: more than this share of the listeners with audio to come are behind.
    OVERLOAD_SHARE = 0.25
    # A stream is fresh until this much of its audio is out: its listener's buffer is thin
    # (its first chunk holds a frame or two) and the step deadline leaves room for its
    # next chunk. Not longer: on one-frame chunks for everyone, no buffer would ever grow.
    FRESH_SECONDS = 0.8

    def __init__(self, config: EngineConfig, family: ModelFamily, blocks: BlockManager,
                 slots: DecoderSlotPool, runner: Runner) -> None:
        self.config, self.family = config, family
        self.blocks, self.slots, self.runner = blocks, slots, runner
        self.waiting: list[Request] = []
        self.running: list[Request] = []  # RUNNING and PREEMPTED, in admission order
        self.failed: list[Request] = []  # failed since the engine last collected endings
        self._turn = 0  # interleaved mode: whose step it is
        self.costs = StageCosts()
        self.step_budget = float("inf")  # seconds this step may take
        self.deadline = float("inf")  # this step should end by then (monotonic seconds)
        self.prefill_deadline = float("inf")  # prefills beyond the first end by then
        self.starting = False  # this step: an admitted request awaits its first audio
        self.overloaded = False  # this step: see OVERLOAD_SHARE
        self._committed = 0.0  # seconds of this step already given to urgent work
        self._ar_steps = 0  # AR steps planned so far: the decode tick's clock
        self._stepping = False  # whether the last plan had AR steps (the clock runs)

    # --- planning ------------------------------------------------------------------------

    def plan(self) -> Plan:
        self._resume_preempted()
        self._admit()
        self.step_budget = self._step_budget()
        self.deadline = time.monotonic() + self.step_budget
        self.prefill_deadline = time.monotonic() + self._prefill_budget()
        candidates = self.running
        if self.config.schedule == "interleaved" and self.running:
            self._turn %= len(self.running)
            candidates = [self.running[self._turn]]
            self._turn += 1
        if not self.family.traits.is_autoregressive:
            urgent, later = self._split_continuations(candidates)
            self._committed = sum(self._continuation_cost(r) for r in urgent)
            prefills = self._plan_prefills([r for r in candidates if r.wants_prefill])
            if not self.starting:  # nobody awaits first audio: the rest may run now
                urgent += [r for r in later
                           if self._fits(self._committed + self._continuation_cost(r))]
            self._committed = 0.0
            return Plan(prefills, [], tuple(urgent))
        prefills = self._plan_prefills([r for r in candidates if r.wants_prefill])
        # NOTE: a clause prefilled in this step also takes its first AR step in it (the
        # runner writes the prefill's KV first): its first frame comes one engine step
        # sooner, which under load is a whole step of everyone's work.
        generating = [r for r in candidates if r.is_generating]
        steps = self._plan_steps(generating, prefills)
        self._ar_steps += bool(steps)
        self._stepping = bool(steps)
        return Plan(prefills, steps)

    def _continuation_cost(self, request: Request) -> float:
        partial = request.partial
        return self.costs.continue_frame * (partial.total_frames - partial.frames_given)

    def _split_continuations(self, candidates: list[Request]
                             ) -> tuple[list[Request], list[Request]]:
        """Requests whose clause came in pieces and still has frames to compute, split as
        decoder chunks are (`_within_deadline`): urgent when the listener would run dry
        within the horizon without them (they run first), the others later (they wait
        while a request awaits its first audio: new requests come first). Under overload
        nobody is urgent."""
        now, rate = time.monotonic(), self.family.audio.sample_rate
        frame_seconds = 1.0 / self.family.audio.frame_rate
        horizon = 0.0 if self.overloaded else (
            self.step_budget + self.config.delivery_margin_seconds if self.starting
            else 2 * self.step_budget)
        urgent, later = [], []
        for request in candidates:
            if request.partial is None or request.status is not Status.RUNNING:
                continue
            heard = max(0.0, request.slack(now, rate)) if request.first_audio_time else 0.0
            runway = heard + len(request.pending_latents) * frame_seconds
            is_urgent = runway < horizon + self._continuation_cost(request)
            (urgent if is_urgent and horizon > 0 else later).append(request)
        return urgent, later

    def _step_budget(self) -> float:
        """Seconds this step may take: the least audio buffered by any listener who is on
        time and has frames waiting for the decoder, less a margin for delivery. Streams
        already behind do not count (waiting cannot save them), nor do streams with nothing
        to decode (waiting does not help them: their next work is in this step). While a
        request waits for its first audio, new requests come first: steps are kept short
        (prefills and first chunks, then the most urgent chunks) so that it comes soon.
        No step is planned longer than `max_step_seconds`, so a request that arrives while
        the engine is busy waits little."""
        now, rate = time.monotonic(), self.family.audio.sample_rate
        listening = [r for r in self.running
                     if r.first_audio_time is not None and r.has_work]
        behind = sum(1 for r in listening if r.pending_latents and r.is_behind(now, rate))
        # NOTE: one straggler does not make an overload: the others stay protected.
        self.overloaded = behind > self.OVERLOAD_SHARE * len(listening)
        self.starting = any(r.first_audio_time is None and r.has_work for r in self.running)
        if self.starting:
            return self.config.first_audio_step_seconds  # new requests first
        least = self._least_on_time_slack(now, with_frames_only=True)
        if least is None:
            return self.config.max_step_seconds
        return min(self.config.max_step_seconds,
                   max(0.0, least - self.config.delivery_margin_seconds))

    def _least_on_time_slack(self, now: float, with_frames_only: bool) -> float | None:
        """The least audio buffered by a running listener who is on time (optionally only
        those with frames waiting for the decoder); None when there is none."""
        rate = self.family.audio.sample_rate
        return min((slack for r in self.running
                    if r.status is Status.RUNNING and r.first_audio_time is not None
                    and (r.pending_latents or not with_frames_only)
                    and (slack := r.slack(now, rate)) >= 0), default=None)

    def _prefill_budget(self) -> float:
        """Seconds this step's prefills may take. While requests wait for their first
        audio, their clauses are packed into one call as far as the most pressed on-time
        listener's buffer allows (at least `first_audio_step_seconds`, at most
        `max_step_seconds`): a burst's last request hears its first audio far sooner than
        with one clause per short step, and one packed call costs less per token. Otherwise
        prefills share the step's deadline."""
        if not self.starting:
            return self.step_budget
        config = self.config
        least = self._least_on_time_slack(time.monotonic(), with_frames_only=False)
        spare = (config.max_step_seconds if least is None
                 else least - config.delivery_margin_seconds)
        return min(config.max_step_seconds, max(config.first_audio_step_seconds, spare))

    def plan_decodes(self, candidates: list[Request] | None = None) -> list[DecodeItem]:
        lookahead = self.family.traits.decoder_lookahead
        max_history = self.family.traits.decoder_history
        now = time.monotonic()
        rate = self.family.audio.sample_rate
        requests = candidates if candidates is not None else self.running
        # NOTE: requests of one burst take their first chunk together: once the longest
        # waiting of them is overdue, all take what is ready (one decoder call, one phase).
        overdue = any(r.first_audio_time is None and r.pending_latents
                      and self._first_audio_overdue(r, now) for r in requests)
        items = []
        for request in requests:
            pending = len(request.pending_latents)
            if request.decoder_slot is None or not pending:
                continue
            slack = request.slack(now, rate) if request.first_audio_time is not None else None
            # NOTE: while a request still waits for its first audio, streams with a long
            # buffer let it go first (their chunk waits a step); work is reordered, not lost.
            if self.starting and slack is not None and slack > self.config.defer_slack_seconds:
                continue
            size = self._chunk_size(slack, pending - lookahead)
            waits = self._waits_for_tick(slack)
            # NOTE: on the tick a stream takes what is ready, so that it joins the phase;
            # so do first chunks once one of them is overdue (`_first_audio_overdue`).
            if waits is None or (slack is None and overdue):
                size = min(size, max(self.config.min_chunk_frames, pending - lookahead))
            history = min(max_history, request.clause_frames_decoded)
            if request.clause_ends:  # a finished clause: no more frames will come for it
                until_end = request.clause_ends[0] - request.frames_decoded
                if until_end == 0:
                    continue  # already decoded: the engine marks the clause end
                if until_end < size + lookahead:
                    frames = min(size, until_end)
                    # NOTE: lookahead never crosses a clause end (clauses may be separate
                    # utterances); in chained Pocket mode lookahead is 0 anyway.
                    items.append(DecodeItem(request, frames, min(lookahead, until_end - frames),
                                            history))
                    continue
            if pending >= size + lookahead and not waits:
                items.append(DecodeItem(request, size, lookahead, history))
        self._leave_room_for_next_chunks(items, now, rate)
        return self._within_deadline(items, now, rate)

    def _leave_room_for_next_chunks(self, items: list[DecodeItem], now: float,
                                    rate: int) -> None:
        """Bring the step's deadline forward so that every fresh stream (less than
        FRESH_SECONDS of audio out) whose listener is on time, with the chunk this step
        may give it, can still get its next chunk from the next step (an AR step, one
        frame of decoding, the delivery margin). The step budget was set before this
        step's AR step, from the listeners with frames waiting then; a fresh stream that
        had none (living on one-frame chunks) did not count, and a long tick of other
        streams' chunks after its own could run it dry."""
        if self.overloaded or not self.family.traits.is_autoregressive:
            return
        fresh = [r for r in self.running if r.is_generating and r.first_audio_time is not None
                 and r.audio_seconds(rate) < self.FRESH_SECONDS and r.slack(now, rate) >= 0]
        if not fresh:
            return
        frames = {id(item.request): item.num_frames for item in items}
        frame_seconds = 1.0 / self.family.audio.frame_rate
        next_chunk = (self.costs.step + self.costs.decode_frame
                      + self.config.delivery_margin_seconds)
        for request in fresh:
            ahead = request.slack(now, rate) + frames.get(id(request), 0) * frame_seconds
            self.deadline = min(self.deadline, now + ahead - next_chunk)

    def _first_audio_overdue(self, request: Request, now: float) -> bool:
        """Whether an autoregressive request would have waited `first_audio_wait_seconds`
        for its first audio by the end of one more engine step, as long as the engine's
        recent steps took (then its first chunk is whatever is ready now: under load the
        next frame would cost it a whole step of everyone's work)."""
        wait = self.config.first_audio_wait_seconds
        return (self.family.traits.is_autoregressive and wait is not None
                and now + self.costs.engine_step - request.arrival >= wait)

    def _waits_for_tick(self, slack: float | None) -> bool | None:
        """Whether a stream's regular chunk waits for the decode tick (module docstring):
        True off the tick if its listener has buffered more than the wait costs, None on
        the tick (decode what is ready), False when the tick does not apply (first
        chunks, listeners with little buffered, overload, non-AR families, other modes,
        and steps without AR work: the clock stands still, so the tick would never come)."""
        period = self.config.chunk_frames or 1
        if (slack is None or self.overloaded or period == 1 or self.config.schedule != "batched"
                or not self.family.traits.is_autoregressive or not self._stepping):
            return False
        to_tick = -self._ar_steps % period
        if to_tick == 0:
            return None
        # NOTE: the chunk comes at most `to_tick` steps later; a step lasts about a frame
        # when the engine keeps up (less when it is ahead).
        step_seconds = max(1.0 / self.family.audio.frame_rate, self.costs.step)
        return slack > (to_tick + 1) * step_seconds + self.config.delivery_margin_seconds

    def _within_deadline(self, items: list[DecodeItem], now: float,
                         rate: int) -> list[DecodeItem]:
        """The chunks this step decodes: every on-time listener who would run dry within two
        steps of this one's length or could not wait for the next step, first chunks
        already overdue, and others (first chunks, then the least slack first) while the
        step still ends by its deadline; at least one. The rest wait a step."""
        if len(items) <= 1:
            return items
        # NOTE: under overload (a stream already behind) nobody is protected: listeners
        # stall anyway, and short steps keep new requests' first audio quick. While a
        # request waits for its first audio, only listeners who would run dry within this
        # step are put before it; otherwise those within two steps are.
        horizon = 0.0 if self.overloaded else (
            self.step_budget + self.config.delivery_margin_seconds if self.starting
            else 2 * self.step_budget)
        # NOTE: an autoregressive stream's listener who could not wait for the next step
        # (its AR step and the delivery margin) is urgent however short this step's
        # budget: a budget near zero (the least slack under the margin) must not leave all
        # but one of several listeners in that state to run dry.
        floor = 0.0 if self.overloaded or not self.family.traits.is_autoregressive else (
            self.costs.step + self.config.delivery_margin_seconds)
        items = sorted(items, key=lambda item: item.request.slack(now, rate))
        chosen, spent = [], 0.0
        for item in items:
            cost = self.costs.decode_frame * item.window_frames
            slack = item.request.slack(now, rate)
            # On time, not for long (behind: stalled anyway); or a first chunk already
            # overdue (a burst's first chunks go in one call, not split by the deadline).
            is_urgent = (0 <= slack < max(horizon, floor)
                         or item.request.first_audio_time is None
                         and self._first_audio_overdue(item.request, now))
            if chosen and not is_urgent and not self._fits(spent + cost):
                continue
            chosen.append(item)
            spent += cost
        return chosen

    def _chunk_size(self, slack: float | None, ready: int) -> int:
        """Frames in a request's next chunk. The first chunk is small (time to first audio).
        Later chunks are `chunk_frames`, doubled (up to `max_chunk_frames`) while the
        listener has at least that much audio buffered: bigger chunks cost less per frame
        (fewer calls, and less window context for windowed decoders)."""
        config = self.config
        assert config.first_chunk_frames and config.chunk_frames and config.max_chunk_frames
        assert config.min_chunk_frames
        if slack is None:
            return config.first_chunk_frames
        if slack < 0:
            # NOTE: a stream already behind gets all that is ready, up to the biggest chunk:
            # big chunks cost least per frame, and its listener is better off with one long
            # pause than with many short ones. It does not wait for more than a regular
            # chunk, though: an AR stream a few ms behind would otherwise stall until
            # `max_chunk_frames` more steps were generated.
            return min(config.max_chunk_frames, max(ready, config.chunk_frames))
        frame_seconds = 1.0 / self.family.audio.frame_rate
        size = config.chunk_frames
        while size * 2 <= config.max_chunk_frames and size * 2 * frame_seconds <= slack:
            size *= 2
        if slack < config.chunk_frames * frame_seconds and ready >= 1:
            # NOTE: a listener close to running dry gets what is ready now rather than
            # a full chunk later (at least `min_chunk_frames`).
            size = min(size, max(ready, config.min_chunk_frames))
        return size

    def _admit(self) -> None:
        if any(r.status is Status.PREEMPTED for r in self.running):
            return
        while self.waiting and self.slots.can_allocate():
            if self.config.schedule == "sequential" and self.running:
                return
            request = self.waiting[0]
            if request.pending_clauses and not self._fits_first_clause(request):
                if not self.running:
                    self.fail(request, "the text's first clause does not fit in the KV pool")
                    continue
                return
            self.waiting.pop(0)
            request.decoder_slot = self.slots.allocate()
            self.blocks.share(request.voice.table.blocks)
            request.table = request.voice.table.copy_shared()
            request.next_position = request.voice.length
            request.fade_samples = self.family.traits.fade_in_samples
            request.status = Status.RUNNING
            self.running.append(request)

    def _fits_first_clause(self, request: Request) -> bool:
        if not self.family.traits.is_autoregressive:
            return True  # no KV cache
        tokens = self.family.count_tokens(request.pending_clauses[0]) + 8
        needed = -(-tokens // self.blocks.block_size) + 1
        return self.blocks.can_allocate(needed)

    def _plan_prefills(self, requests: list[Request]) -> list[PrefillItem]:
        items: list[PrefillItem] = []
        budget = self.config.prefill_token_budget
        for request in requests:  # admission order: the oldest first
            if self._restarts_decoder and request.pending_latents:
                continue  # the decoder restarts per clause: finish the last one first
            text = request.pending_clauses[0]
            try:
                plan = self.family.plan_clause(text, request.params)
            except ValueError as error:
                self.fail(request, f"bad clause {text!r}: {error}")
                continue
            if not self.family.traits.is_autoregressive:
                if len(items) >= self.config.max_clause_prefills_per_step or (
                        items and not self._fits(self._committed
                                                 + self.costs.prefill_clause * (len(items) + 1))):
                    break
                self._start_clause_context(request)
                request.pending_clauses.popleft()
                request.clause = Clause(plan.tokens, 0, 0)
                items.append(PrefillItem(request, plan.tokens, [], [], text))
                continue
            count = int(plan.tokens.shape[0])
            if items and count > budget:
                break
            spent = self.config.prefill_token_budget - budget + count
            if items and (time.monotonic() + self.costs.step + self.costs.prefill_seconds(spent)
                          > self.prefill_deadline):
                break
            self._start_clause_context(request)
            needed = request.table.blocks_needed(count, self.blocks.block_size)
            if not self.blocks.can_allocate(needed):
                if len(self.running) == 1:
                    self.fail(request, "the clause does not fit in the KV pool")
                break
            request.pending_clauses.popleft()
            positions = list(range(request.next_position, request.next_position + count))
            slots = request.table.append(count, request.next_position,
                                         self.blocks.allocate(needed), self.blocks.block_size)
            request.next_position += count
            request.clause = Clause(plan.tokens, plan.frames_after_eos, plan.max_frames)
            request.last_latent = None
            items.append(PrefillItem(request, plan.tokens, positions, slots,
                                     features=plan.features))
            budget -= count
        return items

    def _fits(self, seconds: float) -> bool:
        """Whether `seconds` more work still ends this step before its deadline."""
        return time.monotonic() + seconds <= self.deadline

    @property
    def _restarts_decoder(self) -> bool:
        """Whether each clause starts with a fresh decoder (pocket mode; Piper always)."""
        return (self.config.chaining == "pocket"
                or self.family.traits.resets_decoder_per_clause)

    def _start_clause_context(self, request: Request) -> None:
        """Pocket mode: back to the voice state with a fresh decoder. Chained mode: drop
        own context older than the window."""
        if self._restarts_decoder and request.clauses_started:
            assert request.decoder_slot is not None
            self.slots.reset(request.decoder_slot)
            request.fade_samples = self.family.traits.fade_in_samples
            request.clause_frames_decoded = 0
        if self.config.chaining == "pocket":
            self.blocks.release(request.table.drop_own())
            request.next_position = request.voice.length
        else:
            cutoff = request.next_position - self.config.context_window
            self.blocks.release(request.table.drop_before(cutoff))
        request.clauses_started += 1

    def _plan_steps(self, generating: list[Request],
                    prefills: list[PrefillItem]) -> list[StepItem]:
        now, rate = time.monotonic(), self.family.audio.sample_rate
        chosen = sorted(generating, key=lambda r: r.slack(now, rate))[: self.config.max_running]
        kept = set(chosen)  # in the running order
        chosen = [r for r in self.running if r in kept]
        items: list[StepItem] = []
        # NOTE: a request that already reserved slots this step is never preempted.
        protected = {id(item.request) for item in prefills}
        for request in chosen:
            if request.status is not Status.RUNNING:
                continue  # preempted while making room for an older stream
            needed = request.table.blocks_needed(1, self.blocks.block_size)
            while not self.blocks.can_allocate(needed):
                victim = self._newest_preemptible(protected)
                if victim is None:
                    break
                self._preempt(victim)
                if victim is request:
                    break
            if request.status is not Status.RUNNING or not self.blocks.can_allocate(needed):
                continue
            (slot,) = request.table.append(1, request.next_position,
                                           self.blocks.allocate(needed), self.blocks.block_size)
            items.append(StepItem(request, request.next_position, slot))
            protected.add(id(request))
            request.next_position += 1
        return items

    def undo_step(self, request: Request, item: StepItem, rng_state: torch.Tensor) -> None:
        """Take back a step launched past its clause's end (the overlapped loop learns of
        the end one step late): its KV slot and position are released and its noise draw
        is undone, so the request continues as if the step had never been planned."""
        size = self.blocks.block_size
        emptied = request.table.pop_last(item.slot, size)
        if emptied is not None:
            if request.status is Status.RUNNING:
                self.blocks.release([emptied])
            elif request.swapped is not None:  # preempted: the block was swapped out
                k, v = request.swapped
                request.swapped = (k[:, :-size], v[:, :-size])
        request.next_position = item.position
        request.generator.set_state(rng_state)

    # --- memory pressure -----------------------------------------------------------------

    def _newest_preemptible(self, protected: set[int]) -> Request | None:
        for request in reversed(self.running):
            if (request.status is Status.RUNNING and request.table.own_blocks()
                    and id(request) not in protected):
                return request
        return None

    def _preempt(self, request: Request) -> None:
        own = request.table.own_blocks()
        request.swapped = self.runner.swap_out(own)
        self.blocks.release(own)
        request.status = Status.PREEMPTED

    def _resume_preempted(self) -> None:
        for request in self.running:
            if request.status is not Status.PREEMPTED:
                continue
            assert request.swapped is not None
            count = len(request.table.own_blocks())
            if not self.blocks.can_allocate(count + 1):
                return  # oldest first: do not let newer streams overtake
            fresh = self.blocks.allocate(count)
            request.table.replace_own(fresh)
            self.runner.swap_in(fresh, request.swapped)
            request.swapped = None
            request.status = Status.RUNNING

    # --- endings -------------------------------------------------------------------------

    def release(self, request: Request) -> None:
        """Give back everything a request holds (finish, abort, failure)."""
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
            if request.status is Status.PREEMPTED:
                self.blocks.release(request.table.shared_blocks())
            else:
                self.blocks.release(request.table.blocks)
            request.table.clear()
            request.swapped = None
        request.partial = None
        if request.decoder_slot is not None:
            self.slots.release(request.decoder_slot)
            request.decoder_slot = None

    def fail(self, request: Request, message: str) -> None:
        request.error = message
        self.release(request)
        request.status = Status.FAILED
        self.failed.append(request)
