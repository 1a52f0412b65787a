"""Pre-LayerNorm transformer with RoPE and grouped-query attention.

Parameter names follow pocket-tts' checkpoint layout (`self_attn.in_proj`, `norm1`,
`linear1`, `layer_scale_1.scale`, ...) so its weights load without renaming.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from polyvox.models.layers.attention import KVStore, apply_rope, attend, rope_table

RopeTable = tuple[torch.Tensor, torch.Tensor]


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, kv_heads: int, head_dim: int,
                 max_period: float, context: int | None) -> None:
        super().__init__()
        self.num_heads, self.kv_heads, self.head_dim = num_heads, kv_heads, head_dim
        self.max_period, self.context = max_period, context
        query_dim = num_heads * head_dim
        # NOTE: one fused projection: [q (H*D) | k (Hkv*D) | v (Hkv*D)].
        self.in_proj = nn.Linear(d_model, query_dim + 2 * kv_heads * head_dim, bias=False)
        self.out_proj = nn.Linear(query_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, kv: KVStore,
                layer: int, rope: RopeTable) -> torch.Tensor:
        batch, steps, _ = x.shape  # [B, T, d_model]
        q, k, v = self._project(x, rope)
        in_place = getattr(kv, "write_and_attend", None)  # stores that attend without a gather
        if in_place is not None:
            out = in_place(layer, q, k, v, self.context)
        else:
            keys, values, key_positions = kv.write_and_read(layer, k, v, positions)
            out = attend(q, keys, values, positions, key_positions, self.context, kv.allowed,
                         kv.segments)
        return self.out_proj(out.reshape(batch, steps, self.num_heads * self.head_dim))

    def write_kv(self, x: torch.Tensor, positions: torch.Tensor, kv: KVStore,
                 layer: int, rope: RopeTable) -> None:
        """Only store this layer's keys and values for x (no attention, no output)."""
        _, k, v = self._project(x, rope)
        kv.write_and_read(layer, k, v, positions)

    def _project(self, x: torch.Tensor, rope: RopeTable
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, steps, _ = x.shape
        projected = self.in_proj(x)
        query_dim = self.num_heads * self.head_dim
        q = projected[..., :query_dim].view(batch, steps, self.num_heads, self.head_dim)
        kv_new = projected[..., query_dim:].view(batch, steps, 2, self.kv_heads, self.head_dim)
        k, v = kv_new.unbind(dim=2)
        return apply_rope(q, rope), apply_rope(k, rope), v


class LayerScale(nn.Module):
    def __init__(self, channels: int, init: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((channels,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class TransformerLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, kv_heads: int, head_dim: int,
                 ffn_dim: int, max_period: float, context: int | None,
                 layer_scale: float | None) -> None:
        super().__init__()
        self.self_attn = SelfAttention(d_model, num_heads, kv_heads, head_dim, max_period, context)
        self.norm1 = nn.LayerNorm(d_model, eps=1e-5)
        self.norm2 = nn.LayerNorm(d_model, eps=1e-5)
        self.linear1 = nn.Linear(d_model, ffn_dim, bias=False)
        self.linear2 = nn.Linear(ffn_dim, d_model, bias=False)
        self.layer_scale_1: nn.Module = nn.Identity()
        self.layer_scale_2: nn.Module = nn.Identity()
        if layer_scale is not None:
            self.layer_scale_1 = LayerScale(d_model, layer_scale)
            self.layer_scale_2 = LayerScale(d_model, layer_scale)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, kv: KVStore,
                layer: int, rope: RopeTable) -> torch.Tensor:
        x = x + self.layer_scale_1(self.self_attn(self.norm1(x), positions, kv, layer, rope))
        update = self.linear2(F.gelu(self.linear1(self.norm2(x)), approximate="tanh"))
        return x + self.layer_scale_2(update)


class Transformer(nn.Module):
    """A stack of layers over x [B, T, d_model] at absolute positions [B, T]."""

    def __init__(self, d_model: int, num_heads: int, num_layers: int, ffn_dim: int,
                 max_period: float, kv_heads: int | None = None, head_dim: int | None = None,
                 context: int | None = None, layer_scale: float | None = None) -> None:
        super().__init__()
        kv_heads = kv_heads or num_heads
        head_dim = head_dim or d_model // num_heads
        self.num_layers, self.kv_heads, self.head_dim = num_layers, kv_heads, head_dim
        self.max_period = max_period
        self.layers = nn.ModuleList(
            TransformerLayer(d_model, num_heads, kv_heads, head_dim, ffn_dim, max_period,
                             context, layer_scale)
            for _ in range(num_layers)
        )

    def forward(self, x: torch.Tensor, positions: torch.Tensor, kv: KVStore) -> torch.Tensor:
        rope = rope_table(positions, self.head_dim, self.max_period)
        for index, layer in enumerate(self.layers):
            x = layer(x, positions, kv, index, rope)
        return x

    def write_kv(self, x: torch.Tensor, positions: torch.Tensor, kv: KVStore) -> None:
        """Store the keys and values of x [B, T, d_model] at `positions`, as forward()
        does, for callers that never read the output (prefills): the last layer stops
        once its keys and values are written, skipping its attention, output projection
        and feed-forward (with 6 layers, 1/8 of the matmuls)."""
        rope = rope_table(positions, self.head_dim, self.max_period)
        *head, last = self.layers
        for index, layer in enumerate(head):
            x = layer(x, positions, kv, index, rope)
        last.self_attn.write_kv(last.norm1(x), positions, kv, len(head), rope)
