"""The stage protocol every model family implements for the engine.

A family turns text into audio in three stages, each batched across requests:

    prefill   a clause's text tokens -> appended to the request's KV (packed, ragged)
    step      one autoregressive latent frame + EOS logit per request
    decode    latent frames -> PCM samples, with per-request decoder state

The engine allocates the pools the family declares (`kv_spec`, `decoder_state_shapes`),
builds the batch tensors and calls the stages; it never imports a family's internals.

NOTE: the decoder output contract is *delta* output. Each `decode` call returns only the
new samples, and the concatenation of every chunk of a request equals decoding the
request's whole latent sequence at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from polyvox.models.layers.attention import KVStore


@dataclass(frozen=True)
class AudioFormat:
    """What a family's decoder produces."""

    sample_rate: int  # Hz of the PCM the decoder emits
    frame_rate: float  # latent frames per second
    samples_per_frame: int  # PCM samples per latent frame


@dataclass(frozen=True)
class KVSpec:
    """Shape of the backbone's KV cache, per token: num_layers x kv_heads x head_dim."""

    num_layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype


@dataclass(frozen=True)
class ClausePlan:
    """A clause ready for prefill: what to feed and when to stop."""

    tokens: torch.Tensor  # [T] token ids
    frames_after_eos: int  # frames kept after the EOS step
    max_frames: int  # hard cap on frames for the clause
    features: torch.Tensor | None = None  # [T, F] per-token inputs beside the ids, if any


class ModelFamily(Protocol):
    """Autoregressive families implement prefill_tokens/step_batch; the others implement
    clause_latents instead (the whole clause's latents at once) and declare
    `kv_spec.num_layers == 0`. Windowed decoders declare `decoder_lookahead` and
    `decoder_history` (frames) and accept `num_frames`/`history` in `decode`."""

    audio: AudioFormat
    kv_spec: KVSpec
    latent_dim: int
    fade_in_samples: int  # a fresh decoder's first samples are faded in (0: none)
    is_autoregressive: bool

    def make_params(self, seed: int = 0, temperature: float | None = None,
                    speed: float = 1.0) -> Any:
        """Per-request parameters; ValueError for settings the family cannot honour."""
        ...

    def count_tokens(self, text: str) -> int: ...

    def split_like_reference(self, text: str, max_tokens: int) -> list[str]:
        """Chunks exactly as the family's reference implementation makes them."""
        ...

    def plan_clause(self, text: str, params: Any) -> ClausePlan: ...

    def eos_threshold(self, params: Any) -> float: ...

    def sample_noise(self, generator: torch.Generator, params: Any) -> torch.Tensor:
        """[latent_dim] noise for one step of one request (its own generator)."""
        ...

    def prefill_tokens(self, tokens: torch.Tensor, positions: torch.Tensor,
                       kv: KVStore, features: torch.Tensor | None = None) -> None:
        """tokens [N] packed, positions [1, N] (features [N, F] packed alike, for a family
        whose ClausePlan carries them): write their KV."""
        ...

    def step_batch(self, latents: torch.Tensor, positions: torch.Tensor, kv: KVStore,
             noise: torch.Tensor, sampler_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """latents [B, D] (NaN rows: first step of a clause), positions [B], noise [B, D]
        -> (next latents [B, D], EOS logits [B])."""
        ...

    def decoder_state_shapes(self) -> dict[str, tuple[int, ...]]: ...

    def new_decoder_state(self, batch_size: int = 1) -> dict[str, torch.Tensor]: ...

    def decode(self, latents: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """latents [B, T, D] -> PCM [B, T * samples_per_frame] (new samples only)."""
        ...
