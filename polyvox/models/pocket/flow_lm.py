"""FlowLM: the autoregressive backbone of Pocket TTS, split into engine stages.

    text tokens ──LUT──┐
    voice latents ─────┼─► transformer (pre-LN, RoPE) ─► out_norm ─► [z_proj] ─┬─► sampler head
    previous latent ───┘         (KV cache)                                     └─► EOS logit

`prefill` pushes conditioning embeddings (voice prefix, then a clause's text) into a
request's KV store; `step` runs one backbone token per request and samples the next
latent. Parameter names follow pocket-tts' checkpoint layout (`flow_lm.*`).
"""

from __future__ import annotations

import torch
from torch import nn

from polyvox.models.layers.attention import KVStore
from polyvox.models.layers.transformer import Transformer
from polyvox.models.pocket.config import FlowLMConfig
from polyvox.models.pocket.heads import SamplerHead, sample


class TextEmbedding(nn.Module):
    """Lookup table over token ids (n_bins + 1 rows: the last one is padding), optionally
    low-rank (rank-wide rows and a bias-free projection)."""

    def __init__(self, n_bins: int, dim: int, rank: int | None) -> None:
        super().__init__()
        self.embed = nn.Embedding(n_bins + 1, rank or dim)
        self.proj = None if rank is None else nn.Linear(rank, dim, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        return x if self.proj is None else self.proj(x)


class FlowLM(nn.Module):
    emb_std: torch.Tensor
    emb_mean: torch.Tensor

    def __init__(self, config: FlowLMConfig, latent_dim: int, voice_latent_dim: int) -> None:
        super().__init__()
        backbone = config.transformer
        d_model = backbone.d_model
        self.config, self.latent_dim, self.d_model = config, latent_dim, d_model
        self.sampler_type = config.flow.type
        # Noises per row whose samples are averaged (polyvox.models.pocket.heads.sample);
        # 1 for pocket-tts' models, a distilled student's config may set more.
        self.head_draws = 1
        self.conditioner = TextEmbedding(
            config.lookup_table.n_bins, config.lookup_table.dim, config.lookup_table.rank
        )
        if config.lookup_table.dim != d_model:
            raise ValueError("lookup_table.dim must equal transformer.d_model")
        head_input = config.z_dim or d_model
        self.flow_net = SamplerHead(
            latent_dim, config.flow.dim, head_input, config.flow.depth, config.flow.num_time_conds
        )
        # Latents are generated normalized; the decoder gets latent * emb_std + emb_mean.
        self.register_buffer("emb_std", torch.ones(latent_dim))
        self.register_buffer("emb_mean", torch.zeros(latent_dim))
        self.bos_emb = nn.Parameter(torch.zeros(latent_dim))  # input of the first AR step
        self.bos_before_voice = (
            nn.Parameter(torch.zeros(1, 1, d_model)) if config.insert_bos_before_voice else None
        )
        self.speaker_proj_weight = nn.Parameter(torch.zeros(d_model, voice_latent_dim))
        self.input_linear = nn.Linear(latent_dim, d_model, bias=False)
        self.transformer = Transformer(
            d_model,
            backbone.num_heads,
            backbone.num_layers,
            backbone.ffn_dim,
            backbone.max_period,
            kv_heads=backbone.kv_heads,
            head_dim=backbone.head_dim,
        )
        self.out_norm = nn.LayerNorm(d_model, eps=1e-5)
        self.z_proj = None if config.z_dim is None else nn.Linear(d_model, config.z_dim, bias=False)
        self.out_eos = nn.Linear(head_input, 1)

    # --- conditioning embeddings -------------------------------------------------------

    needs_features = False  # per-token inputs beside the ids (the distilled student's)

    def embed_text(self, tokens: torch.Tensor,
                   features: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [T] -> [T, d_model]. This FlowLM reads no per-token features."""
        if features is not None:
            raise ValueError("this FlowLM reads no per-token features")
        return self.conditioner(tokens)

    def embed_voice(self, voice_latents: torch.Tensor) -> torch.Tensor:
        """Mimi-encoder latents [P, voice_latent_dim] -> voice prefix embeddings [P(+1), d]."""
        prefix = voice_latents.float() @ self.speaker_proj_weight.t()
        if self.bos_before_voice is not None:
            prefix = torch.cat([self.bos_before_voice[0], prefix], dim=0)
        return prefix

    # --- stages -------------------------------------------------------------------------

    def prefill(self, embeddings: torch.Tensor, positions: torch.Tensor, kv: KVStore) -> None:
        """Write conditioning embeddings [B, T, d] at positions [B, T] into the KV store.

        Prefill outputs are never sampled from: generation starts with a BOS step.
        """
        self.transformer.write_kv(embeddings, positions, kv)

    def step(
        self,
        latents: torch.Tensor,
        positions: torch.Tensor,
        kv: KVStore,
        noise: torch.Tensor,
        num_sampler_steps: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One AR step for B requests.

        latents [B, latent_dim] (NaN rows mean "first step": the BOS embedding is used),
        positions [B], noise [B, latent_dim] (already scaled by sqrt(temperature)).
        Returns (next latents [B, latent_dim], EOS logits [B]).
        """
        hidden, eos_logits = self.step_hidden(latents, positions, kv)
        latents = sample(self.flow_net, self.sampler_type, hidden, noise, num_sampler_steps,
                         self.head_draws)
        return latents, eos_logits

    def step_hidden(self, latents: torch.Tensor, positions: torch.Tensor, kv: KVStore
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone's half of `step`: the head's conditioning [B, d] and EOS logits [B]
        (another sampler can then draw from the head: polyvox/train/grpo.py)."""
        latents = torch.where(torch.isnan(latents), self.bos_emb, latents)
        x = self.input_linear(latents)[:, None]  # [B, 1, d]
        hidden = self.out_norm(self.transformer(x, positions[:, None], kv))[:, 0]
        if self.z_proj is not None:
            hidden = self.z_proj(hidden)
        return hidden, self.out_eos(hidden)[:, 0]

    def denormalize(self, latents: torch.Tensor) -> torch.Tensor:
        """Generated latents -> the Mimi decoder's input space."""
        return latents * self.emb_std + self.emb_mean


class FlowLMStages:
    """The autoregressive stages of the engine's protocol for any family built on a FlowLM
    (held as `self.flow_lm`): Pocket TTS and our distilled student."""

    flow_lm: FlowLM

    @torch.no_grad()
    def prefill_tokens(self, tokens: torch.Tensor, positions: torch.Tensor, kv: KVStore,
                       features: torch.Tensor | None = None) -> None:
        """tokens [N] packed, positions [1, N] (features [N, F], if the FlowLM reads
        per-token features: the student's): write their KV."""
        self.flow_lm.prefill(self.flow_lm.embed_text(tokens, features)[None], positions, kv)

    @torch.no_grad()
    def step_batch(self, latents: torch.Tensor, positions: torch.Tensor, kv: KVStore,
                   noise: torch.Tensor, sampler_steps: int,
                   clauses: tuple[torch.Tensor, torch.Tensor] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """latents [B, D] (NaN rows: first step), positions [B], noise [B, D]; `clauses`
        is for families whose traits say steps_read_clause (a pointer student's)."""
        return self.flow_lm.step(latents, positions, kv, noise, sampler_steps)
