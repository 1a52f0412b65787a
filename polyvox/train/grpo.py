"""Flow-GRPO rollouts for the student (issue 25; docs/posttrain.md): a clause generated
with the head's SDE sampler (sde.py), keeping every step's path, and the clause's
log-probability under any policy, recomputed in one teacher-forcing pass, which is what
the GRPO ratio needs.

A clause's log-probability is the sum over its AR steps of the SDE transitions'
log-densities (the head's stochastic part), plus the log-likelihood of its end-of-speech
decisions read as Bernoulli (as in dpo.py). The engine's EOS rule thresholds the logit
and is not sampled; the Bernoulli term lets the objective move the logits all the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from polyvox.train import sde
from polyvox.train.batches import Example, LatentStats, fresh_batch
from polyvox.train.dpo import generated_example
from polyvox.train.student import teacher_forcing

if TYPE_CHECKING:
    from polyvox.models.joe_ar.family import StudentFamily, StudentParams
    from polyvox.models.joe_ar.network import StudentFlowLM


@dataclass(frozen=True)
class SDESettings:
    steps: int = 4  # SDE steps per AR step
    a: float = 0.5  # noise level (sde.noise_level); > 0 for a log-probability
    temperature: float = 0.2  # variance of the starting noise (the student's default)


@dataclass(frozen=True)
class Rollout:
    example: Example  # the clause as a training row (latents = the paths' ends)
    paths: torch.Tensor  # [S, K + 1, D] each AR step's SDE path, normalized
    log_prob: float  # under the policy that generated it
    ended: bool  # its EOS logit ended it (else it ran to its length cap)


def _velocity(flow_lm: StudentFlowLM, cond: torch.Tensor) -> sde.Velocity:
    def velocity(x: torch.Tensor, t: float) -> torch.Tensor:
        return flow_lm.flow_net(cond, torch.full((x.shape[0], 1), t), x)

    return velocity


def _eos_log_likelihood(logits: torch.Tensor, ended: bool) -> torch.Tensor:
    """Bernoulli log-likelihood of the decisions: no end at every step but the last,
    an end at the last if the clause `ended`."""
    targets = torch.zeros_like(logits)
    if ended:
        targets[-1] = 1.0
    return -F.binary_cross_entropy_with_logits(logits, targets, reduction="sum")


@torch.no_grad()
def rollout_clause(family: StudentFamily, ids: list[int], params: StudentParams,
                   settings: SDESettings, generator: torch.Generator) -> Rollout:
    """Generate one clause as the engine would (its EOS rule, a fresh context), each AR
    step's latent drawn by the SDE sampler from N(0, temperature)."""
    from polyvox.models.joe_ar.family import MIN_STEPS_BEFORE_EOS
    from polyvox.models.layers.attention import ContiguousKV

    flow_lm = family.flow_lm
    tokens = torch.tensor(ids, dtype=torch.long)
    features = family.text_features(ids, params.speed)
    kv = ContiguousKV(*family.kv_shape, dtype=torch.float32, device=torch.device("cpu"))
    family.prefill_tokens(tokens, kv.next_positions(len(ids)), kv, features)
    kv.commit()
    latent = torch.full((1, family.latent_dim), float("nan"))
    paths, logits, total, ended = [], [], 0.0, False
    for index in range(family.max_frames(len(ids), params.speed)):
        hidden, logit = flow_lm.step_hidden(latent, kv.next_positions(1)[:, 0], kv)
        kv.commit()
        logits.append(logit)
        if index >= MIN_STEPS_BEFORE_EOS and float(logit) > family.eos_threshold(params):
            ended = True
            break
        start = torch.randn(1, family.latent_dim, generator=generator) \
            * math.sqrt(settings.temperature)
        path = sde.sample(_velocity(flow_lm, hidden), start, settings.steps, settings.a,
                          generator)
        total += float(sde.log_prob(_velocity(flow_lm, hidden), path, settings.a)[0])
        paths.append(torch.cat(path))  # [K + 1, D]
        latent = path[-1]
    eos = float(_eos_log_likelihood(torch.cat(logits), ended))
    stacked = torch.stack(paths) if paths else torch.zeros(0, settings.steps + 1,
                                                           family.latent_dim)
    example = generated_example(tokens, stacked[:, -1], features, flow_lm, params.speed)
    return Rollout(example, stacked, total + eos, ended)


@dataclass
class RolloutTerms:
    """One rollout under one model: per AR step and SDE step, the transition's
    log-density [S, K] and mean [S, K, D]; the stds (K) are the sampler's, shared by every
    model; the EOS decisions' log-likelihood."""

    log_probs: torch.Tensor
    means: torch.Tensor
    stds: list[float]
    eos: torch.Tensor

    @property
    def total(self) -> torch.Tensor:
        return self.log_probs.sum() + self.eos


def rollout_terms(flow_lm: StudentFlowLM, rollouts: list[Rollout], stats: LatentStats,
                  settings: SDESettings) -> list[RolloutTerms]:
    """Each rollout's terms under `flow_lm`, in one teacher-forcing pass (differentiable:
    the policy's side of the GRPO ratio)."""
    batch = fresh_batch([r.example for r in rollouts], stats)
    hidden, eos_logits = teacher_forcing(flow_lm, batch)
    terms = []
    for row, rollout in enumerate(rollouts):
        cond = hidden[row][batch.has_target[row]]  # [S, d], one per generated step
        states = list(rollout.paths.transpose(0, 1))  # K + 1 of [S, D]
        log_probs, means, stds = sde.transition_terms(_velocity(flow_lm, cond), states,
                                                      settings.a)
        # the logits at BOS and every latent input; a clause cut at its cap never stepped
        # its last latent
        logits = eos_logits[row][batch.has_eos[row]]
        eos = _eos_log_likelihood(logits if rollout.ended else logits[:-1], rollout.ended)
        terms.append(RolloutTerms(log_probs, means, stds, eos))
    return terms


def rollout_log_probs(flow_lm: StudentFlowLM, rollouts: list[Rollout], stats: LatentStats,
                      settings: SDESettings) -> torch.Tensor:
    """Each rollout's log-probability under `flow_lm` [R]."""
    return torch.stack([t.total for t in rollout_terms(flow_lm, rollouts, stats, settings)])


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A group's rewards (the same text spoken G times) -> (r - mean) / std; all zero
    when the group agrees (nothing to learn from it)."""
    spread = rewards.std()
    if rewards.numel() < 2 or float(spread) < 1e-6:
        return torch.zeros_like(rewards)
    return (rewards - rewards.mean()) / spread


@dataclass(frozen=True)
class GRPOSettings:
    clip: float = 0.2  # PPO's ratio clip, per transition
    kl: float = 0.04  # weight of the KL to the reference


def grpo_loss(policy: StudentFlowLM, reference: StudentFlowLM, rollouts: list[Rollout],
              old: list[RolloutTerms], advantages: torch.Tensor, stats: LatentStats,
              sampler: SDESettings, settings: GRPOSettings = GRPOSettings()
              ) -> dict[str, torch.Tensor]:
    """Flow-GRPO's objective over the rollouts' transitions: per transition the clipped
    ratio to the policy that sampled it (`old`, detached) times its rollout's advantage,
    plus the KL to the reference, which for two Gaussians of the sampler's std is
    |mean - mean_ref|^2 / (2 std^2). The EOS decisions join as one more term per rollout."""
    new = rollout_terms(policy, rollouts, stats, sampler)
    with torch.no_grad():
        ref = rollout_terms(reference, rollouts, stats, sampler)
    surrogate, kl, count = torch.zeros(()), torch.zeros(()), 0
    for now, then, anchor, advantage in zip(new, old, ref, advantages):
        log_ratio = torch.cat([(now.log_probs - then.log_probs.detach()).flatten(),
                               (now.eos - then.eos.detach())[None]])
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1 - settings.clip, 1 + settings.clip)
        surrogate = surrogate + torch.minimum(ratio * advantage, clipped * advantage).sum()
        variance = torch.tensor(now.stds) ** 2  # [K]
        kl = kl + (((now.means - anchor.means) ** 2).sum(dim=-1) / (2 * variance)).sum()
        count += log_ratio.numel()
    count = max(count, 1)
    loss = -(surrogate / count) + settings.kl * kl / count
    return {"loss": loss, "surrogate": surrogate.detach() / count, "kl": kl.detach() / count}
