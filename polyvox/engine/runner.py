"""The runner turns scheduled work into batch tensors and calls the family's stages.

It owns the device-side state: the paged KV tensors and the decoder slot pool. It never
decides what runs; the planner does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from polyvox.engine.decoder_pool import DecoderSlotPool
from polyvox.engine.graphs import DecodeGraphs, StepGraphs, to_device
from polyvox.engine.kv_cache import PagedKVCache
from polyvox.models.base import ModelFamily
from polyvox.models.layers.cpu_kernels import paged_decode_attention
from polyvox.models.layers.paged_attention import (
    PagedKV,
    PoolDecodeKV,
    packed_segments,
    pad_rows,
)
from polyvox.request import Clause, Request


class PrefillItem(NamedTuple):
    request: Request
    tokens: torch.Tensor  # [T] the clause's token ids
    positions: list[int]  # absolute position of each token
    slots: list[int]  # flat KV slot of each token
    text: str | None = None  # the clause itself (non-autoregressive families)
    features: torch.Tensor | None = None  # [T, F] per-token inputs (ClausePlan.features)


class StepItem(NamedTuple):
    request: Request
    position: int
    slot: int


class DecodeItem(NamedTuple):
    request: Request
    num_frames: int  # new frames to decode
    lookahead: int = 0  # pending frames after them that the decoder may look at
    history: int = 0  # frames before them the decoder's slot still holds (windowed decoders)

    @property
    def window_frames(self) -> int:
        """Frames the decoder reads for this chunk: history, new frames, lookahead."""
        return self.history + self.num_frames + self.lookahead


class HostCopy:
    """A device tensor on its way to host memory: the copy starts now (after the work
    queued so far), `wait()` returns it. On the CPU it is the tensor itself."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.event: Any = None
        if tensor.device.type == "cuda":
            self.host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            self.host.copy_(tensor, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = tensor

    def wait(self) -> torch.Tensor:
        if self.event is not None:
            self.event.synchronize()
        return self.host


class HostRow(NamedTuple):
    """Row `row` of a HostCopy: one request's share of a batched result."""

    copy: HostCopy
    row: int

    def wait(self) -> torch.Tensor:
        return self.copy.wait()[self.row]


class ClauseStart(NamedTuple):
    """A non-autoregressive clause after prefill: its first latents [T, D], and what
    computes the rest when it came in pieces (None: the clause is complete)."""

    latents: torch.Tensor
    rest: Any
    # Where the family knows them (Piper's durations): each word of the clause's text as
    # frames [start, end) from the clause's first frame; see AudioChunk.word_frames.
    word_frames: tuple[tuple[int, int], ...] | None = None


class StepResult(NamedTuple):
    latents: torch.Tensor  # [B, D] on the device: the next step's input
    eos: HostCopy | None  # [B] EOS logits on their way to the host (None: no rows)
    rng_states: list[torch.Tensor]  # generator states before the step (when saved)


class Runner:
    def __init__(self, family: ModelFamily, cache: PagedKVCache, slots: DecoderSlotPool,
                 step_graphs: StepGraphs | None = None,
                 decode_graphs: DecodeGraphs | None = None) -> None:
        self.family, self.cache, self.slots = family, cache, slots
        self.step_graphs, self.decode_graphs = step_graphs, decode_graphs
        self.device = cache.k.device
        self._workspace: tuple[torch.Tensor, torch.Tensor] | None = None
        self.decode_calls = 0  # decoder calls made by the last `decode`
        # the last step's clauses and their padded features (_clauses)
        self._clause_batch: tuple[tuple[Clause | None, ...],
                                  tuple[torch.Tensor, torch.Tensor]] | None = None
        # NOTE: built (or loaded from torch's extension cache) here, at load time, not in
        # a request's first step; None keeps the gather + SDPA path.
        self.decode_kernel = (paged_decode_attention() if family.traits.is_autoregressive
                              and PoolDecodeKV.supports(cache.k) else None)

    def _gather_buffers(self, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Gather buffers for [rows, width] keys, grown (never shrunk) and reused."""
        needed = rows * width
        if self._workspace is None or self._workspace[0].shape[0] < needed:
            shape = (max(needed, 2 * (self._workspace[0].shape[0] if self._workspace else 0)),
                     *self.cache.k.shape[2:])
            self._workspace = (torch.empty(shape, dtype=self.cache.k.dtype, device=self.device),
                               torch.empty(shape, dtype=self.cache.k.dtype, device=self.device))
        return self._workspace[0][:needed], self._workspace[1][:needed]

    def _long(self, values: list[int]) -> torch.Tensor:
        return to_device(torch.tensor(values, dtype=torch.long), self.device)

    def _reads(self, requests: list[Request]) -> tuple[list[list[int]], list[list[int]]]:
        slots, positions = [], []
        for request in requests:
            s, p = request.table.slots_and_positions(self.cache.block_size)
            slots.append(s)
            positions.append(p)
        return slots, positions

    @torch.no_grad()
    def prefill(self, items: list[PrefillItem],
                first_piece: int | None = None) -> list[ClauseStart]:
        """Autoregressive families: all clauses packed in one ragged row, [1, sum(T)]
        tokens, no padding; returns nothing. Other families: each clause's latents [T, D];
        with `first_piece`, a family that can (`start_clauses`) gives a request's first
        clause as its first `first_piece` frames and the means to compute the rest."""
        if not items:
            return []
        if not self.family.traits.is_autoregressive:
            return self._clause_latents(items, first_piece)
        self._prefill_tokens(items)
        return []

    def _clause_latents(self, items: list[PrefillItem],
                        first_piece: int | None) -> list[ClauseStart]:
        if self.family.traits.starts_clauses_in_pieces and first_piece:
            # NOTE: only a request's first clause comes in pieces: that is what makes its
            # first audio sooner; later clauses would only pay the pieces' overlap.
            texts = [self._clause_text(item) for item in items]
            partials = self.family.start_clauses(texts, [item.request.params for item in items],
                             [item.request.generator for item in items])
            starts = []
            for item, partial in zip(items, partials):
                first = item.request.progress.generated == 0
                latents = partial.next(first_piece if first else None)
                starts.append(ClauseStart(latents, None if partial.done else partial,
                                          partial.word_frames))
            return starts
        return [ClauseStart(latents, None) for latents in self._whole_clauses(items)]

    def _whole_clauses(self, items: list[PrefillItem]) -> list[torch.Tensor]:
        # One front call for every clause of the step.
        return self.family.clause_latents_batch([self._clause_text(item) for item in items],
                                                [item.request.params for item in items],
                                                [item.request.generator for item in items])

    def continue_clauses(self, requests: list[Request]) -> list[torch.Tensor]:
        """The rest of each request's clause that started in pieces, [n, D] each."""
        return [request.partial.next(None) for request in requests]

    def _prefill_tokens(self, items: list[PrefillItem]) -> None:
        read_slots, read_positions = self._reads([item.request for item in items])
        num_keys = sum(len(row) for row in read_slots)
        kv = PagedKV(
            self.cache.k, self.cache.v,
            write_slots=self._long([s for item in items for s in item.slots]),
            read_slots=self._long([s for row in read_slots for s in row])[None],
            read_positions=self._long([p for row in read_positions for p in row])[None],
            segments=packed_segments([len(item.slots) for item in items],
                                     [len(row) for row in read_slots]),
            workspace=self._gather_buffers(1, num_keys),
        )
        tokens = to_device(torch.cat([item.tokens for item in items]), self.device)
        positions = self._long([p for item in items for p in item.positions])[None]
        features = None  # a family plans every clause with features or none
        if items[0].features is not None:
            features = to_device(torch.cat([item.features for item in items]), self.device)
        self.family.prefill_tokens(tokens, positions, kv, features=features)

    @staticmethod
    def _clause_text(item: PrefillItem) -> str:
        assert item.text is not None
        return item.text

    @torch.no_grad()
    def launch_step(self, items: list[StepItem], save_rng: bool = False) -> StepResult:
        """One AR step for every item, queued on the device; nothing is read back. With
        `save_rng`, each request's generator state before its noise draw is kept (the
        overlapped loop restores it when the step turns out to be past its clause's end)."""
        states = [item.request.generator.get_state() for item in items] if save_rng else []
        groups: dict[int, list[int]] = defaultdict(list)
        for index, item in enumerate(items):
            groups[item.request.params.sampler_steps].append(index)
        if len(groups) <= 1:  # the usual case: one batch, its outputs as they are
            latents_out, eos_out = (self._step_group(items, next(iter(groups))) if items else
                                    (torch.empty(0, self.family.latent_dim, device=self.device),
                                     torch.empty(0, device=self.device)))
        else:
            latents_out = torch.empty(len(items), self.family.latent_dim, device=self.device)
            eos_out = torch.empty(len(items), device=self.device)
            for sampler_steps, indices in groups.items():
                out, eos = self._step_group([items[i] for i in indices], sampler_steps)
                where = self._long(indices)
                latents_out[where], eos_out[where] = out, eos
        return StepResult(latents_out, HostCopy(eos_out) if items else None, states)

    def _step_group(self, batch: list[StepItem],
                    sampler_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        requests = [item.request for item in batch]
        read_slots, read_positions = self._reads(requests)
        nan = torch.full((self.family.latent_dim,), float("nan"), device=self.device)
        latents = torch.stack([r.last_latent if r.last_latent is not None else nan
                               for r in requests])
        noise = torch.stack([self.family.sample_noise(r.generator, r.params) for r in requests])
        clauses = self._clauses(requests) if self.family.traits.steps_read_clause else None
        if self.step_graphs is not None:
            return self.step_graphs(latents, [item.position for item in batch],
                                    [item.slot for item in batch], read_slots, read_positions,
                                    noise, sampler_steps, clauses)
        write_slots = self._long([item.slot for item in batch])
        if self.decode_kernel is not None:  # CPU: attention reads the pool in place
            kv: PagedKV | PoolDecodeKV = PoolDecodeKV(
                self.cache.k, self.cache.v, write_slots, read_slots, read_positions,
                [item.position for item in batch], self.decode_kernel)
        else:
            padded = to_device(pad_rows(read_slots, fill=batch[0].slot), self.device)
            kv = PagedKV(
                self.cache.k, self.cache.v,
                write_slots=write_slots,
                read_slots=padded,
                read_positions=to_device(pad_rows(read_positions, fill=-1), self.device),
                workspace=self._gather_buffers(*padded.shape),
            )
        positions = self._long([item.position for item in batch])
        if clauses is not None:
            return self.family.step_batch(latents, positions, kv, to_device(noise, self.device),
                                          sampler_steps, clauses=clauses)
        return self.family.step_batch(latents, positions, kv, to_device(noise, self.device),
                                      sampler_steps)

    def _clauses(self, requests: list[Request]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's clause features, padded, on the device: ([B, N, F], counts [B]).
        Padded and copied once per batch of clauses: the rows of a step change clause far
        less often than they step (the same clauses in the same order reuse the last)."""
        clauses = tuple(request.clause for request in requests)
        if self._clause_batch is not None and len(self._clause_batch[0]) == len(clauses) \
                and all(a is b for a, b in zip(self._clause_batch[0], clauses)):
            return self._clause_batch[1]
        features = []
        for clause in clauses:
            assert clause is not None and clause.features is not None, \
                "this family steps with its clause's features: plan_clause gives them"
            features.append(clause.features)
        counts = torch.tensor([len(f) for f in features])
        padded = (to_device(torch.nn.utils.rnn.pad_sequence(features, batch_first=True),
                            self.device), to_device(counts, self.device))
        self._clause_batch = (clauses, padded)
        return padded

    @torch.no_grad()
    def decode(self, items: list[DecodeItem],
               on_batch: Callable[[list[int], list[HostRow]], None] | None = None
               ) -> list[HostRow]:
        """Decode each item's next `num_frames` pending latents; one batch per chunk shape,
        in the order the shapes first appear in `items`. Returns each item's new PCM
        [num_frames * samples_per_frame], on its way to host memory, in order. `on_batch`
        is given each decoder call's item indices and PCM as soon as the call is done."""
        results: list[HostRow | None] = [None] * len(items)
        self.decode_calls = 0
        # NOTE: rows whose latents a clause stage made something else (decode_options, e.g.
        # z resampled) are decoded apart from the others.
        groups: dict[tuple[int, int, int, tuple[tuple[str, bool], ...]], list[int]] = \
            defaultdict(list)
        for index, item in enumerate(items):
            options = tuple(sorted(item.request.decode_options.items()))
            groups[(item.num_frames, item.lookahead, item.history, options)].append(index)
        budget = self.family.traits.decoder_batch_frames
        for (frames, lookahead, history, options), group in groups.items():
            # NOTE: a family may cap the frames of one decoder call: on CPU a convolution
            # stack slows down sharply once a batch's activations leave the cache.
            size = max(1, budget // items[group[0]].window_frames) if budget else len(group)
            if self.decode_graphs is not None:
                size = min(size, self.decode_graphs.largest)
            for start in range(0, len(group), size):
                batch = group[start: start + size]
                self._decode_batch(items, batch, frames, lookahead, history, dict(options),
                                   results)
                self.decode_calls += 1
                if on_batch is not None:
                    on_batch(batch, [row for i in batch if (row := results[i]) is not None])
        return [r for r in results if r is not None]

    def _decode_batch(self, items: list[DecodeItem], indices: list[int], frames: int,
                      lookahead: int, history: int, options: dict[str, bool],
                      results: list[HostRow | None]) -> None:
        """One decoder call: equal-shape chunks, states gathered from and scattered back to
        their slots; puts each item's PCM into `results`. Rows with decode `options` run
        eagerly (no fixed-shape graph is built for them)."""
        requests = [items[i].request for i in indices]
        assert len({r.request_id for r in requests}) == len(requests), "one chunk per request"
        window = frames + lookahead
        latents = torch.stack([torch.stack(r.pending_latents[:window]) for r in requests])
        latents = to_device(latents, self.device)
        slots = [r.decoder_slot for r in requests]
        if self.decode_graphs is not None and not options:
            pcm = self.decode_graphs(latents, slots, frames, lookahead, history)
        else:
            slot_ids = self._long(slots)
            state = self.slots.gather(slot_ids)
            if history or lookahead or options:
                pcm = self.family.decode(latents, state, num_frames=frames, history=history,
                                         **options)
            else:
                pcm = self.family.decode(latents, state)  # [b, frames * samples_per_frame]
            self.slots.scatter(slot_ids, state)
        copy = HostCopy(pcm)
        for row, i in enumerate(indices):
            results[i] = HostRow(copy, row)

    # --- swapping (preemption) -------------------------------------------------------------

    def swap_out(self, blocks: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = self._block_slots(blocks)
        return self.cache.k[:, index].clone(), self.cache.v[:, index].clone()

    def swap_in(self, blocks: list[int], saved: tuple[torch.Tensor, torch.Tensor]) -> None:
        index = self._block_slots(blocks)
        self.cache.k[:, index] = saved[0]
        self.cache.v[:, index] = saved[1]

    def _block_slots(self, blocks: list[int]) -> torch.Tensor:
        size = self.cache.block_size
        return self._long([b * size + o for b in blocks for o in range(size)])
