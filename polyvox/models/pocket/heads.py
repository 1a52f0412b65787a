"""The sampler head: an AdaLN-modulated MLP that turns noise into the next latent frame,
conditioned on the backbone output, and the four ways pocket-tts samples with it.

- lsd: two time conditions (start s, target t); n Euler-like jumps x += v(s, t, x) / n.
- flow_matching: one time condition; Euler integration of the flow, x += v(t, x) / n.
- drifting: no time condition; the sample is the head's output for the noise.
- pointwise: no time condition; the sample is the noise plus the head's output.

Parameter names follow pocket-tts' checkpoint layout (`flow_net.*`).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class VarianceNorm(nn.Module):
    """pocket-tts' "RMSNorm": x * alpha / sqrt(eps + unbiased variance of x)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.alpha = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = self.eps + x.var(dim=-1, keepdim=True)
        return x * (self.alpha * torch.rsqrt(variance))


class TimeEmbedding(nn.Module):
    """Scalar time [B, 1] -> [B, dim] through sinusoids and an MLP."""

    freqs: torch.Tensor

    def __init__(self, dim: int, num_frequencies: int = 256, max_period: float = 10000) -> None:
        super().__init__()
        half = num_frequencies // 2
        self.register_buffer(
            "freqs", torch.exp(-math.log(max_period) * torch.arange(half) / half)
        )
        self.mlp = nn.Sequential(
            nn.Linear(num_frequencies, dim), nn.SiLU(), nn.Linear(dim, dim), VarianceNorm(dim)
        )

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        angles = t * self.freqs.to(t.dtype)
        return self.mlp(torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1))


def _layer_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """LayerNorm spelled out (mean, biased variance): the same rounding as pocket-tts,
    which keeps parity tight over hundreds of autoregressive steps."""
    mean = x.mean(dim=-1, keepdim=True)
    variance = x.var(dim=-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(variance + eps)


class AffineLayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _layer_norm(x, self.eps) * self.weight + self.bias


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class ResidualBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.in_ln = AffineLayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 3 * dim))

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.adaLN_modulation(cond).chunk(3, dim=-1)
        return x + gate * self.mlp(_modulate(self.in_ln(x), shift, scale))


class FinalLayer(nn.Module):
    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, out_dim)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(cond).chunk(2, dim=-1)
        x = _layer_norm(x)
        return self.linear(_modulate(x, shift, scale))


class SamplerHead(nn.Module):
    """v(cond, *times, x): cond [B, cond_dim], each time [B, 1], x [B, latent_dim]."""

    def __init__(self, latent_dim: int, dim: int, cond_dim: int, depth: int,
                 num_time_conds: int) -> None:
        super().__init__()
        self.num_time_conds = num_time_conds
        self.time_embed = nn.ModuleList(TimeEmbedding(dim) for _ in range(num_time_conds))
        self.cond_embed = nn.Linear(cond_dim, dim)
        self.input_proj = nn.Linear(latent_dim, dim)
        self.res_blocks = nn.ModuleList(ResidualBlock(dim) for _ in range(depth))
        self.final_layer = FinalLayer(dim, latent_dim)

    def forward(self, cond: torch.Tensor, *times_and_x: torch.Tensor) -> torch.Tensor:
        *times, x = times_and_x
        if len(times) != self.num_time_conds:
            raise ValueError(f"head expects {self.num_time_conds} time inputs, got {len(times)}")
        h = self.input_proj(x)
        c = self.cond_embed(cond)
        if times:
            c = c + sum(embed(t) for embed, t in zip(self.time_embed, times)) / len(times)
        for block in self.res_blocks:
            h = block(h, c)
        return self.final_layer(h, c)


def sample(head: SamplerHead, kind: str, cond: torch.Tensor, noise: torch.Tensor,
           num_steps: int, draws: int = 1) -> torch.Tensor:
    """Run a sampler of type `kind` from noise [B, latent_dim] -> latent [B, latent_dim].

    draws > 1 (even) returns the mean of the sampler run from `draws` noises made of each
    row's own: n, -n, then fixed permutations of n's values and their negatives. That
    estimates the head's conditional mean (what a head with deterministic targets is
    asked for) at `draws` head rows per row; the antithetic pairs cancel the part of the
    noise the head passes straight through. Row by row, so a batch equals its rows run
    one at a time, and seeded like the single draw."""
    if draws == 1:
        return _sample(head, kind, cond, noise, num_steps)
    rows, dim = noise.shape
    noises = draw_noises(noise, draws)
    conds = cond[:, None].expand(rows, draws, cond.shape[-1]).reshape(rows * draws, -1)
    out = _sample(head, kind, conds, noises.reshape(rows * draws, dim), num_steps)
    return out.reshape(rows, draws, dim).mean(1)


def draw_noises(noise: torch.Tensor, draws: int) -> torch.Tensor:
    """The noises `sample` averages over [B, draws, D]: each row's n, -n, then fixed
    permutations of n's values and their negatives."""
    check_draws(draws)
    if draws == 1:
        return noise[:, None]
    return torch.stack([sign * noise[:, order]
                        for order in _noise_orders(noise.shape[-1], draws // 2, noise.device)
                        for sign in (1, -1)], 1)


MAX_DRAWS = 64


def check_draws(draws: int) -> None:
    """ValueError unless `draws` is 1 or even, up to MAX_DRAWS."""
    if not (draws == 1 or 2 <= draws <= MAX_DRAWS and draws % 2 == 0):
        raise ValueError(f"head draws must be 1 or even up to {MAX_DRAWS}, not {draws}")


_ORDERS: dict[tuple[int, int, str], list[torch.Tensor]] = {}


def _noise_orders(dim: int, count: int, device: torch.device) -> list[torch.Tensor]:
    """The identity, then count - 1 fixed (seeded) permutations of range(dim)."""
    key = (dim, count, str(device))
    if key not in _ORDERS:
        generator = torch.Generator().manual_seed(dim)
        orders = [torch.arange(dim)] + [torch.randperm(dim, generator=generator)
                                        for _ in range(count - 1)]
        _ORDERS[key] = [order.to(device) for order in orders]
    return _ORDERS[key]


def _sample(head: SamplerHead, kind: str, cond: torch.Tensor, noise: torch.Tensor,
            num_steps: int) -> torch.Tensor:
    if kind == "drifting":
        return head(cond, noise)
    if kind == "pointwise":
        return noise + head(cond, noise)
    ones = torch.ones_like(noise[..., :1])
    x = noise
    for i in range(num_steps):
        if kind == "lsd":
            x = x + head(cond, ones * (i / num_steps), ones * ((i + 1) / num_steps), x) / num_steps
        elif kind == "flow_matching":
            x = x + head(cond, ones * (i / num_steps), x) / num_steps
        else:
            raise ValueError(f"unknown sampler type {kind!r}")
    return x
