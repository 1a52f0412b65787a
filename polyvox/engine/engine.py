"""The engine: many concurrent streams, one process, each stream as if it were alone.

`Engine.step()` is the whole loop: the planner decides (polyvox/engine/planner.py, on a
snapshot), `Streams` applies its decisions (KV blocks, decoder slots), the runner runs
the stages, and the results are delivered. Requests enter with `add_request` (complete
text, or text streamed in with `add_text` / `finish_text`) and leave finished, aborted or
failed; every step returns the audio chunks it produced.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from polyvox.config import EngineConfig
from polyvox.engine.allocator import keep_freed_memory
from polyvox.engine.decoder_pool import DecoderSlotPool
from polyvox.engine.graphs import DecodeGraphs, StepGraphs
from polyvox.engine.kv_cache import BlockManager, BlockTable, PagedKVCache
from polyvox.engine.load import LoadModel
from polyvox.engine.runner import DecodeItem, HostRow, PrefillItem, Runner, StepItem, StepResult
from polyvox.engine.baselines import make_planner
from polyvox.engine.costs import Recording, StageCosts, Timing
from polyvox.engine.plans import WorkPlan
from polyvox.engine.streams import Streams
from polyvox.models.base import ModelFamily
from polyvox.request import AudioChunk, ChunkPlace, Request, Status
from polyvox.text.normalize import make_normalizer
from polyvox.text.pipeline import TextPipeline
from polyvox.text.sanitize import clean_text

MIN_FRAMES_BEFORE_EOS = 6  # EOS is ignored on a clause's first frames (pocket-tts' rule)


class EngineError(RuntimeError):
    """A request the engine cannot take (bad voice, empty text, queue full)."""


@dataclass
class Voice:
    """A registered voice: its KV prefix in shared, reference-counted blocks."""

    name: str
    table: BlockTable  # held by the registry (one reference per block)
    length: int  # positions 0..length-1


class Engine:
    def __init__(self, family: ModelFamily, config: EngineConfig | None = None,
                 device: str | torch.device = "cpu") -> None:
        self.family = family
        self.config = (config or EngineConfig()).for_family(family)
        keep_freed_memory()
        spec = family.kv_spec
        per_block = PagedKVCache.bytes_per_block(spec.num_layers, spec.kv_heads, spec.head_dim,
                                                 self.config.block_size, spec.dtype)
        if spec.num_layers == 0:  # no KV cache (non-autoregressive family)
            num_blocks = 1
        else:
            num_blocks = self.config.num_kv_blocks or max(
                2, int(self.config.kv_memory_mb * 2**20 // per_block))
        device = torch.device(device)
        if self.config.graphs == "cuda" and device.type != "cuda":
            raise ValueError("graphs='cuda' needs a CUDA device; use graphs='shaped' to run "
                             "the same fixed shapes eagerly")
        shaped = self.config.graphs != "off"
        self.blocks = BlockManager(num_blocks + shaped, self.config.block_size)
        self.cache = PagedKVCache(spec.num_layers, spec.kv_heads, spec.head_dim,
                                  num_blocks + shaped, self.config.block_size, spec.dtype,
                                  device)
        self.slots = DecoderSlotPool(family.decoder_state_shapes(),
                                     self.config.decoder_slots + shaped,
                                     family.new_decoder_state(1), device)
        # Fixed shapes pad batches with rows that write and read a KV block and a decoder
        # slot of their own, held here for the engine's life.
        self.padding_blocks = self.blocks.allocate(1) if shaped else []
        self.padding_slot = self.slots.allocate() if shaped else None
        step_graphs = decode_graphs = None
        if shaped:
            capture = self.config.graphs == "cuda"
            buckets = self.config.batch_buckets
            if family.traits.is_autoregressive:
                step_graphs = StepGraphs(family, self.cache, buckets,
                                         self.padding_blocks[0] * self.config.block_size,
                                         capture, self.config.max_clause_tokens or 0)
            decode_graphs = DecodeGraphs(family, self.slots, buckets, self.padding_slot,
                                         capture)
        self.runner = Runner(family, self.cache, self.slots, step_graphs, decode_graphs)
        self.streams = Streams(self.config, family, self.blocks, self.slots, self.runner)
        self.planner = make_planner(self.config, family)
        self.costs = StageCosts()  # what work costs here, learned from the timings below
        # The time the planner reads: the machine's, or one that advances a fixed amount
        # per engine step with the cost model left at its priors (run_on_a_step_clock).
        self._seconds_per_step: float | None = None
        self._step_time = 0.0
        self.recording: Recording | None = None  # set one: timings and clauses are kept
        self._ar_steps = 0  # AR steps taken (the decode tick's clock)
        self._turns = 0  # steps planned with streams admitted
        self.requests: dict[str, Request] = {}
        self.voices: dict[str, Voice] = {}
        self._ids = itertools.count()
        self._endings: list[AudioChunk] = []
        self.num_behind = 0  # listeners whose audio ran out (slack < 0) after the last step
        # ... of which were not behind after the step before: they fell behind in this one
        self.num_fell_behind = 0
        self._behind: set[str] = set()  # the listeners behind after the last step
        self.load = LoadModel()  # what the engine sustains, learned from its steps
        self._samples_made = 0  # audio samples delivered in the current step
        self._ran_dry: set[str] = set()  # requests whose listener stalled during this step
        # The overlapped loop: the AR step whose EOS logits are not read yet, and chunks
        # (audio or clause marks) decided but not yet delivered, in order.
        self._in_flight: InFlightStep | None = None
        self._undelivered: list[tuple[PendingChunk, HostRow | None]] = []
        # Where audio goes as soon as its decoder call is done (AsyncEngine sets it): a
        # listener about to run dry hears its chunk before the step's other decoder calls
        # (e.g. a tick's batch of 4-frame chunks) are done. None: step() returns all chunks.
        # Not used by the overlapped loop, which delivers a step late by design.
        self.on_chunks: Callable[[list[AudioChunk]], None] | None = None

    @property
    def _on_step_clock(self) -> bool:
        """Offline on a step clock (run_on_a_step_clock): the cost model keeps its priors."""
        return self._seconds_per_step is not None

    def clock(self) -> float:
        """Now, as the planner and the listeners' deadlines see it."""
        return self._step_time if self._on_step_clock else time.monotonic()

    def run_on_a_step_clock(self, seconds_per_step: float) -> None:
        """Offline synthesis that does not depend on how fast this machine runs: from now
        on the clock advances `seconds_per_step` per engine step and the cost model stops
        learning (it keeps its priors), and a request added to an idle engine starts the
        clock and the decode tick over, so the planner sees the same inputs on every run
        and a request gets the same decoder windows, hence the same samples. Streamed
        audio depends on its windows only at float rounding (~1e-6), but the ASR judge
        can hear even that (docs/distill.md, session 26): the eval uses this clock."""
        if not seconds_per_step > 0:
            raise ValueError(f"seconds_per_step must be positive, not {seconds_per_step}")
        if self.requests:
            raise EngineError("set the step clock before any request is added")
        self._seconds_per_step = seconds_per_step
        self._step_time = 0.0
        self.costs = StageCosts()

    def warm_up(self) -> None:
        """Build every fixed shape serving will need (with graphs=cuda: capture them now,
        not while a listener waits): AR step shapes up to the longest context a stream
        can read, decoder shapes for every chunk size up to the largest (Pocket-style
        decoders; a windowed decoder's clause-end shapes are still built on first use)."""
        runner, config = self.runner, self.config
        if runner.step_graphs is not None:
            longest_voice = max((v.length for v in self.voices.values()), default=0)
            clause = config.max_clause_tokens or 0
            frames = int(self.family.max_frames(clause))
            # NOTE: context is dropped in whole blocks: up to one more block stays.
            runner.step_graphs.warm_up(longest_voice + config.context_window + clause + frames
                                       + config.block_size)
        if runner.decode_graphs is not None and not self.family.traits.decoder_lookahead:
            assert config.max_chunk_frames
            runner.decode_graphs.warm_up(list(range(1, config.max_chunk_frames + 1)))

    # --- voices ----------------------------------------------------------------------------

    def register_voice(self, name: str, k: torch.Tensor, v: torch.Tensor) -> Voice:
        """Store a voice prefix k, v [layers, P, kv_heads, dim] once, for every request."""
        if name in self.voices:
            raise EngineError(f"voice {name!r} is already registered")
        length, size = int(k.shape[1]), self.config.block_size
        count = -(-length // size)
        if not self.blocks.can_allocate(count):
            raise EngineError(f"no room in the KV pool for voice {name!r} ({count} blocks)")
        table = BlockTable()
        slots = table.append(length, 0, self.blocks.allocate(count), size) if length else []
        if slots:
            index = torch.tensor(slots, device=self.cache.k.device)
            self.cache.k[:, index] = k.to(self.cache.k.dtype)
            self.cache.v[:, index] = v.to(self.cache.v.dtype)
        voice = Voice(name, table, length)
        self.voices[name] = voice
        return voice

    def unregister_voice(self, name: str) -> None:
        """Drop a voice; requests still using it keep their references to its blocks."""
        voice = self.voices.pop(name)
        self.blocks.release(voice.table.blocks)

    # --- requests ----------------------------------------------------------------------------

    def add_request(self, text: str, voice: str, params: Any, request_id: str | None = None,
                    text_complete: bool = True, normalize: bool = True,
                    clauses: Sequence[str] | None = None, skip_clauses: int = 0,
                    clause_seed_base: int | None = None,
                    handed_in: float | None = None) -> Request:
        """Queue a request. With text_complete=False more text follows via add_text().
        `normalize` reads numbers, dates, codes, emails, ... as words (English). `clauses`:
        the text already split (`clauses_of`), spoken as given; `text` is then ignored (a
        cluster resumes a stream from its first clause not yet delivered this way).
        `skip_clauses`: the first clauses of the text are not spoken (a cluster resumes a
        streamed text this way: all of its text again, its delivered clauses skipped).
        `clause_seed_base`: seed each clause on its own (`clause_seed`), counting this
        request's first clause as that index of the whole text, so a clause restarted
        elsewhere samples what it sampled the first time. `handed_in`: when the caller
        handed it in, on this engine's clock (the load model's first audio counts from
        there; default: now)."""
        if voice not in self.voices:
            raise EngineError(f"unknown voice {voice!r}; registered: {sorted(self.voices)}")
        if len(self.streams.waiting) >= self.config.max_queued:
            raise EngineError("the queue is full; retry later")
        request_id = request_id or f"req-{next(self._ids)}"
        if request_id in self.requests:
            raise EngineError(f"request id {request_id!r} is in use")
        if self._on_step_clock and not self.requests:
            # NOTE: on the step clock an idle engine starts over (the clock and the decode
            # tick's phase), so a request's windows do not depend on the ones before it.
            self._step_time, self._ar_steps, self._turns = 0.0, 0, 0
        request = Request(request_id, self.voices[voice], params, text_complete=text_complete,
                          arrival=self.clock())
        request.generator.manual_seed(params.seed)
        request.skip_clauses = max(0, skip_clauses)
        request.clause_seed_base = clause_seed_base
        request.handed_in = handed_in
        if clauses is not None:
            if not text_complete or not all(isinstance(c, str) and c.strip() for c in clauses):
                raise EngineError("clauses must be complete text: non-empty strings")
            _queue_clauses(request, list(clauses))
        elif text_complete:
            _queue_clauses(request, self.clauses_of(text, normalize))
        else:
            request.splitter = self.text_pipeline(normalize)
            _queue_clauses(request, request.splitter.feed(text))
        if text_complete and not request.pending_clauses:
            raise EngineError("the text is empty: give at least one word to speak")
        others = [*self.streams.running, *self.streams.waiting]
        for other in others:  # it shares their first steps
            if other.first_audio_time is None and other.streams_sharing is not None:
                other.streams_sharing += 1
        if text_complete:
            request.streams_sharing = len(others)
        self.requests[request_id] = request
        self.streams.waiting.append(request)
        return request

    def clauses_of(self, text: str, normalize: bool = True) -> list[str]:
        """A complete text as the clauses its request speaks, in order."""
        if self.config.chaining == "pocket":
            text = clean_text(text)  # as TextPipeline does: no control or format characters
            if normalize:
                text = make_normalizer("en").normalize(text)
            return self.family.split_like_reference(text, self.config.max_clause_tokens) \
                if text.strip() else []
        splitter = self.text_pipeline(normalize)
        return [*splitter.feed(text), *splitter.flush()]

    def text_pipeline(self, normalize: bool = True) -> TextPipeline:
        """The text path of a streamed request: what the WebSocket's word timings replay
        to know which client words each clause speaks (polyvox/text/words.py)."""
        return TextPipeline(self.family.count_tokens, self.config.max_clause_tokens, normalize,
                            first_max_tokens=self.config.first_clause_tokens)

    def add_text(self, request_id: str, text: str) -> None:
        request = self._live(request_id)
        if request.text_complete:
            raise EngineError(f"request {request_id!r} already has all of its text")
        _queue_clauses(request, request.splitter.feed(text))

    def finish_text(self, request_id: str) -> None:
        request = self._live(request_id)
        if not request.text_complete:
            _queue_clauses(request, request.splitter.flush())
            request.text_complete = True

    def fail(self, request_id: str, message: str) -> None:
        """End a request with an error (its stream ends with `message`); frees what it holds."""
        request = self.requests.get(request_id)
        if request is not None and not request.status.is_done:
            self.streams.fail(request, message)

    def abort(self, request_id: str) -> None:
        """Stop a request now: every block and slot it holds returns to its pool."""
        request = self.requests.pop(request_id, None)
        if request is None or request.status.is_done:
            return
        self.streams.release(request)
        request.status = Status.ABORTED

    def _live(self, request_id: str) -> Request:
        request = self.requests.get(request_id)
        if request is None or request.status.is_done:
            raise EngineError(f"no live request {request_id!r}")
        return request

    # --- the loop ----------------------------------------------------------------------------

    def has_work(self) -> bool:
        """Something to admit, prefill, step, decode, deliver or finish (a stream waiting
        for more streamed text has none)."""
        return (self._in_flight is not None or bool(self._undelivered)
                or bool(self.streams.failed) or any(
            r.status is Status.WAITING or r.clause is not None or r.pending_clauses
            or r.pending_latents or r.text_complete
            for r in self.requests.values()))

    def step(self) -> list[AudioChunk]:
        """Plan -> prefill -> AR step -> plan the chunks -> decode -> deliver. In the
        overlapped loop the AR step's results are read back one engine step later (see
        `_resolve`) and each chunk is delivered one engine step after its decoder call
        was queued."""
        began = time.perf_counter()
        num_streams = sum(1 for r in self.streams.running if r.has_work)
        self._samples_made = 0
        self._ran_dry.clear()
        work = self._plan_work()
        prefills = self.streams.start_clauses(work.prefills)
        steps = self.streams.start_steps(work.steps, prefills)
        self._ar_steps += bool(steps)
        self._run_rests(work.rests)
        self._run_prefills(prefills)
        self._run_ar_step(steps)
        view = self.streams.view(self._ar_steps, bool(steps), self._turns, plan_clauses=False)
        chunks = self.planner.plan_decodes(view, self.clock(), self.costs, work)
        outputs = self._run_decodes([DecodeItem(*chunk) for chunk in chunks])
        if self._seconds_per_step is not None:
            self._step_time += self._seconds_per_step
        elif steps:
            seconds = time.perf_counter() - began
            self.costs.observe_engine_step(seconds)
            if self.recording is not None:
                self.recording.timings.append(Timing("engine_step", seconds, 1, 0))
        endings = self._collect_endings()
        self._count_behind()
        self.load.observe_step(time.perf_counter() - began,
                               self._samples_made / self.family.audio.sample_rate,
                               num_streams, self.num_fell_behind)
        return outputs + endings

    def _plan_work(self) -> WorkPlan:
        self.streams.admit(self.planner.max_admitted)
        view = self.streams.view(self._ar_steps, turn=self._turns)
        self._turns += bool(view.streams)
        return self.planner.plan_work(view, self.clock(), self.costs)

    def _observe(self, stage: str, seconds: float, calls: int, units: float) -> None:
        """A stage's timing, for the cost model (and the trace, when one is kept)."""
        if calls <= 0:
            return
        if not self._on_step_clock:
            getattr(self.costs, stage).observe(seconds, calls, units)
        if self.recording is not None:
            self.recording.timings.append(Timing(stage, seconds, calls, units))

    def _run_rests(self, requests: tuple[Request, ...]) -> None:
        """The rest of clauses computed in pieces (non-autoregressive families)."""
        if not requests:
            return
        started = time.perf_counter()
        rests = self.runner.continue_clauses(list(requests))
        self._observe("piece", time.perf_counter() - started, 1,
                      sum(len(latents) for latents in rests))
        for request, latents in zip(requests, rests):
            request.partial = None
            self._add_clause_latents(request, latents)

    def _run_prefills(self, prefills: list[PrefillItem]) -> None:
        started = time.perf_counter()
        starts = self.runner.prefill(
            prefills, self._first_piece_frames if self.config.clause_pieces else None)
        seconds = time.perf_counter() - started
        if self.family.traits.is_autoregressive:
            self._observe("prefill", seconds, int(bool(prefills)),
                          sum(int(item.tokens.shape[0]) for item in prefills))
        else:
            self._observe("clause", seconds, len(prefills), len(prefills))
        for item, start in zip(prefills, starts):  # non-autoregressive families
            item.request.partial = start.rest
            # NOTE: one entry per clause started (None where not known); it goes out with
            # the clause's last chunk.
            item.request.progress.clause_words(start.word_frames)
            self._add_clause_latents(item.request, start.latents)

    def _run_ar_step(self, steps: list[StepItem]) -> None:
        started = time.perf_counter()
        launched = self.runner.launch_step(steps, save_rng=self.config.overlap)
        if self.config.overlap:
            for row, item in enumerate(steps):
                item.request.last_latent = launched.latents[row]  # the next step's input
            current = InFlightStep(steps, launched)
            if self._in_flight is not None:
                self._resolve(self._in_flight, current)
            self._in_flight = current if steps else None
        elif launched.eos is not None:
            for item, latent, logit in zip(steps, launched.latents.unbind(0),
                                           launched.eos.wait().tolist()):
                self._advance(item.request, latent, logit)
        self._observe("step", time.perf_counter() - started, int(bool(steps)), len(steps))

    def _run_decodes(self, decodes: list[DecodeItem]) -> list[AudioChunk]:
        """Decode the chunks and deliver what is due: at once, as each decoder call ends,
        to `on_chunks` (then only clause marks are returned), or returned at the end."""
        started = time.perf_counter()
        hand_over = self.on_chunks if not self.config.overlap else None
        chunks: list[tuple[PendingChunk, HostRow | None]] = []
        if hand_over is None:
            decoded = self.runner.decode(decodes)
            chunks = [(self._take_frames(item), pcm) for item, pcm in zip(decodes, decoded)]
        else:
            def deliver_now(indices: list[int], rows: list[HostRow]) -> None:
                if ready := self._delivered(
                        [(self._take_frames(decodes[i]), pcm) for i, pcm in zip(indices, rows)]):
                    hand_over(ready)

            self.runner.decode(decodes, on_batch=deliver_now)
        chunks += [(mark, None) for mark in self._clause_marks()]
        if self.config.overlap:
            chunks, self._undelivered = self._undelivered, chunks
        outputs = self._delivered(chunks)
        self._observe("decode", time.perf_counter() - started, self.runner.decode_calls,
                      sum(item.window_frames for item in decodes))
        return outputs

    @property
    def _first_piece_frames(self) -> int:
        """A first clause's first piece (families that compute clauses in pieces): what
        the first chunk reads, lookahead included."""
        return (self.config.first_chunk_frames or 1) + self.family.traits.decoder_lookahead

    def _add_clause_latents(self, request: Request, latents: torch.Tensor) -> None:
        """A non-autoregressive clause's latents [T, D]: all of it, or its first piece
        (`request.partial` computes the rest); the clause ends with its last frames."""
        request.pending_latents.extend(latents)
        request.progress.add_frames(len(latents))
        if request.partial is None:
            self._close_clause(request)

    def _resolve(self, previous: InFlightStep, current: InFlightStep) -> None:
        """Apply the results of the step before `current`, now that its EOS logits are
        back. A clause that ended there must not have had `current`'s speculative step:
        that step is undone (KV slot, position and noise draw), so the stream continues
        exactly as the plain loop would have, and its latent is never decoded."""
        assert previous.result.eos is not None
        rows = {id(item.request): row for row, item in enumerate(current.items)}
        for row, (item, latent, logit) in enumerate(zip(
                previous.items, previous.result.latents.unbind(0),
                previous.result.eos.wait().tolist())):
            request = item.request
            if row in previous.void or request.status.is_done or request.clause is None:
                continue
            self._advance(request, latent, logit)
            later = rows.get(id(request))
            if request.clause is None and later is not None:
                self.streams.undo_step(request, current.items[later],
                                         current.result.rng_states[later])
                current.void.add(later)

    def _count_behind(self) -> None:
        """How many listeners are behind: their audio has run out now (slack < 0, audio
        still to come), or it ran out during this step before their next chunk came; a
        player that started at the first chunk has stalled either way. Read by admission
        control (from any thread); the load model counts those who fell behind in this
        step (`num_fell_behind`).

        NOTE: a listener behind stays behind until the engine has made up what it owes
        (its slack counts from its first chunk). Counted again at every step, one stall
        marked every load-model window until then as behind, at whatever load those
        windows had (fewer streams, once admission held new ones back): a server whose
        callers heard no gap in its first run learned that a single `pocket/english`
        stream, which the engine makes 3x faster than real time, falls behind, and held 1
        stream for the rest of its runs (docs/perf.md)."""
        now, rate = self.clock(), self.family.audio.sample_rate
        behind = {r.request_id for r in self.streams.running if r.is_behind(now, rate)}
        stalled = behind | self._ran_dry
        self.num_behind = len(stalled)
        self.num_fell_behind = len(stalled - self._behind)
        self._behind = behind

    def _advance(self, request: Request, latent: torch.Tensor, eos_logit: float) -> None:
        """Apply one step's result: keep the frame, or end the clause (pocket-tts' rule:
        the clause ends `frames_after_eos` frames after the EOS step, or at its cap). A
        retimed clause's frames go through its retimer: none, one or several come out."""
        clause = request.clause
        assert clause is not None
        index = clause.num_frames
        threshold = self.family.eos_threshold(request.params)
        if clause.eos_frame is None and index >= MIN_FRAMES_BEFORE_EOS and eos_logit > threshold:
            clause.eos_frame = index
        if clause.eos_frame is not None and index >= clause.eos_frame + clause.frames_after_eos:
            self._close_clause(request)
            return
        kept = [latent] if clause.retimer is None else clause.retimer.push(latent)
        request.pending_latents.extend(kept)
        request.progress.add_frames(len(kept))
        if not self.config.overlap:  # overlapped: set when the next step was launched
            request.last_latent = latent
        clause.num_frames += 1
        if clause.num_frames >= clause.max_frames:
            self._close_clause(request)

    def _close_clause(self, request: Request) -> None:
        """The clause generating ends (recorded when the engine keeps a recording); a
        retimed clause's last frames come out of its retimer."""
        clause = request.clause
        if clause is not None and clause.retimer is not None:
            tail = clause.retimer.finish()
            request.pending_latents.extend(tail)
            request.progress.add_frames(len(tail))
        if self.recording is not None and clause is not None:
            self.recording.clauses.setdefault(request.request_id, []).append(
                (int(clause.tokens.shape[0]), request.progress.generated - clause.first_frame))
        self._end_clause(request)

    @staticmethod
    def _end_clause(request: Request) -> None:
        request.clause = None
        request.last_latent = None
        request.progress.end_clause()

    def _take_frames(self, item: DecodeItem) -> PendingChunk:
        """The bookkeeping of a chunk whose decoder call is queued: its frames leave the
        request's pending latents, its place in the stream and its fade-in are fixed."""
        request = item.request
        del request.pending_latents[: item.num_frames]
        audio = self.family.audio
        place = request.progress.take_chunk(item.num_frames, self.family.traits.fade_in_samples,
                                            item.num_frames * audio.samples_per_frame)
        ramp = None
        if place.fade is not None:
            start, count = place.fade
            ramp = torch.linspace(0, 1, self.family.traits.fade_in_samples)[start: start + count]
        return PendingChunk(request, place, ramp)

    def _delivered(self, chunks: list[tuple[PendingChunk, HostRow | None]]
                   ) -> list[AudioChunk]:
        return [out for pending, pcm in chunks if (out := self._deliver(pending, pcm)) is not None]

    def _deliver(self, pending: PendingChunk, pcm: HostRow | None) -> AudioChunk | None:
        """The chunk, once its samples are in host memory (None: its request was aborted)."""
        request, place = pending.request, pending.place
        request.progress.delivered()
        if request.status is Status.ABORTED:
            return None
        samples = torch.zeros(0) if pcm is None else pcm.wait()
        if pending.ramp is not None:
            samples = samples.clone()
            samples[: pending.ramp.numel()] *= pending.ramp
        chunk = AudioChunk(request.request_id, samples, self.family.audio.sample_rate,
                           place.index, created=self.clock(), clause_index=place.clause_index,
                           ends_clause=place.ends_clause, word_frames=place.word_frames)
        if (samples.numel() and request.first_audio_time is not None
                and request.slack(chunk.created, self.family.audio.sample_rate) < 0):
            # NOTE: the listener ran out before this chunk came, so its player stalled,
            # although its slack counted after the step may be positive again (a long
            # step that ends with a whole clause of audio hides the stall)
            self._ran_dry.add(request.request_id)
        if request.first_audio_time is None and samples.numel():
            request.first_audio_time = chunk.created
            if request.streams_sharing is not None:
                since = request.arrival if request.handed_in is None else request.handed_in
                self.load.observe_first_audio(request.streams_sharing, chunk.created - since)
        request.num_samples += samples.numel()
        self._samples_made += samples.numel()
        return chunk

    def _clause_marks(self) -> list[PendingChunk]:
        """Empty chunks that mark the end of clauses whose last frames were already decoded
        before the clause was known to end (EOS is decided one step after the last frame)."""
        return [PendingChunk(request, place, None) for request in self.streams.running
                for place in request.progress.take_marks()]

    def _collect_endings(self) -> list[AudioChunk]:
        endings = []
        kept = []
        for request in list(self.streams.running) + list(self.streams.failed):
            failed = request.status is Status.FAILED
            if not failed and not (request.status is Status.RUNNING and request.is_complete):
                continue
            if request.progress.undelivered:  # the ending follows the request's last audio
                if failed:
                    kept.append(request)
                continue
            if not failed:
                self.streams.release(request)
                request.status = Status.FINISHED
            request.finish_time = self.clock()
            self.requests.pop(request.request_id, None)
            endings.append(AudioChunk(request.request_id, torch.zeros(0),
                                      self.family.audio.sample_rate, request.progress.chunks,
                                      created=request.finish_time, is_last=True,
                                      error=request.error))
        self.streams.failed[:] = kept
        return endings

    # --- checks ------------------------------------------------------------------------------

    def check_integrity(self) -> bool:
        """Every block reference is held by a live request, a voice or the padding rows;
        pools are consistent."""
        holders = [voice.table.blocks for voice in self.voices.values()]
        holders.append(self.padding_blocks)
        for request in self.streams.running:
            holders.append(request.table.blocks if request.status is Status.RUNNING
                           else request.table.shared_blocks())
        slots_held = {r.decoder_slot for r in self.streams.running}
        if self.padding_slot is not None:
            slots_held.add(self.padding_slot)
        return (self.blocks.check_integrity(holders) and self.slots.check_integrity()
                and slots_held == self.slots.in_use)

    def is_idle(self) -> bool:
        """No request holds anything: only voices (and the padding rows) hold blocks, and
        every decoder slot but the padding rows' is free."""
        held = sum(len(v.table.blocks) for v in self.voices.values()) + len(self.padding_blocks)
        return (not self.streams.running and not self.streams.waiting
                and self.blocks.num_used == held
                and self.slots.in_use == ({self.padding_slot} - {None}))


class InFlightStep:
    """An AR step queued on the device whose EOS logits the host has not read yet."""

    def __init__(self, items: list[StepItem], result: StepResult) -> None:
        self.items, self.result = items, result
        self.void: set[int] = set()  # rows undone: their clause ended the step before


class PendingChunk(NamedTuple):
    """A chunk whose place in its stream is fixed and whose samples may still be on
    their way from the device (clause marks have none)."""

    request: Request
    place: ChunkPlace
    ramp: torch.Tensor | None  # fade-in factors for the first samples


def run_to_completion(engine: Engine, max_steps: int = 1_000_000) -> dict[str, torch.Tensor]:
    """Step until no request is left; returns each finished request's concatenated audio."""
    audio: dict[str, list[torch.Tensor]] = {}
    for _ in range(max_steps):
        if not engine.requests:
            break
        for chunk in engine.step():
            audio.setdefault(chunk.request_id, []).append(chunk.samples)
    return {rid: torch.cat(parts) for rid, parts in audio.items()}


def _queue_clauses(request: Request, clauses: list[str]) -> None:
    """Queue a request's next clauses, leaving out the ones it is told to skip."""
    skipped = min(request.skip_clauses, len(clauses))
    request.skip_clauses -= skipped
    request.pending_clauses.extend(clauses[skipped:])
