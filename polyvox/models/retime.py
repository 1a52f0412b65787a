"""Retiming a pointer student's frames to a speed (docs/distill.md, session 31).

A pointer student (polyvox.models.joe_ar) speaks in runs: every frame of a phoneme id is
a copy of the teacher's encoding of that id. Spoken at speed 1 and then retimed, each run
of d frames ends `scale x d^exponent` frames (rounded, summed over the runs so far) after
the clause's start, and at least one frame after the run before it. With an exponent
under 1, long runs (vowels, pauses) give up more of their length than short ones
(consonants), as a speaker who talks faster does; `scale` makes the whole about 1 / speed
as long (`Retiming.for_speed`, from the teacher's run lengths).

`retime_latents` is the plain reference (a whole clause at once); `Retimer` does the same
as the frames come, one AR step's latent at a time, holding back the run in progress
(its length is known once the next id starts or the clause ends). Both emit whole
latents of `group` frames: a clause's last latent is completed with copies of its last
frame.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Retiming:
    """How a clause's runs are retimed (the module docstring): latents of `group` frames
    of `channels` values each, frame-major."""

    scale: float
    exponent: float
    group: int
    channels: int

    def __post_init__(self) -> None:
        if not (self.scale > 0 and self.exponent > 0 and self.group >= 1
                and self.channels >= 1):
            raise ValueError(f"not a retiming: {self}")

    @classmethod
    def for_speed(cls, speed: float, exponent: float, run_counts: Sequence[float],
                  group: int, channels: int) -> Retiming:
        """The retiming that makes speech of the given run lengths `1 / speed` as long on
        average: `run_counts[k]` is how often a run of k + 1 frames occurs."""
        if not speed > 0:
            raise ValueError(f"speed must be positive, not {speed}")
        frames = sum(count * (k + 1) for k, count in enumerate(run_counts))
        powered = sum(count * (k + 1) ** exponent for k, count in enumerate(run_counts))
        if not frames > 0:
            raise ValueError("run_counts holds no run")
        return cls(frames / powered / speed, exponent, group, channels)

    def add_run(self, end: int, target: float, length: int) -> tuple[int, float]:
        """One more run of `length` frames after retimed runs that end at frame `end`
        (unrounded: `target`): where the runs end now, rounded and unrounded."""
        target += self.scale * length ** self.exponent
        return max(end + 1, round(target)), target


def run_starts(frames: torch.Tensor) -> list[int]:
    """Where each run of equal frames [T, C] starts, and T after the last."""
    change = torch.ones(len(frames), dtype=torch.bool)
    change[1:] = (frames[1:] != frames[:-1]).any(1)
    return change.nonzero()[:, 0].tolist() + [len(frames)]


def retime_latents(latents: torch.Tensor, retiming: Retiming) -> torch.Tensor:
    """A whole clause's latents [S, group x channels] retimed: [S', group x channels]."""
    frames = latents.reshape(-1, retiming.channels)
    if not len(frames):
        return latents.reshape(0, retiming.group * retiming.channels)
    out, end, target = [], 0, 0.0
    for start, stop in itertools.pairwise(run_starts(frames)):
        new_end, target = retiming.add_run(end, target, stop - start)
        out += [frames[start]] * (new_end - end)
        end = new_end
    out += [out[-1]] * (-len(out) % retiming.group)
    return torch.stack(out).reshape(-1, retiming.group * retiming.channels)


class Retimer:
    """`retime_latents` as the latents come: `push` one AR step's latent, get the retimed
    latents complete so far; `finish` at the clause's end gives the rest."""

    def __init__(self, retiming: Retiming) -> None:
        self.retiming = retiming
        self._run: torch.Tensor | None = None  # the frame of the run in progress
        self._length = 0  # its frames so far
        self._end, self._target = 0, 0.0  # retimed frames emitted, and where runs end
        self._frames: list[torch.Tensor] = []  # emitted frames not yet in a whole latent

    @property
    def held_frames(self) -> int:
        """Frames taken in but not yet given out (the run in progress and a part latent)."""
        return self._length + len(self._frames)

    def push(self, latent: torch.Tensor) -> list[torch.Tensor]:
        frames = latent.reshape(-1, self.retiming.channels)
        # NOTE: one comparison for the whole latent (one device sync where it lives on a GPU)
        before = self._run if self._run is not None else torch.full_like(frames[0], math.nan)
        same = (frames == torch.cat([before[None], frames[:-1]])).all(1).tolist()
        for frame, continues in zip(frames, same, strict=True):
            if continues:
                self._length += 1
                continue
            self._close_run()
            self._run, self._length = frame, 1
        return self._whole_latents()

    def finish(self) -> list[torch.Tensor]:
        """The clause ended: the run in progress and the last (completed) latent."""
        self._close_run()
        if self._frames:
            self._frames += [self._frames[-1]] * (-len(self._frames) % self.retiming.group)
        latents = self._whole_latents()
        self._end, self._target = 0, 0.0
        return latents

    def _close_run(self) -> None:
        if self._run is None:
            return
        new_end, self._target = self.retiming.add_run(self._end, self._target, self._length)
        self._frames += [self._run] * (new_end - self._end)
        self._end = new_end
        self._run, self._length = None, 0

    def _whole_latents(self) -> list[torch.Tensor]:
        group = self.retiming.group
        count = len(self._frames) // group
        latents = [torch.cat(self._frames[i * group: (i + 1) * group]) for i in range(count)]
        del self._frames[: count * group]
        return latents

