"""Fixed-shape runs of the AR step and the waveform decoder, for CUDA Graphs.

On a GPU the per-step work of a TTS engine is many small kernels; launching them costs
more than running them. A CUDA graph records a stage's kernels once, for fixed tensor
shapes and addresses, and replays them with one launch. So each stage runs at a few
fixed shapes:

- the batch is padded up to a bucket (`EngineConfig.batch_buckets`, 1, 2, 4, ... 256);
  padding rows write to a reserved KV slot / decoder slot that no request owns and read
  only that slot, so they never touch a request's state;
- the AR step's key width (how many cached keys a row reads) is padded up to a power of
  two with masked keys (position -1);
- inputs are copied into static buffers that keep their addresses across replays, and
  the graph's outputs are copied out before the next replay.

`capture=False` runs exactly the same padded, static-buffer code eagerly: that is the
"graph-shaped" mode the CPU tests check against the plain path. `capture=True` records a
CUDA graph per shape the first time the shape is used (warm-up and capture run on
padding rows only, so they change no request's state) and replays it afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from polyvox.engine.decoder_pool import DecoderSlotPool
from polyvox.engine.kv_cache import PagedKVCache
from polyvox.models.layers.paged_attention import PagedKV

MIN_WIDTH = 16  # the smallest key-width bucket


def bucket_size(count: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket that holds `count` rows."""
    for size in buckets:
        if size >= count:
            return size
    raise ValueError(f"a batch of {count} is larger than the largest bucket ({buckets[-1]})")


def width_bucket(width: int) -> int:
    """Key widths are padded up to a power of two (at least MIN_WIDTH)."""
    size = MIN_WIDTH
    while size < width:
        size *= 2
    return size


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the device's queued work."""
    return tensor.to(device, non_blocking=True)


class ShapedCall:
    """One stage at one fixed shape: static buffers and a function that reads them.

    `run()` returns the function's outputs. Eager: the function runs each time. Captured:
    the first run warms up and records a CUDA graph (the caller has filled the buffers
    with padding-only inputs for it), later runs replay it; outputs are the graph's static
    tensors, valid until the next replay."""

    def __init__(self, fn: Callable[[], Any], capture: bool, pool: Any = None) -> None:
        self.fn, self.capture, self.pool = fn, capture, pool
        self.graph: Any = None
        self.outputs: Any = None

    @property
    def needs_capture(self) -> bool:
        return self.capture and self.graph is None

    def record(self) -> None:
        """Warm up on a side stream, then capture (buffers must hold padding inputs)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.outputs = self.fn()
        self.graph = graph

    def run(self) -> Any:
        if not self.capture:
            return self.fn()
        self.graph.replay()
        return self.outputs


def _graph_pool(capture: bool) -> Any:
    return torch.cuda.graph_pool_handle() if capture else None


class StepGraphs:
    """The AR step (backbone token + sampler head + EOS head) at bucketed shapes."""

    def __init__(self, family: Any, cache: PagedKVCache, buckets: tuple[int, ...],
                 padding_slot: int, capture: bool, clause_tokens: int = 0) -> None:
        self.family, self.cache, self.buckets = family, cache, buckets
        self.padding_slot, self.capture = padding_slot, capture
        self.device = cache.k.device
        self.calls: dict[tuple[int, int, int, int],
                         tuple[ShapedCall, dict[str, torch.Tensor]]] = {}
        # A family that steps with its clauses' features (a pointer student) gets them in
        # buffers padded to one token width, that of the longest clause the engine plans
        # (`clause_tokens`): one shape more per (rows, width), not one per clause length.
        self.reads_clause = bool(family.traits.steps_read_clause)
        self.feature_width = family.traits.clause_feature_width if self.reads_clause else 0
        self.clause_tokens = width_bucket(max(clause_tokens, 1)) if self.reads_clause else 0
        self.pool = _graph_pool(capture)

    def _call(self, rows: int, width: int, sampler_steps: int, tokens: int = 0
              ) -> tuple[ShapedCall, dict[str, torch.Tensor]]:
        key = (rows, width, sampler_steps, tokens)
        if key not in self.calls:
            device, dim = self.device, self.family.latent_dim
            heads, head_dim = self.cache.k.shape[2:]

            def long(*shape: int) -> torch.Tensor:
                return torch.zeros(shape, dtype=torch.long, device=device)

            buffers = {
                "latents": torch.zeros(rows, dim, device=device),
                "positions": long(rows), "write_slots": long(rows),
                "read_slots": long(rows, width), "read_positions": long(rows, width),
                "noise": torch.zeros(rows, dim, device=device),
                "k_work": torch.empty(rows * width, heads, head_dim, dtype=self.cache.k.dtype,
                                      device=device),
                "v_work": torch.empty(rows * width, heads, head_dim, dtype=self.cache.k.dtype,
                                      device=device),
            }
            if self.reads_clause:
                buffers["features"] = torch.zeros(rows, tokens, self.feature_width,
                                                  device=device)
                buffers["counts"] = torch.ones(rows, dtype=torch.long, device=device)

            def step() -> tuple[torch.Tensor, torch.Tensor]:
                kv = PagedKV(self.cache.k, self.cache.v, write_slots=buffers["write_slots"],
                             read_slots=buffers["read_slots"],
                             read_positions=buffers["read_positions"],
                             workspace=(buffers["k_work"], buffers["v_work"]))
                if self.reads_clause:
                    return self.family.step_batch(
                        buffers["latents"], buffers["positions"], kv, buffers["noise"],
                        sampler_steps, clauses=(buffers["features"], buffers["counts"]))
                return self.family.step_batch(buffers["latents"], buffers["positions"], kv,
                                              buffers["noise"], sampler_steps)

            call = ShapedCall(step, self.capture, self.pool)
            if call.needs_capture:
                self._fill(buffers, torch.zeros(0, dim, device=device), [], [], [], [],
                           torch.zeros(0, dim))
                call.record()
            self.calls[key] = (call, buffers)
        return self.calls[key]

    def warm_up(self, max_width: int, sampler_steps: int = 1) -> None:
        """Build (with capture: record) every shape up to `max_width` keys per row, so that
        serving never stops to capture."""
        for rows in self.buckets:
            width = MIN_WIDTH
            while width <= width_bucket(max_width):
                self._call(rows, width, sampler_steps, self.clause_tokens)
                width *= 2

    def _fill(self, buffers: dict[str, torch.Tensor], latents: torch.Tensor,
              positions: list[int], write_slots: list[int], read_slots: list[list[int]],
              read_positions: list[list[int]], noise: torch.Tensor) -> None:
        """Real rows first, then padding rows: position 0, writing and reading only the
        padding slot (its one key at position 0, the rest masked)."""
        rows, width = buffers["read_slots"].shape
        count = len(positions)
        pad = rows - count
        padding = self.padding_slot
        slots = [s + [padding] * (width - len(s)) for s in read_slots]
        keys = [p + [-1] * (width - len(p)) for p in read_positions]
        slots += [[padding] * width] * pad
        keys += [[0] + [-1] * (width - 1)] * pad
        buffers["read_slots"].copy_(to_device(torch.tensor(slots, dtype=torch.long),
                                              self.device))
        buffers["read_positions"].copy_(to_device(torch.tensor(keys, dtype=torch.long),
                                                  self.device))
        buffers["positions"].copy_(to_device(torch.tensor(positions + [0] * pad), self.device))
        buffers["write_slots"].copy_(
            to_device(torch.tensor(write_slots + [self.padding_slot] * pad), self.device))
        buffers["latents"][:count].copy_(latents)
        buffers["latents"][count:].zero_()
        buffers["noise"][:count].copy_(to_device(noise, self.device))
        buffers["noise"][count:].zero_()

    @staticmethod
    def _fill_clauses(buffers: dict[str, torch.Tensor],
                      clauses: tuple[torch.Tensor, torch.Tensor], device: torch.device) -> None:
        """Real rows' clause features first; padding rows read one zero token."""
        features, counts = clauses
        count, tokens = features.shape[:2]
        buffers["features"].zero_()
        buffers["features"][:count, :tokens].copy_(to_device(features, device))
        buffers["counts"].fill_(1)
        buffers["counts"][:count].copy_(to_device(counts, device))

    def __call__(self, latents: torch.Tensor, positions: list[int], write_slots: list[int],
                 read_slots: list[list[int]], read_positions: list[list[int]],
                 noise: torch.Tensor, sampler_steps: int,
                 clauses: tuple[torch.Tensor, torch.Tensor] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """latents [B, D] (on the device; NaN rows: first step), noise [B, D] (host), and
        for a family that reads its clauses their features and counts (host) -> (next
        latents [B, D], EOS logits [B]), both on the device, owned by the caller."""
        count = len(positions)
        rows = bucket_size(count, self.buckets)
        width = width_bucket(max(len(r) for r in read_slots))
        tokens = 0
        if self.reads_clause:
            assert clauses is not None, "this family steps with its clauses' features"
            # NOTE: a clause longer than the planned cap gets a shape of its own
            tokens = max(self.clause_tokens, width_bucket(clauses[0].shape[1]))
        call, buffers = self._call(rows, width, sampler_steps, tokens)
        self._fill(buffers, latents, positions, write_slots, read_slots, read_positions, noise)
        if self.reads_clause:
            assert clauses is not None
            self._fill_clauses(buffers, clauses, self.device)
        out, eos = call.run()
        return out[:count].clone(), eos[:count].clone()


class DecodeGraphs:
    """The waveform decoder at bucketed batch sizes: gather the rows' states from their
    slots, decode, scatter the states back — all inside one fixed-shape call."""

    def __init__(self, family: Any, slots: DecoderSlotPool, buckets: tuple[int, ...],
                 padding_slot: int, capture: bool) -> None:
        self.family, self.slots, self.buckets = family, slots, buckets
        self.padding_slot, self.capture = padding_slot, capture
        self.device = next(iter(slots.tensors.values())).device
        self.calls: dict[tuple[int, int, int, int], tuple[ShapedCall, dict[str, torch.Tensor]]] = {}
        self.pool = _graph_pool(capture)

    @property
    def largest(self) -> int:
        return self.buckets[-1]

    def _call(self, rows: int, frames: int, lookahead: int, history: int
              ) -> tuple[ShapedCall, dict[str, torch.Tensor]]:
        key = (rows, frames, lookahead, history)
        if key not in self.calls:
            window = frames + lookahead
            buffers = {
                "latents": torch.zeros(rows, window, self.family.latent_dim, device=self.device),
                "slots": torch.full((rows,), self.padding_slot, dtype=torch.long,
                                    device=self.device),
            }

            def decode() -> torch.Tensor:
                state = self.slots.gather(buffers["slots"])
                if history or lookahead:
                    pcm = self.family.decode(buffers["latents"], state, num_frames=frames,
                                             history=history)
                else:
                    pcm = self.family.decode(buffers["latents"], state)
                self.slots.scatter(buffers["slots"], state)
                return pcm

            call = ShapedCall(decode, self.capture, self.pool)
            if call.needs_capture:
                call.record()  # the buffers hold padding rows only
            self.calls[key] = (call, buffers)
        return self.calls[key]

    def warm_up(self, chunk_frames: list[int]) -> None:
        """Build (with capture: record) every batch bucket for chunks of these sizes (no
        lookahead or history: the Pocket decoder's shapes)."""
        for rows in self.buckets:
            for frames in chunk_frames:
                self._call(rows, frames, 0, 0)

    def __call__(self, latents: torch.Tensor, slot_ids: list[int], frames: int,
                 lookahead: int, history: int) -> torch.Tensor:
        """latents [B, frames + lookahead, D] of B requests in slots `slot_ids` -> their
        new PCM [B, frames * samples_per_frame] (on the device, owned by the caller)."""
        count = len(slot_ids)
        rows = bucket_size(count, self.buckets)
        call, buffers = self._call(rows, frames, lookahead, history)
        pad = rows - count
        buffers["slots"].copy_(to_device(
            torch.tensor(slot_ids + [self.padding_slot] * pad, dtype=torch.long), self.device))
        buffers["latents"][:count].copy_(latents)
        buffers["latents"][count:].zero_()
        return call.run()[:count].clone()
