"""Flow-DPO for the student (issue 25; docs/posttrain.md): preference pairs of the
student's own clauses, the better one by the rewards (rewards.py), and a loss that
raises the policy's likelihood of the winner relative to the loser, measured against a
frozen reference (the distilled student).

A flow-matching head has no exact likelihood; as in Diffusion-DPO, its flow-matching
loss at a shared (t, noise) stands in for the negative log-likelihood. Per clause:

    d(x)   = flow loss of the policy on x - flow loss of the reference on x
             (mean over the clause's steps; the same t and noise for both models)
    e(x)   = EOS log-likelihood of the policy on x - of the reference on x
             (exact: the end-of-speech decisions are Bernoulli)
    margin = beta * (d(loser) - d(winner)) + eos_weight * (e(winner) - e(loser))
    loss   = -log sigmoid(margin)

The clause is fed back as the model produced it (no input noise), laid out exactly as
teacher forcing lays out training data (batches.py), with the clause's log speed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from polyvox.models.joe_ar.network import StudentFlowLM
from polyvox.train.batches import Example, LatentStats, make_batch
from polyvox.train.student import Batch, teacher_forcing


class Pair(NamedTuple):
    """Two clauses spoken for the same text (and speed): the preferred one first."""

    winner: Example
    loser: Example
    margin: float  # reward(winner) - reward(loser)


@dataclass(frozen=True)
class DPOSettings:
    beta: float = 200.0  # scale of the flow-loss difference (per-step mean MSE)
    eos_weight: float = 1.0
    flow_samples: int = 4  # (t, noise) draws per step, shared by policy and reference


def generated_example(tokens: torch.Tensor, latents: torch.Tensor,
                      features: torch.Tensor | None, flow_lm: StudentFlowLM,
                      speed: float = 1.0) -> Example:
    """A clause the student generated (normalized latents [S, D], as clause_latents
    returns them; `features` as its plan had them, or None) as a training example: its
    latents denormalized (make_batch normalizes them again), no attention guide."""
    steps, channels = latents.shape[0], flow_lm.feature_channels
    prior = features[:, :channels].detach() if features is not None \
        else torch.zeros(len(tokens), channels)
    return Example(tokens=tokens, latents=flow_lm.denormalize(latents).detach(),
                   band_low=torch.zeros(steps + 1, dtype=torch.long),
                   band_high=torch.full((steps + 1,), -1, dtype=torch.long),
                   features=prior, speed=speed)


def pair_batch(pairs: list[Pair], stats: LatentStats) -> Batch:
    """Winners then losers, one row each (in a fresh context)."""
    examples = [p.winner for p in pairs] + [p.loser for p in pairs]
    batch = make_batch(examples, stats, random.Random(0))
    return batch._replace(positions=batch.positions - batch.positions[:, :1])


def row_scores(flow_lm: StudentFlowLM, batch: Batch, t: torch.Tensor,
               noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: the mean flow-matching loss over its steps at the given draws (t [K, M, 1],
    noise [K, M, D] for the M target positions in batch order), and the EOS
    log-likelihood of its end-of-speech decisions. Returns ([B], [B])."""
    hidden, eos_logits = teacher_forcing(flow_lm, batch)
    cond, target = hidden[batch.has_target], batch.targets[batch.has_target]  # [M, d], [M, D]
    losses = []
    for draw_t, draw_noise in zip(t, noise):
        x_t = (1 - draw_t) * draw_noise + draw_t * target
        velocity = flow_lm.flow_net(cond, draw_t, x_t)
        losses.append(((velocity - (target - draw_noise)) ** 2).mean(dim=-1))  # [M]
    per_position = torch.stack(losses).mean(dim=0)
    rows = batch.has_target.nonzero()[:, 0]  # the row of each target position
    count = torch.zeros(batch.tokens.shape[0]).index_add_(0, rows, torch.ones_like(per_position))
    flow = torch.zeros(batch.tokens.shape[0]).index_add_(0, rows, per_position) / count.clamp_min(1)
    eos = -F.binary_cross_entropy_with_logits(eos_logits, batch.eos_targets, reduction="none")
    eos = (eos * batch.has_eos).sum(dim=1)
    return flow, eos


def dpo_loss(policy: StudentFlowLM, reference: StudentFlowLM, pairs: list[Pair],
             stats: LatentStats, settings: DPOSettings, generator: torch.Generator
             ) -> dict[str, torch.Tensor]:
    """The loss of a batch of pairs ("loss"), and what it is made of, for the log."""
    batch = pair_batch(pairs, stats)
    positions = int(batch.has_target.sum())
    t = torch.rand(settings.flow_samples, positions, 1, generator=generator)
    noise = torch.randn(settings.flow_samples, positions, batch.targets.shape[-1],
                        generator=generator)
    flow, eos = row_scores(policy, batch, t, noise)
    with torch.no_grad():
        ref_flow, ref_eos = row_scores(reference, batch, t, noise)
    half = len(pairs)
    d, e = flow - ref_flow, eos - ref_eos
    margin = settings.beta * (d[half:] - d[:half]) + settings.eos_weight * (e[:half] - e[half:])
    loss = -F.logsigmoid(margin).mean()
    return {"loss": loss, "margin": margin.detach().mean(),
            "accuracy": (margin.detach() > 0).float().mean(),
            "winner_flow": flow[:half].detach().mean(), "loser_flow": flow[half:].detach().mean()}


def make_pairs(candidates: list[tuple[Example, float]], min_margin: float = 0.05
               ) -> Pair | None:
    """The best and the worst of one text's candidates (clause, reward), if their rewards
    differ by at least `min_margin` (closer ones teach noise)."""
    if len(candidates) < 2:
        return None
    ranked = sorted(candidates, key=lambda c: c[1], reverse=True)
    (best, high), (worst, low) = ranked[0], ranked[-1]
    return Pair(best, worst, high - low) if high - low >= min_margin else None
