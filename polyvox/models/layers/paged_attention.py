"""Paged attention, plain-torch reference: keys and values live in a flat pool of slots
(see polyvox.engine.kv_cache) and each call says where to write and what to read.

Two shapes of call:

- decode: B requests, one new token each. x [B, 1, d]; each row reads its own slots,
  padded to the longest row with position -1.
- packed prefill: R requests' new tokens concatenated in one row, x [1, N, d], no padding;
  keys of all R requests are read side by side and each query sees only its own request's
  keys: `segments` (each request attended on its own; what the engine uses) or the
  reference `allowed` mask over the whole row (the same result, with every product across
  requests computed and masked).

On CPU, decode rows can skip the gather: `PoolDecodeKV` attends straight over the pool
with a compiled kernel (polyvox/models/layers/cpu_kernels.py) that reads each key and
value once; it is checked against the gather + `attend` path here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from polyvox.models.layers.attention import Segment


class PagedKV:
    """A KVStore over a PagedKVCache for one engine call.

    write_slots [N]: flat slot of each new token (row-major over the call's [B, T]).
    read_slots [B, S]: flat slots each row reads (padding: any valid slot), and
    read_positions [B, S] their absolute positions (-1 = padding).
    """

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, write_slots: torch.Tensor,
                 read_slots: torch.Tensor, read_positions: torch.Tensor,
                 allowed: torch.Tensor | None = None,
                 workspace: tuple[torch.Tensor, torch.Tensor] | None = None,
                 segments: list[Segment] | None = None) -> None:
        self.k_cache, self.v_cache = k_cache, v_cache  # [L, slots, Hkv, D]
        self.write_slots, self.read_slots = write_slots, read_slots
        self.read_positions, self.allowed = read_positions, allowed
        self.segments = segments
        # Reused gather buffers [B * S, Hkv, D]: a fresh multi-MB tensor per layer costs
        # page faults that dwarf the copy itself. Safe because a layer's keys are dead
        # once its attention has run.
        self.workspace = workspace

    def write_and_read(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        heads, dim = k.shape[-2:]
        _write(self.k_cache[layer], self.v_cache[layer], self.write_slots, k, v)
        # NOTE: index_select on the flat slots is several times faster on CPU than
        # advanced indexing with the 2-D index.
        flat = self.read_slots.reshape(-1)
        shape = (*self.read_slots.shape, heads, dim)
        if self.workspace is None:
            keys = self.k_cache[layer].index_select(0, flat)
            values = self.v_cache[layer].index_select(0, flat)
        else:
            keys = torch.index_select(self.k_cache[layer], 0, flat, out=self.workspace[0])
            values = torch.index_select(self.v_cache[layer], 0, flat, out=self.workspace[1])
        return keys.view(shape), values.view(shape), self.read_positions  # [B, S, Hkv, D]


def _write(k_layer: torch.Tensor, v_layer: torch.Tensor, slots: torch.Tensor,
           k: torch.Tensor, v: torch.Tensor) -> None:
    """Store new keys and values [..., Hkv, D] at their flat `slots` of one layer."""
    heads, dim = k.shape[-2:]
    k_layer.index_copy_(0, slots, k.reshape(-1, heads, dim))
    v_layer.index_copy_(0, slots, v.reshape(-1, heads, dim))


class PoolDecodeKV:
    """Decode rows (one new token each) attended in place in the pool by `kernel`
    (`cpu_kernels.paged_decode_attention()`): no gather. Each row sees its request's keys
    at positions <= its own (within `context` if set), as `attend` would. Transformer
    layers call `write_and_attend` on stores that have it instead of `write_and_read`."""

    allowed = None
    segments = None

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, write_slots: torch.Tensor,
                 read_slots: list[list[int]], read_positions: list[list[int]],
                 positions: list[int], kernel: Callable[..., torch.Tensor]) -> None:
        self.k_cache, self.v_cache, self.write_slots = k_cache, v_cache, write_slots
        self.rows = (read_slots, read_positions, positions)
        self.kernel = kernel
        self._visible: tuple[int | None, torch.Tensor, torch.Tensor] | None = None

    @staticmethod
    def supports(k_cache: torch.Tensor) -> bool:
        return k_cache.device.type == "cpu" and k_cache.dtype == torch.float32

    def write_and_attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         context: int | None) -> torch.Tensor:
        """q [B, 1, H, D], the new k, v [B, 1, Hkv, D] -> attention output [B, 1, H, D]."""
        batch, _, heads, dim = q.shape
        k_layer, v_layer = self.k_cache[layer], self.v_cache[layer]
        _write(k_layer, v_layer, self.write_slots, k, v)
        slots, offsets = self._visible_slots(context)
        out = self.kernel(q.reshape(batch, heads, dim).to(k_layer.dtype).contiguous(),
                          k_layer, v_layer, slots, offsets, 1 / math.sqrt(dim))
        return out.view(batch, 1, heads, dim).to(q.dtype)

    def _visible_slots(self, context: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's visible slots, flat, and where each row's run starts ([B + 1])."""
        if self._visible is None or self._visible[0] != context:
            read_slots, read_positions, positions = self.rows
            lengths = torch.tensor([len(row) for row in read_slots])
            slots = torch.tensor([s for row in read_slots for s in row], dtype=torch.long)
            keys = torch.tensor([p for row in read_positions for p in row], dtype=torch.long)
            query = torch.tensor(positions, dtype=torch.long).repeat_interleave(lengths)
            visible = (keys >= 0) & (keys <= query)
            if context is not None:
                visible &= keys > query - context
            owner = torch.arange(len(read_slots)).repeat_interleave(lengths)
            counts = torch.bincount(owner[visible], minlength=len(read_slots))
            offsets = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
            self._visible = (context, slots[visible], offsets)
        return self._visible[1], self._visible[2]


def pad_rows(rows: list[list[int]], fill: int) -> torch.Tensor:
    """Ragged int lists -> [len(rows), longest] tensor padded with `fill`."""
    width = max((len(r) for r in rows), default=0)
    return torch.tensor([r + [fill] * (width - len(r)) for r in rows], dtype=torch.long)


def packed_allowed(query_lengths: list[int], key_lengths: list[int]) -> torch.Tensor:
    """[1, sum(query_lengths), sum(key_lengths)]: query i may see key j iff both belong to
    the same packed request."""
    query_owner = torch.repeat_interleave(torch.arange(len(query_lengths)),
                                          torch.tensor(query_lengths))
    key_owner = torch.repeat_interleave(torch.arange(len(key_lengths)), torch.tensor(key_lengths))
    return (query_owner[:, None] == key_owner[None, :])[None]


def packed_segments(query_lengths: list[int], key_lengths: list[int]) -> list[Segment]:
    """(q0, q1, k0, k1) per packed request: its queries and keys in the packed row."""
    segments, query, key = [], 0, 0
    for queries, keys in zip(query_lengths, key_lengths, strict=True):
        segments.append((query, query + queries, key, key + keys))
        query, key = query + queries, key + keys
    return segments
