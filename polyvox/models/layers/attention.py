"""Plain-torch attention pieces shared by the families: RoPE, masked attention, KV stores.

These are the reference implementations: every fast path (paged kernels, CUDA graphs) is
tested against them.

A KV store decides where a layer's keys and values live. The transformer layer hands it
the new keys/values with their absolute positions and gets back everything the queries may
look at, with a position per key (-1 marks an empty slot, masked out).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F


def rope_frequencies(head_dim: int, max_period: float, device: torch.device) -> torch.Tensor:
    """[head_dim // 2] angular frequencies, float32."""
    index = torch.arange(head_dim // 2, device=device, dtype=torch.float32)
    return torch.exp(index * (-math.log(max_period) * 2 / head_dim))


def rope_table(positions: torch.Tensor, head_dim: int,
               max_period: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles for positions [B, T]: [B, T, 1, head_dim / 2] each.
    Computed once per forward and shared by every layer."""
    freqs = rope_frequencies(head_dim, max_period, positions.device)
    angles = positions.to(torch.float32)[:, :, None, None] * freqs
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x: torch.Tensor, table: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate interleaved (even, odd) channel pairs of x [B, T, H, D] by a rope_table."""
    cos, sin = table
    batch, steps, heads, head_dim = x.shape
    pairs = x.view(batch, steps, heads, head_dim // 2, 2).float()
    real, imag = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([real * cos - imag * sin, real * sin + imag * cos], dim=-1)
    return rotated.to(x.dtype).view(batch, steps, heads, head_dim)


Segment = tuple[int, int, int, int]  # queries [q0, q1) and the keys [k0, k1) they may see


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    context: int | None = None,
    allowed: torch.Tensor | None = None,
    segments: list[Segment] | None = None,
) -> torch.Tensor:
    """Causal attention by absolute position.

    q [B, T, H, D]; k, v [B, S, Hkv, D] with H a multiple of Hkv (grouped-query);
    q_positions [B, T]; k_positions [B, S] (-1 = empty). A query sees keys at positions
    <= its own, and with `context` only the last `context` of them; `allowed` [B, T, S]
    further restricts which keys each query may see (packed sequences). `segments` says
    the same for a packed row more cheaply: queries [q0, q1) see only keys [k0, k1), so
    each segment is attended on its own and no product across segments is computed.
    Returns [B, T, H, D].
    """
    if segments is not None:
        return torch.cat([
            attend(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], q_positions[:, q0:q1],
                   k_positions[:, k0:k1], context, None if allowed is None
                   else allowed[:, q0:q1, k0:k1])
            for q0, q1, k0, k1 in segments], dim=1)
    delta = q_positions[:, :, None] - k_positions[:, None, :]  # [B, T, S]
    mask = (k_positions[:, None, :] >= 0) & (delta >= 0)
    if context is not None:
        mask = mask & (delta < context)
    if allowed is not None:
        mask = mask & allowed
    group = q.shape[2] // k.shape[2]
    if group > 1:
        k = k.repeat_interleave(group, dim=2)
        v = v.repeat_interleave(group, dim=2)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask[:, None]
    )
    return out.transpose(1, 2)


class KVStore(Protocol):
    """Where a transformer's keys and values live between calls."""

    #: [B, T, S] which keys each query may see beyond causality (packed batches), or None.
    allowed: torch.Tensor | None
    #: packed rows: each segment's queries see only its keys (see `attend`), or None.
    segments: list[Segment] | None

    def write_and_read(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Store k, v [B, T, Hkv, D] at positions [B, T]; return (keys, values, key_positions)
        covering everything the new queries may attend to."""
        ...


class NoCache:
    """Stateless: queries attend within the call only (offline encoding, training)."""

    allowed: torch.Tensor | None = None
    segments: list[Segment] | None = None

    def write_and_read(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return k, v, positions


class ContiguousKV:
    """One request's keys and values in growing contiguous tensors.

    Layout: k, v [L, 1, capacity, Hkv, D]; `length` entries are valid. Positions are
    start..start+length-1 (a fresh context: from 0; `drop_before` moves the start on, as
    the engine drops old context). Capacity doubles when full.
    """

    allowed: torch.Tensor | None = None
    segments: list[Segment] | None = None

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device, capacity: int = 64) -> None:
        shape = (num_layers, 1, capacity, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0
        self.start = 0  # the position of entry 0
        self._pending = 0  # entries written by layers of the current call, not yet committed

    @classmethod
    def from_prefix(cls, k: torch.Tensor, v: torch.Tensor) -> ContiguousKV:
        """A store holding a precomputed prefix k, v [L, P, Hkv, D] (e.g. a voice)."""
        num_layers, length, kv_heads, head_dim = k.shape
        store = cls(num_layers, kv_heads, head_dim, k.dtype, k.device, max(64, 2 * length))
        store.k[:, 0, :length] = k
        store.v[:, 0, :length] = v
        store.length = length
        return store

    def next_positions(self, steps: int) -> torch.Tensor:
        """[1, steps] positions the next `steps` tokens take."""
        first = self.start + self.length
        return torch.arange(first, first + steps, device=self.k.device)[None]

    def drop_before(self, position: int) -> None:
        """Forget the entries before `position`; the others keep their positions."""
        drop = min(max(0, position - self.start), self.length)
        if drop:
            for name in ("k", "v"):
                tensor = getattr(self, name)
                tensor[:, :, : self.length - drop] = tensor[:, :, drop: self.length].clone()
            self.length -= drop
            self.start += drop

    def write_and_read(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        steps = k.shape[1]
        end = self.length + steps
        if end > self.k.shape[2]:
            self._grow(end)
        self.k[layer, :, self.length:end] = k
        self.v[layer, :, self.length:end] = v
        self._pending = steps
        key_positions = torch.arange(self.start, self.start + end, device=k.device)[None]
        return self.k[layer, :, :end], self.v[layer, :, :end], key_positions

    def commit(self) -> None:
        """Called once all layers have written the current call's tokens."""
        self.length += self._pending
        self._pending = 0

    def prefix(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The valid keys and values, [L, length, Hkv, D] each."""
        return self.k[:, 0, : self.length].clone(), self.v[:, 0, : self.length].clone()

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * self.k.shape[2])
        for name in ("k", "v"):
            old = getattr(self, name)
            new = old.new_zeros(old.shape[:2] + (capacity,) + old.shape[3:])
            new[:, :, : old.shape[2]] = old
            setattr(self, name, new)


class WindowKV:
    """Keys and values of a sliding attention window, in tensors of fixed shape per request.

    Used for the Mimi decoder's streaming transformer: its attention only looks `context`
    steps back, so a request's state never grows. The state lives in a dict (the
    request's decoder state) under `prefix`: k, v [B, W, H, D], pos [B, W] (-1 = empty).
    They are a ring: the key of absolute position p lives at index p % W, written in place,
    so a call moves only its new keys (no copy of the window). A call may add at most
    W - context + 1 steps: then every key its queries may see is still in the ring. Keys
    in ring order are not in position order; attention masks by position, so that does
    not matter.
    """

    allowed: torch.Tensor | None = None
    segments: list[Segment] | None = None

    def __init__(self, state: dict[str, torch.Tensor], prefix: str) -> None:
        self.state = state
        self.prefix = prefix

    def write_and_read(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        name = f"{self.prefix}{layer}"
        ring_k, ring_v = self.state[f"{name}.k"], self.state[f"{name}.v"]
        ring_pos = self.state[f"{name}.pos"]
        batch, steps = positions.shape
        index = positions % ring_k.shape[1]  # [B, T]
        rows = torch.arange(batch, device=positions.device)[:, None].expand(batch, steps)
        ring_k[rows, index] = k.to(ring_k.dtype)
        ring_v[rows, index] = v.to(ring_v.dtype)
        ring_pos[rows, index] = positions
        return ring_k, ring_v, ring_pos
