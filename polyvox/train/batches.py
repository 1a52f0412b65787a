"""Teacher-forcing batches for the student, laid out as the engine's KV holds clauses.

One sequence (a clause):

    position  0 .. N-1      N      N+1 .. N+S
    input     ids           BOS    l0 .. l_{S-1}      (l = grouped, normalized teacher latent)
    predicts  -             l0     l1 .. l_{S-1}, EOS

With `chain`, a sequence is preceded by another one (its prefix cut at a random point):
the engine's chained mode prefills a clause into the context of the previous one and
drops old context by whole KV blocks, so the student learns to speak a clause after
arbitrary leftovers, and (paragraph data) after the sentence that really came before it.
Only the last clause of a sequence is trained on.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import NamedTuple

import torch

from polyvox.models.joe_ar.network import id_features
from polyvox.train.student import Batch
from polyvox.train.teacher_data import Utterance

MAX_POSITION_OFFSET = 1024  # sequences start at a random position: RoPE sees many offsets
BAND_MARGIN = 2  # ids either side of the spoken ones (a phoneme and its PAD)


class Example(NamedTuple):
    tokens: torch.Tensor  # [N] phoneme ids
    latents: torch.Tensor  # [S, G * C] float16, grouped teacher latents (not normalized)
    band_low: torch.Tensor  # [S + 1] first id spoken during each predicted step
    band_high: torch.Tensor  # [S + 1] last id (the EOS step: the end of the text)
    features: torch.Tensor  # [N, C] the teacher latent at each id's first frame
    speed: float = 1.0  # the pace the teacher spoke it at
    previous: int = -1  # the example of the sentence before it in its paragraph, or -1

    @property
    def length(self) -> int:
        return len(self.tokens) + len(self.latents) + 1


@dataclass(frozen=True)
class LatentStats:
    """Per-channel statistics of the teacher latents, tiled to the grouped latent."""

    mean: torch.Tensor  # [G * C]
    std: torch.Tensor  # [G * C]

    @staticmethod
    def of(utterances: list[Utterance], frames_per_step: int) -> LatentStats:
        total = sum(u.latents.shape[0] for u in utterances)
        mean = torch.stack([u.latents.double().sum(0) for u in utterances]).sum(0) / total  # [C]
        square = torch.stack([((u.latents.double() - mean) ** 2).sum(0) for u in utterances]).sum(0)
        std = (square / (total - 1)).sqrt().clamp_min(1e-3)
        return LatentStats(mean.float().repeat(frames_per_step),
                           std.float().repeat(frames_per_step))

    def normalize(self, latents: torch.Tensor) -> torch.Tensor:
        return (latents.float() - self.mean) / self.std


def group_frames(z: torch.Tensor, frames_per_step: int) -> torch.Tensor:
    """z [T, C] -> [ceil(T / G), G * C], frame-major; the last frame is repeated to fill
    the last step (it is the utterance's closing silence)."""
    frames, channels = z.shape
    steps = -(-frames // frames_per_step)
    pad = steps * frames_per_step - frames
    if pad:
        z = torch.cat([z, z[-1:].expand(pad, channels)])
    return z.reshape(steps, frames_per_step * channels)


def step_bands(durations: torch.Tensor, frames_per_step: int,
               num_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids spoken during each step's frames (+- BAND_MARGIN), and for the final EOS
    step the end of the text. Returns low, high [S + 1] (inclusive)."""
    ends = durations.cumsum(0)  # frame where each id ends
    last_id, last_frame = len(durations) - 1, int(ends[-1]) - 1
    first = torch.arange(num_steps) * frames_per_step
    final = (first + frames_per_step - 1).clamp_max(last_frame)
    low = torch.searchsorted(ends, first.clamp_max(last_frame), right=True) - BAND_MARGIN
    high = torch.searchsorted(ends, final, right=True) + BAND_MARGIN
    end_low = torch.tensor([int(torch.searchsorted(ends, torch.tensor(last_frame), right=True))])
    low = torch.cat([low, end_low - BAND_MARGIN]).clamp(0, last_id)
    high = torch.cat([high, torch.tensor([last_id])]).clamp(0, last_id)
    return low, high


def make_examples(utterances: list[Utterance], frames_per_step: int) -> list[Example]:
    """One example per utterance, in order; `previous` links a paragraph's sentences
    (an utterance with part > 0 follows the one before it in the list)."""
    examples = []
    for index, utterance in enumerate(utterances):
        latents = group_frames(utterance.latents, frames_per_step)
        low, high = step_bands(utterance.durations, frames_per_step, latents.shape[0])
        features = id_features(utterance.latents, utterance.durations)
        previous = index - 1 if utterance.part > 0 else -1
        examples.append(Example(utterance.ids, latents, low, high, features,
                                utterance.speed, previous))
    return examples


class _Row(NamedTuple):
    tokens: torch.Tensor
    is_text: torch.Tensor
    latents_in: torch.Tensor
    targets: torch.Tensor
    trained: torch.Tensor  # positions of the trained clause
    eos: torch.Tensor
    band_low: torch.Tensor
    band_high: torch.Tensor
    features: torch.Tensor
    log_speed: torch.Tensor


def _row(example: Example, stats: LatentStats, start: int) -> _Row:
    """One clause's positions; bands are sequence indices (the clause starts at `start`)."""
    num_ids, steps = len(example.tokens), len(example.latents)
    latents = stats.normalize(example.latents)  # [S, D]
    nan = torch.full((1, latents.shape[1]), float("nan"))
    zeros = torch.zeros(num_ids, latents.shape[1])
    eos = torch.zeros(num_ids + steps + 1)
    eos[-1] = 1.0
    return _Row(
        tokens=torch.cat([example.tokens, torch.zeros(steps + 1, dtype=torch.long)]),
        is_text=torch.arange(num_ids + steps + 1) < num_ids,
        latents_in=torch.cat([zeros, nan, latents]),
        targets=torch.cat([zeros, latents, latents[:1] * 0]),
        trained=torch.ones(num_ids + steps + 1, dtype=torch.bool),
        eos=eos,
        band_low=torch.cat([torch.zeros(num_ids, dtype=torch.long), example.band_low + start]),
        band_high=torch.cat([torch.full((num_ids,), -1), example.band_high + start]),
        features=torch.cat([example.features.float(),
                            torch.zeros(steps + 1, example.features.shape[1])]),
        log_speed=torch.full((num_ids + steps + 1,), math.log(example.speed)),
    )


def _join(prefix: _Row, main: _Row, cut: int) -> _Row:
    untrained = prefix._replace(trained=torch.zeros_like(prefix.trained),
                                band_high=torch.full_like(prefix.band_high, -1))
    joined = _Row(*(torch.cat([a, b])[cut:] for a, b in zip(untrained, main)))
    high = joined.band_high
    return joined._replace(band_low=joined.band_low - cut,
                           band_high=torch.where(high >= 0, high - cut, high))


def make_batch(examples: list[Example], stats: LatentStats, rng: random.Random,
               prefixes: list[tuple[Example, int] | None] | None = None) -> Batch:
    """Right-padded teacher-forcing batch; row i may be preceded by the last `keep`
    positions of another clause, prefixes[i] = (clause, keep)."""
    rows = []
    for index, example in enumerate(examples):
        prefix = prefixes[index] if prefixes else None
        if prefix is None:
            row = _row(example, stats, 0)
        else:
            clause, keep = prefix
            row = _join(_row(clause, stats, 0), _row(example, stats, clause.length),
                        cut=clause.length - keep)
        rows.append(row)
    width = max(len(row.tokens) for row in rows)

    def pad(values: list[torch.Tensor], fill: float) -> torch.Tensor:
        return torch.stack([torch.cat([v, v.new_full((width - len(v),) + v.shape[1:], fill)])
                            for v in values])

    trained_latent = [row.trained & ~row.is_text for row in rows]
    has_target = pad([t & (row.eos == 0) for t, row in zip(trained_latent, rows)], False)
    offsets = torch.tensor([rng.randrange(MAX_POSITION_OFFSET) for _ in rows])
    return Batch(
        tokens=pad([row.tokens for row in rows], 0),
        is_text=pad([row.is_text for row in rows], False),
        latents_in=pad([row.latents_in for row in rows], 0.0),
        positions=offsets[:, None] + torch.arange(width)[None],
        targets=pad([row.targets for row in rows], 0.0),
        has_target=has_target,
        eos_targets=pad([row.eos for row in rows], 0.0),
        has_eos=pad(trained_latent, False),
        band_low=pad([row.band_low for row in rows], 0),
        band_high=pad([torch.where(t, row.band_high, -1)
                       for t, row in zip(trained_latent, rows)], -1),
        features=pad([row.features for row in rows], 0.0),
        log_speed=pad([row.log_speed for row in rows], 0.0),
    )


def fresh_batch(examples: list[Example], stats: LatentStats) -> Batch:
    """One row per example, each in a fresh context (positions from 0), as the engine
    generates a clause: the layout for scoring clauses the student generated."""
    batch = make_batch(examples, stats, random.Random(0))
    return batch._replace(positions=batch.positions - batch.positions[:, :1])


def plan_batches(lengths: list[int], max_positions: int, rng: random.Random) -> list[list[int]]:
    """Indices grouped into batches of similar lengths, at most `max_positions` padded
    positions each (a longer sequence gets a batch of its own); the order is shuffled."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        if current and (len(current) + 1) * lengths[index] > max_positions:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches
