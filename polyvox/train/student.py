"""Training the student (its network, config and weight loading are in
polyvox/models/joe_ar/network.py).

Training is teacher forcing over sequences laid out exactly as the engine's KV holds a
clause (see batches.py): [ids][BOS][l0 .. l_{S-1}]; the input at position k predicts
l_k and the last input (l_{S-1}) predicts EOS. Losses:

- flow matching: x_t = (1 - t) noise + t x, the head predicts x - noise (pocket-tts'
  convention: t = 0 is noise); a quarter of the draws take t = 0, the only time a
  one-step sampler evaluates.
- EOS: binary cross-entropy on every latent input.
- guided attention: chosen heads of chosen layers are pushed to attend to the phonemes
  the teacher speaks during the predicted step (from its durations), -log of the
  attention mass inside that band. Only training needs the durations.
- emitted (optional): the squared error of the step generation emits, the head's
  one-step mean over averaged draws at the inference temperature (heads.sample), against
  the teacher's step. Validation always reports it: the flow loss is mostly the noise a
  single draw keeps, which the draws remove (docs/distill.md, session 20).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import torch
import torch.nn.functional as F

from polyvox.models.layers.attention import KVStore, NoCache, apply_rope
from polyvox.models.layers.transformer import TransformerLayer
from polyvox.models.pocket.flow_lm import FlowLM
from polyvox.models.pocket.heads import sample


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class Batch(NamedTuple):
    """Teacher-forcing sequences, right-padded to T positions (see batches.py)."""

    tokens: torch.Tensor  # [B, T] phoneme id at text positions (0 elsewhere)
    is_text: torch.Tensor  # [B, T] bool
    latents_in: torch.Tensor  # [B, T, D] normalized input latent; NaN = BOS; 0 at text
    positions: torch.Tensor  # [B, T] absolute positions (padding continues past the end)
    targets: torch.Tensor  # [B, T, D] normalized latent the position predicts
    has_target: torch.Tensor  # [B, T] bool
    eos_targets: torch.Tensor  # [B, T] float, 1 at each sequence's last latent input
    has_eos: torch.Tensor  # [B, T] bool, latent inputs that count for the EOS loss
    band_low: torch.Tensor  # [B, T] first sequence index of the spoken phonemes' band
    band_high: torch.Tensor  # [B, T] last index (inclusive); -1: no guide at this position
    features: torch.Tensor  # [B, T, C] the teacher's prior mean of each text position's id
    log_speed: torch.Tensor  # [B, T] log of the pace each position's clause was spoken at


@dataclass(frozen=True)
class LossWeights:
    eos: float = 0.1
    guide: float = 0.5
    flow_samples: int = 4  # (t, noise) draws per target, the head is cheap
    zero_time_fraction: float = 0.25
    # Gaussian noise (in normalized units) on the fed-back latents: the student must not
    # lean on exact copies of its own past output, which drifts when it runs free.
    input_noise: float = 0.2
    guide_layers: tuple[int, ...] = (1, 2)
    guide_heads: int = 2  # the first heads of each guided layer
    # The emitted-step loss: its weight (0: off), and the draws and temperature of the
    # generation it measures (joe_ar.yaml's head_draws and default_temperature).
    emitted: float = 0.0
    emitted_draws: int = 2
    emitted_temperature: float = 0.2


def _capture_attention(flow_lm: FlowLM, layers: tuple[int, ...]) -> tuple[list[Any], dict]:
    """Hooks that keep each guided layer's queries and keys (after RoPE)."""
    captured: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    handles = []
    for index in layers:
        attention = cast(TransformerLayer, flow_lm.transformer.layers[index]).self_attn

        def hook(module: Any, args: tuple, index: int = index) -> None:
            x, _, _, _, rope = args
            projected = module.in_proj(x)
            batch, steps, _ = x.shape
            query_dim = module.num_heads * module.head_dim
            q = projected[..., :query_dim].view(batch, steps, module.num_heads, module.head_dim)
            k = projected[..., query_dim: query_dim + module.kv_heads * module.head_dim]
            k = k.view(batch, steps, module.kv_heads, module.head_dim)
            captured[index] = (apply_rope(q, rope), apply_rope(k, rope))

        handles.append(attention.register_forward_pre_hook(hook))
    return handles, captured


def _guide_loss(captured: dict, batch: Batch, num_heads: int) -> torch.Tensor:
    valid = batch.band_high >= 0  # [B, T]
    index = torch.arange(batch.tokens.shape[1], device=batch.tokens.device)
    in_band = ((index[None, None, :] >= batch.band_low[..., None])
               & (index[None, None, :] <= batch.band_high[..., None]))  # [B, T, S]
    causal = batch.positions[:, :, None] >= batch.positions[:, None, :]
    losses = []
    for q, k in captured.values():
        group = q.shape[2] // k.shape[2]
        q = q[:, :, :num_heads].transpose(1, 2)  # [B, h, T, hd]
        k = k.repeat_interleave(group, dim=2)[:, :, :num_heads].transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # [B, h, T, S]
        scores = scores.masked_fill(~causal[:, None], float("-inf"))
        log_probs = scores.log_softmax(dim=-1)
        band = log_probs.masked_fill(~in_band[:, None], float("-inf")).logsumexp(dim=-1)
        losses.append(-band.transpose(1, 2)[valid].mean())
    return torch.stack(losses).mean()


def teacher_forcing(flow_lm: FlowLM, batch: Batch, kv: KVStore | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The backbone over whole sequences, as FlowLM.prefill + FlowLM.step compute it one
    position at a time: (head conditioning [B, T, d], EOS logits [B, T]). With `kv`
    (one row), the sequence attends to what the store holds too and is written into it
    (committed)."""
    latents = torch.where(torch.isnan(batch.latents_in), flow_lm.bos_emb, batch.latents_in)
    features = None
    if flow_lm.needs_features:
        features = batch.features
        if getattr(flow_lm, "speed_proj", None) is not None:
            features = torch.cat([features, batch.log_speed[..., None]], dim=-1)
    text = flow_lm.embed_text(batch.tokens, features)
    x = torch.where(batch.is_text[..., None], text, flow_lm.input_linear(latents))
    hidden = flow_lm.out_norm(flow_lm.transformer(x, batch.positions,
                                                  NoCache() if kv is None else kv))
    if kv is not None:
        kv.commit()
    if flow_lm.z_proj is not None:
        hidden = flow_lm.z_proj(hidden)
    return hidden, flow_lm.out_eos(hidden)[..., 0]


def student_losses(flow_lm: FlowLM, batch: Batch, weights: LossWeights,
                   generator: torch.Generator,
                   emitted_generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """The losses of one teacher-forcing batch; "total" is what to minimize. "emitted" is
    computed when weighted or when `emitted_generator` is given (its noise then comes
    from there, so measuring it leaves the other draws as they were)."""
    if weights.input_noise:
        # draws come from the CPU generator on every device: the same run anywhere
        noise = torch.randn(batch.latents_in.shape, generator=generator).to(batch.latents_in.device)
        batch = batch._replace(latents_in=batch.latents_in + weights.input_noise * noise)
    handles, captured = _capture_attention(flow_lm, weights.guide_layers if weights.guide else ())
    try:
        hidden, eos_logits = teacher_forcing(flow_lm, batch)
    finally:
        for handle in handles:
            handle.remove()
    eos = F.binary_cross_entropy_with_logits(eos_logits[batch.has_eos],
                                             batch.eos_targets[batch.has_eos])
    cond = hidden[batch.has_target].repeat(weights.flow_samples, 1)  # [M * k, d]
    target = batch.targets[batch.has_target].repeat(weights.flow_samples, 1)  # [M * k, D]
    noise = torch.randn(target.shape, generator=generator).to(target.device)
    t = torch.rand(target.shape[0], 1, generator=generator)
    t = t.masked_fill(torch.rand(t.shape, generator=generator) < weights.zero_time_fraction, 0.0)
    t = t.to(target.device)
    velocity = flow_lm.flow_net(cond, t, (1 - t) * noise + t * target)
    flow = F.mse_loss(velocity, target - noise)
    losses = {"flow": flow, "eos": eos}
    total = flow + weights.eos * eos
    if captured:
        losses["guide"] = _guide_loss(captured, batch, weights.guide_heads)
        total = total + weights.guide * losses["guide"]
    if weights.emitted or emitted_generator is not None:
        losses["emitted"] = _emitted_loss(flow_lm, hidden[batch.has_target],
                                          batch.targets[batch.has_target], weights,
                                          emitted_generator or generator)
        total = total + weights.emitted * losses["emitted"]
    losses["total"] = total
    return losses


def _emitted_loss(flow_lm: FlowLM, cond: torch.Tensor, target: torch.Tensor,
                  weights: LossWeights, generator: torch.Generator) -> torch.Tensor:
    """MSE of the step generation emits (one Euler step from t = 0, the mean over
    `emitted_draws` noises of variance `emitted_temperature`) against the teacher's."""
    noise = torch.randn(target.shape, generator=generator).to(target.device)
    noise = noise * weights.emitted_temperature ** 0.5
    emitted = sample(flow_lm.flow_net, "flow_matching", cond, noise, 1, weights.emitted_draws)
    return F.mse_loss(emitted, target)
