"""The engine: many concurrent streams, one process, each stream as if it were alone.

`Engine.step()` is the whole loop: schedule -> run the stages -> postprocess. Requests
enter with `add_request` (complete text, or text streamed in with `add_text` /
`finish_text`) and leave finished, aborted or failed; every step returns the audio chunks
it produced.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import torch

from polyvox.config import EngineConfig
from polyvox.engine.allocator import keep_freed_memory
from polyvox.engine.decoder_pool import DecoderSlotPool
from polyvox.engine.kv_cache import BlockManager, BlockTable, PagedKVCache
from polyvox.engine.runner import DecodeItem, Runner
from polyvox.engine.scheduler import Scheduler
from polyvox.models.base import ModelFamily
from polyvox.request import AudioChunk, Request, Status
from polyvox.text.normalize import make_normalizer
from polyvox.text.pipeline import TextPipeline

MIN_FRAMES_BEFORE_EOS = 6  # EOS is ignored on a clause's first frames (pocket-tts' rule)
BEHIND_SECONDS = 0.1  # a listener this far short of real time has heard an underrun


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
        self.blocks = BlockManager(num_blocks, self.config.block_size)
        self.cache = PagedKVCache(spec.num_layers, spec.kv_heads, spec.head_dim, num_blocks,
                                  self.config.block_size, spec.dtype, torch.device(device))
        self.slots = DecoderSlotPool(family.decoder_state_shapes(), self.config.decoder_slots,
                                     family.new_decoder_state(1), torch.device(device))
        self.runner = Runner(family, self.cache, self.slots)
        self.scheduler = Scheduler(self.config, family, self.blocks, self.slots, self.runner)
        self.requests: dict[str, Request] = {}
        self.voices: dict[str, Voice] = {}
        self._ids = itertools.count()
        self._endings: list[AudioChunk] = []
        self.num_behind = 0  # listeners short of real time after the last step

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
                    text_complete: bool = True, normalize: bool = True) -> Request:
        """Queue a request. With text_complete=False more text follows via add_text().
        `normalize` reads numbers, dates, codes, emails, ... as words (English)."""
        if voice not in self.voices:
            raise EngineError(f"unknown voice {voice!r}; registered: {sorted(self.voices)}")
        if len(self.scheduler.waiting) >= self.config.max_queued:
            raise EngineError("the queue is full; retry later")
        request_id = request_id or f"req-{next(self._ids)}"
        if request_id in self.requests:
            raise EngineError(f"request id {request_id!r} is in use")
        request = Request(request_id, self.voices[voice], params, text_complete=text_complete)
        request.generator.manual_seed(params.seed)
        if text_complete and self.config.chaining == "pocket":
            if normalize:
                text = make_normalizer("en").normalize(text)
            if text.strip():
                request.pending_clauses.extend(
                    self.family.split_like_reference(text, self.config.max_clause_tokens))
        else:
            request.splitter = TextPipeline(self.family.count_tokens,
                                            self.config.max_clause_tokens, normalize,
                                            first_max_tokens=self.config.first_clause_tokens)
            request.pending_clauses.extend(request.splitter.feed(text))
            if text_complete:
                request.pending_clauses.extend(request.splitter.flush())
        if text_complete and not request.pending_clauses:
            raise EngineError("the text is empty: give at least one word to speak")
        self.requests[request_id] = request
        self.scheduler.waiting.append(request)
        return request

    def add_text(self, request_id: str, text: str) -> None:
        request = self._live(request_id)
        if request.text_complete:
            raise EngineError(f"request {request_id!r} already has all of its text")
        request.pending_clauses.extend(request.splitter.feed(text))

    def finish_text(self, request_id: str) -> None:
        request = self._live(request_id)
        if not request.text_complete:
            request.pending_clauses.extend(request.splitter.flush())
            request.text_complete = True

    def abort(self, request_id: str) -> None:
        """Stop a request now: every block and slot it holds returns to its pool."""
        request = self.requests.pop(request_id, None)
        if request is None or request.status.is_done:
            return
        self.scheduler.release(request)
        request.status = Status.ABORTED

    def _live(self, request_id: str) -> Request:
        request = self.requests.get(request_id)
        if request is None or request.status.is_done:
            raise EngineError(f"no live request {request_id!r}")
        return request

    # --- the loop ----------------------------------------------------------------------------

    def has_work(self) -> bool:
        """Something to admit, prefill, step, decode or finish (a stream waiting for more
        text has none)."""
        return any(
            r.status is Status.WAITING or r.clause is not None or r.pending_clauses
            or r.pending_latents or r.text_complete
            for r in self.requests.values()
        )

    def step(self) -> list[AudioChunk]:
        plan = self.scheduler.plan()
        costs = self.scheduler.costs
        started = time.perf_counter()
        prefilled = self.runner.prefill(plan.prefills)
        finished = time.perf_counter()
        if self.family.is_autoregressive:
            costs.observe("prefill_token", finished - started,
                          sum(int(item.tokens.shape[0]) for item in plan.prefills))
        else:
            costs.observe("prefill_clause", finished - started, len(plan.prefills))
        for item, latents in zip(plan.prefills, prefilled):
            item.request.pending_latents.extend(latents)  # non-autoregressive: whole clause
            item.request.frames_generated += len(latents)
            self._end_clause(item.request)
        started = time.perf_counter()
        stepped = self.runner.step(plan.steps)
        costs.observe("step", time.perf_counter() - started, 1 if plan.steps else 0)
        for item, (latent, logit) in zip(plan.steps, stepped):
            self._advance(item.request, latent, logit)
        turn = None
        if self.config.schedule == "interleaved":
            turn = [item.request for item in plan.prefills] + [i.request for i in plan.steps]
            turn = turn or self.scheduler.running[-1:]
        decodes = self.scheduler.plan_decodes(turn)
        started = time.perf_counter()
        decoded = self.runner.decode(decodes)
        costs.observe("decode_frame", time.perf_counter() - started,
                      sum(item.window_frames for item in decodes))
        outputs = [self._emit(item, pcm) for item, pcm in zip(decodes, decoded)]
        endings = self._clause_marks() + self._collect_endings()
        self._count_behind()
        return outputs + endings

    def _count_behind(self) -> None:
        """How many listeners with audio still to come are more than BEHIND_SECONDS short
        of real time (read by admission control, from any thread)."""
        now, rate = _now(), self.family.audio.sample_rate
        self.num_behind = sum(
            1 for r in self.scheduler.running
            if r.first_audio_time is not None and r.has_work
            and r.slack(now, rate) < -BEHIND_SECONDS)

    def _advance(self, request: Request, latent: torch.Tensor, eos_logit: float) -> None:
        """Apply one step's result: keep the frame, or end the clause (pocket-tts' rule:
        the clause ends `frames_after_eos` frames after the EOS step, or at its cap)."""
        clause = request.clause
        assert clause is not None
        index = clause.num_frames
        threshold = self.family.eos_threshold(request.params)
        if clause.eos_frame is None and index >= MIN_FRAMES_BEFORE_EOS and eos_logit > threshold:
            clause.eos_frame = index
        if clause.eos_frame is not None and index >= clause.eos_frame + clause.frames_after_eos:
            self._end_clause(request)
            return
        request.pending_latents.append(latent)
        request.frames_generated += 1
        request.last_latent = latent
        clause.num_frames += 1
        if clause.num_frames >= clause.max_frames:
            self._end_clause(request)

    @staticmethod
    def _end_clause(request: Request) -> None:
        request.clause = None
        request.last_latent = None
        if request.clause_ends and request.clause_ends[-1] == request.frames_generated:
            return  # an empty clause: nothing to mark
        request.clause_ends.append(request.frames_generated)

    def _emit(self, item: DecodeItem, pcm: torch.Tensor) -> AudioChunk:
        request = item.request
        del request.pending_latents[: item.num_frames]
        request.clause_frames_decoded += item.num_frames
        request.frames_decoded += item.num_frames
        clause_index = request.clauses_spoken
        ends_clause = bool(request.clause_ends) and request.frames_decoded == request.clause_ends[0]
        if ends_clause:
            request.clause_ends.popleft()
            request.clauses_spoken += 1
        if request.fade_samples:
            total = self.family.fade_in_samples
            start = total - request.fade_samples
            count = min(request.fade_samples, pcm.numel())
            ramp = torch.linspace(0, 1, total)[start: start + count]
            pcm = pcm.clone()
            pcm[:count] *= ramp
            request.fade_samples -= count
        chunk = AudioChunk(request.request_id, pcm, self.family.audio.sample_rate,
                           request.num_chunks, created=_now(), clause_index=clause_index,
                           ends_clause=ends_clause)
        if request.first_audio_time is None:
            request.first_audio_time = chunk.created
        request.num_chunks += 1
        request.num_samples += pcm.numel()
        return chunk

    def _clause_marks(self) -> list[AudioChunk]:
        """Empty chunks that mark the end of clauses whose last frames were already decoded
        before the clause was known to end (EOS is decided one step after the last frame)."""
        marks = []
        for request in self.scheduler.running:
            while request.clause_ends and request.clause_ends[0] == request.frames_decoded:
                request.clause_ends.popleft()
                marks.append(AudioChunk(request.request_id, torch.zeros(0),
                                        self.family.audio.sample_rate, request.num_chunks,
                                        created=_now(), clause_index=request.clauses_spoken,
                                        ends_clause=True))
                request.clauses_spoken += 1
                request.num_chunks += 1
        return marks

    def _collect_endings(self) -> list[AudioChunk]:
        endings = []
        for request in list(self.scheduler.running) + list(self.scheduler.failed):
            failed = request.status is Status.FAILED
            if not failed and not (request.status is Status.RUNNING and request.is_complete):
                continue
            if not failed:
                self.scheduler.release(request)
                request.status = Status.FINISHED
            request.finish_time = _now()
            self.requests.pop(request.request_id, None)
            endings.append(AudioChunk(request.request_id, torch.zeros(0),
                                      self.family.audio.sample_rate, request.num_chunks,
                                      created=request.finish_time, is_last=True,
                                      error=request.error))
        self.scheduler.failed.clear()
        return endings

    # --- checks ------------------------------------------------------------------------------

    def check_integrity(self) -> bool:
        """Every block reference is held by a live request or a voice; pools are consistent."""
        holders = [voice.table.blocks for voice in self.voices.values()]
        for request in self.scheduler.running:
            holders.append(request.table.blocks if request.status is Status.RUNNING
                           else request.table.shared_blocks())
        slots_held = {r.decoder_slot for r in self.scheduler.running}
        return (self.blocks.check_integrity(holders) and self.slots.check_integrity()
                and slots_held == self.slots.in_use)

    def is_idle(self) -> bool:
        """No request holds anything: only voices hold blocks, every decoder slot is free."""
        voice_blocks = sum(len(v.table.blocks) for v in self.voices.values())
        return (not self.scheduler.running and not self.scheduler.waiting
                and self.blocks.num_used == voice_blocks and not self.slots.in_use)


def _now() -> float:
    return time.monotonic()


def run_to_completion(engine: Engine, max_steps: int = 1_000_000) -> dict[str, torch.Tensor]:
    """Step until no request is left; returns each finished request's concatenated audio."""
    audio: dict[str, list[torch.Tensor]] = {}
    for _ in range(max_steps):
        if not engine.requests:
            break
        for chunk in engine.step():
            audio.setdefault(chunk.request_id, []).append(chunk.samples)
    return {rid: torch.cat(parts) for rid, parts in audio.items()}

