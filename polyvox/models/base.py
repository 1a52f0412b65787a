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

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import torch

from polyvox.models.layers.attention import KVStore
from polyvox.models.retime import Retiming, ZResampling


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
class FamilyTraits:
    """What a family is and can do, as data: the engine reads these and never probes a
    family for optional methods."""

    # prefill_tokens + step_batch (one latent frame per engine step); else the whole
    # clause's latents at once through clause_latents_batch.
    is_autoregressive: bool
    fade_in_samples: int = 0  # a fresh decoder's first samples are faded in (0: none)
    # A windowed decoder reads `decoder_lookahead` frames past a chunk and prepends
    # `decoder_history` frames of the slot's past (its `decode` takes num_frames, history).
    decoder_lookahead: int = 0
    decoder_history: int = 0
    decoder_batch_frames: int | None = None  # most frames one decoder call holds (None: any)
    resets_decoder_per_clause: bool = False  # each clause is its own utterance
    starts_clauses_in_pieces: bool = False  # start_clauses(): a clause's first frames first
    clones_voices: bool = False  # voice_from_audio(): a voice from a recording
    # step_batch also reads each row's clause: its ClausePlan.features, padded, and how
    # many tokens each row's clause has (`clauses=(features [B, N, F], counts [B])`),
    # F = clause_feature_width
    steps_read_clause: bool = False
    clause_feature_width: int = 0
    # EngineConfig fields this family prefers where the user set none (EngineConfig.for_family)
    preferred_settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "preferred_settings",
                           MappingProxyType(dict(self.preferred_settings)))


@dataclass(frozen=True)
class ClausePlan:
    """A clause ready for prefill: what to feed and when to stop."""

    tokens: torch.Tensor  # [T] token ids
    frames_after_eos: int  # frames kept after the EOS step
    max_frames: int  # hard cap on frames for the clause
    features: torch.Tensor | None = None  # [T, F] per-token inputs beside the ids, if any
    # The clause's AR latents are retimed (or their z resampled) before they are decoded
    # (polyvox.models.retime; max_frames still counts AR steps); None: decoded as generated
    retime: Retiming | ZResampling | None = None


class ModelFamily(Protocol):
    """Autoregressive families (traits.is_autoregressive) implement prefill_tokens,
    step_batch and max_frames; the others implement clause_latents_batch (and
    start_clauses when traits.starts_clauses_in_pieces) and declare
    `kv_spec.num_layers == 0`."""

    traits: FamilyTraits
    audio: AudioFormat
    kv_spec: KVSpec
    latent_dim: int
    is_random: bool  # loaded without trained weights: its audio is noise

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
                   noise: torch.Tensor, sampler_steps: int,
                   clauses: tuple[torch.Tensor, torch.Tensor] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """latents [B, D] (NaN rows: first step of a clause), positions [B], noise [B, D]
        (and with traits.steps_read_clause, `clauses`) -> (next latents [B, D], EOS
        logits [B])."""
        ...

    def decoder_state_shapes(self) -> dict[str, tuple[int, ...]]: ...

    def new_decoder_state(self, batch_size: int = 1) -> dict[str, torch.Tensor]: ...

    def decode(self, latents: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """latents [B, T, D] -> PCM [B, T * samples_per_frame] (new samples only)."""
        ...
