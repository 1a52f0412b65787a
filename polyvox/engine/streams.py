"""The admitted streams and what they hold: the one owner of request state and memory.

`Streams` keeps the waiting and running requests, admits them (a decoder slot, the
voice's shared KV blocks), applies the planner's decisions (KV blocks reserved before
work runs: `can_allocate` then `allocate`), preempts under memory pressure and gives
everything back when a request ends. It also takes the snapshot the planner reads
(`view`). The planner decides what runs; this decides nothing about time.

Memory: when a running stream cannot grow, the newest running stream is preempted: its
own KV blocks are swapped out to host memory and it resumes, identical, when blocks free
up. New requests are admitted only when no preempted stream waits and their first clause
fits.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from polyvox.config import EngineConfig
from polyvox.engine.decoder_pool import DecoderSlotPool
from polyvox.engine.kv_cache import BlockManager
from polyvox.engine.plans import StreamView, View
from polyvox.engine.runner import PrefillItem, Runner, StepItem
from polyvox.models.base import ClausePlan, ModelFamily
from polyvox.request import Clause, Request, Status, clause_seed

# A first clause is admitted only with room for its tokens plus this many (its first
# frames) and one more block.
FIRST_CLAUSE_SPARE_TOKENS = 8


class Streams:
    def __init__(self, config: EngineConfig, family: ModelFamily, blocks: BlockManager,
                 slots: DecoderSlotPool, runner: Runner) -> None:
        self.config, self.family = config, family
        self.blocks, self.slots, self.runner = blocks, slots, runner
        self.waiting: list[Request] = []
        self.running: list[Request] = []  # RUNNING and PREEMPTED, in admission order
        self.failed: list[Request] = []  # failed since the engine last collected endings

    # --- the planner's snapshot ------------------------------------------------------------

    def view(self, ar_steps: int = 0, stepped: bool = False, turn: int = 0,
             plan_clauses: bool = True) -> View:
        """The running streams as the planner sees them. A request whose next clause the
        family refuses fails here (its text cannot be spoken). Without `plan_clauses`
        (the decoder phase) no stream is offered a prefill."""
        rate = self.family.audio.sample_rate
        views = []
        for request in list(self.running):
            tokens = None
            if plan_clauses and self._may_start_clause(request):
                plan = self._next_plan(request)
                if plan is None:
                    continue  # failed
                tokens = int(plan.tokens.shape[0])
            partial = request.partial
            views.append(StreamView(
                request, request.arrival, request.first_audio_time,
                request.audio_seconds(rate), request.status is Status.RUNNING,
                request.has_work, request.is_generating, tokens, len(request.pending_latents),
                request.progress.to_clause_end, request.progress.decoded_in_clause,
                partial.total_frames - partial.frames_given if partial is not None else 0,
                request.decoder_lookahead))
        return View(tuple(views), ar_steps, stepped, turn)

    def _may_start_clause(self, request: Request) -> bool:
        # NOTE: where the decoder restarts per clause, the last clause is decoded first.
        return request.wants_prefill and not (self.restarts_decoder and request.pending_latents)

    def _next_plan(self, request: Request) -> ClausePlan | None:
        """The next clause's plan, computed once (None: the family refused it, and the
        request failed)."""
        text = request.pending_clauses[0]
        if request.next_plan is None or request.next_plan[0] is not text:
            try:
                request.next_plan = (text, self.family.plan_clause(text, request.params))
            except ValueError as error:
                self.fail(request, f"bad clause {text!r}: {error}")
                return None
        return request.next_plan[1]

    # --- admission -------------------------------------------------------------------------

    def admit(self, limit: int | None = None) -> None:
        """Admit waiting requests in arrival order while a decoder slot is free and the
        first clause fits (and fewer than `limit` run); none while a stream is preempted."""
        self._resume_preempted()
        if any(r.status is Status.PREEMPTED for r in self.running):
            return
        while self.waiting and self.slots.can_allocate():
            if limit is not None and len(self.running) >= limit:
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
            request.progress.restart_decoder(self.family.traits.fade_in_samples)
            request.status = Status.RUNNING
            self.running.append(request)

    def _fits_first_clause(self, request: Request) -> bool:
        if not self.family.traits.is_autoregressive:
            return True  # no KV cache
        tokens = self.family.count_tokens(request.pending_clauses[0]) + FIRST_CLAUSE_SPARE_TOKENS
        needed = -(-tokens // self.blocks.block_size) + 1
        return self.blocks.can_allocate(needed)

    # --- applying a plan -------------------------------------------------------------------

    def start_clauses(self, requests: Sequence[Request]) -> list[PrefillItem]:
        """Start each request's next clause, in order, until the KV pool is full: the
        prefill items to run (their KV slots reserved)."""
        items: list[PrefillItem] = []
        autoregressive = self.family.traits.is_autoregressive
        for request in requests:
            if request.status is not Status.RUNNING or not request.pending_clauses:
                continue
            plan = self._next_plan(request)
            if plan is None:
                continue
            text = request.pending_clauses[0]
            self._start_clause_context(request)
            if request.clause_seed_base is not None:
                request.generator.manual_seed(clause_seed(
                    request.params.seed, request.clause_seed_base + request.clauses_started))
            if not autoregressive:
                request.pending_clauses.popleft()
                request.clauses_started += 1
                request.clause = Clause(plan.tokens, 0, 0, first_frame=request.progress.generated)
                items.append(PrefillItem(request, plan.tokens, [], [], text))
                continue
            count = int(plan.tokens.shape[0])
            needed = request.table.blocks_needed(count, self.blocks.block_size)
            if not self.blocks.can_allocate(needed):
                if len(self.running) == 1:
                    self.fail(request, "the clause does not fit in the KV pool")
                break
            request.pending_clauses.popleft()
            request.clauses_started += 1
            positions = list(range(request.next_position, request.next_position + count))
            slots = request.table.append(count, request.next_position,
                                         self.blocks.allocate(needed), self.blocks.block_size)
            request.next_position += count
            request.steps_start = request.next_position
            stage = plan.retime.stage() if plan.retime else None
            request.clause = Clause(plan.tokens, plan.frames_after_eos, plan.max_frames,
                                    first_frame=request.progress.generated,
                                    features=plan.features, retimer=stage)
            if stage is not None:
                request.decode_options = stage.decode_options
                request.decoder_lookahead = stage.decoder_lookahead
            request.last_latent = None
            items.append(PrefillItem(request, plan.tokens, positions, slots,
                                     features=plan.features))
        return items

    def start_steps(self, requests: Sequence[Request],
                    prefills: Sequence[PrefillItem]) -> list[StepItem]:
        """An AR step's row for each request, in order, its KV slot reserved (preempting
        the newest streams when the pool is full)."""
        items: list[StepItem] = []
        # NOTE: a request that already reserved slots this step is never preempted.
        protected = {id(item.request) for item in prefills}
        for request in requests:
            if request.status is not Status.RUNNING or request.clause is None:
                continue  # preempted for an older stream, or its clause did not start
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

    @property
    def restarts_decoder(self) -> bool:
        """Whether each clause starts with a fresh decoder (pocket mode; Piper always)."""
        return (self.config.chaining == "pocket"
                or self.family.traits.resets_decoder_per_clause)

    def _start_clause_context(self, request: Request) -> None:
        """Pocket mode: back to the voice state with a fresh decoder. Chained mode: drop
        own context older than the window."""
        if self.restarts_decoder and request.progress.started:
            assert request.decoder_slot is not None
            self.slots.reset(request.decoder_slot)
            request.progress.restart_decoder(self.family.traits.fade_in_samples)
        if self.config.chaining == "pocket":
            self.blocks.release(request.table.drop_own())
            request.next_position = request.voice.length
        else:
            cutoff = request.next_position - self.config.context_window
            if self.config.chaining == "audio":  # the earlier clause's text tokens go too
                cutoff = max(cutoff, request.steps_start)
            self.blocks.release(request.table.drop_before(cutoff))
        request.progress.start_clause()

    # --- memory pressure -------------------------------------------------------------------

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

    # --- endings ---------------------------------------------------------------------------

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
