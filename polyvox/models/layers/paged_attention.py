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
"""

from __future__ import annotations

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
        self.k_cache[layer].index_copy_(0, self.write_slots, k.reshape(-1, heads, dim))
        self.v_cache[layer].index_copy_(0, self.write_slots, v.reshape(-1, heads, dim))
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
