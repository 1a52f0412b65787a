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

The other way (docs/distill.md, sessions 32-33): the clause spoken at speed 1 goes through
the teacher's flow first, and its output z (what HiFi-GAN reads) is resampled linearly in
time: output frame j reads z at source time (j + 0.5) x speed - 0.5. The transitions
between ids keep the flow's full time resolution, where retiming drops whole frames of a
run. `resample_z_latents` is the plain reference, `ZResampler` the stage (it holds back
the flow's context, `ZResampling.context` frames, plus at most a block); their latents
are z, so the decoder skips its flow for them (`decode_options`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

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

    def stage(self) -> Retimer:
        """The engine's stage for one clause."""
        return Retimer(self)

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


class ClauseStage(Protocol):
    """What the engine keeps per clause between the AR step and the decoder: `push` one
    AR step's latent, get the latents complete so far; `finish` at the clause's end gives
    the rest. `decode_options`: what the family's decode is told about those latents;
    `decoder_lookahead`: the AR steps its decoder reads after a chunk of them (None: the
    family's traits.decoder_lookahead)."""

    decode_options: dict[str, bool]
    decoder_lookahead: int | None

    def push(self, latent: torch.Tensor) -> list[torch.Tensor]: ...

    def finish(self) -> list[torch.Tensor]: ...


class Retimer:
    """`retime_latents` as the latents come: `push` one AR step's latent, get the retimed
    latents complete so far; `finish` at the clause's end gives the rest."""

    decode_options: ClassVar[dict[str, bool]] = {}
    decoder_lookahead: ClassVar[int | None] = None

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
        return _whole(self._frames, self.retiming.group)


@dataclass(frozen=True)
class ZResampling:
    """How a clause spoken at speed 1 becomes `speed` by resampling z (the module
    docstring). `frames_of`: one AR step's latent -> its prior frames [group, channels];
    `flow`: prior frames [channels, T] -> z [channels, T], which is exact `context`
    frames in from a cut edge (a clause's own ends are zero-padded in both)."""

    speed: float
    group: int
    channels: int
    frames_of: Callable[[torch.Tensor], torch.Tensor] = field(compare=False)
    flow: Callable[[torch.Tensor], torch.Tensor] = field(compare=False)
    context: int = 32
    # Source frames the streaming flow finishes per call, at least: few for a clause's
    # first call (its first audio waits for it), more after (each call also runs the
    # flow on `context` frames either side)
    first_block: int = 16
    block: int = 64
    decoder_lookahead: int | None = None  # the decoder's, reading z (ClauseStage)

    def __post_init__(self) -> None:
        if not (self.speed > 0 and self.group >= 1 and self.channels >= 1
                and self.context >= 0 and self.first_block >= 1 and self.block >= 1):
            raise ValueError(f"not a z resampling: {self}")

    def stage(self) -> ZResampler:
        """The engine's stage for one clause."""
        return ZResampler(self)

    def source_time(self, index: int, frames: int | None = None) -> float:
        """Where output frame `index` reads z, in source frames (clamped to the clause's
        `frames` once they are known)."""
        time = (index + 0.5) * self.speed - 0.5
        return max(0.0, time if frames is None else min(time, frames - 1.0))

    def source_times(self, start: int, stop: int, frames: int | None = None) -> torch.Tensor:
        """`source_time` of output frames [start, stop), [stop - start] float64."""
        times = (torch.arange(start, stop, dtype=torch.float64) + 0.5) * self.speed - 0.5
        if frames is not None:
            times = times.clamp(max=frames - 1.0)
        return times.clamp(min=0.0)

    def output_frames(self, frames: int) -> int:
        """Output frames of a clause of `frames` source frames."""
        return max(1, round(frames / self.speed)) if frames else 0


def interpolate_frames(z: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
    """z [C, T] linearly interpolated at source times [n] within [0, T - 1]: [n, C]."""
    low = times.floor().long()
    weight = (times - low).to(z.dtype)
    high = (low + 1).clamp(max=z.shape[1] - 1)
    return (z[:, low] * (1 - weight) + z[:, high] * weight).T


def _whole(frames: list[torch.Tensor], group: int) -> list[torch.Tensor]:
    """Frames [C] grouped into whole latents [group x C]; the rest stays in `frames`."""
    count = len(frames) // group
    latents = [torch.cat(frames[i * group: (i + 1) * group]) for i in range(count)]
    del frames[: count * group]
    return latents


def resample_z_latents(latents: torch.Tensor, resampling: ZResampling) -> torch.Tensor:
    """The plain reference: a whole clause's AR latents [S, D] -> latents of its resampled
    z [S', group x channels], the last completed with copies of its last frame."""
    width = resampling.group * resampling.channels
    if not len(latents):
        return latents.new_zeros(0, width)
    prior = torch.cat([resampling.frames_of(latent) for latent in latents])  # [T, C]
    z = resampling.flow(prior.T)  # [C, T]
    frames = z.shape[1]
    times = resampling.source_times(0, resampling.output_frames(frames), frames)
    out = list(interpolate_frames(z, times))
    out += [out[-1]] * (-len(out) % resampling.group)
    return torch.stack(out).reshape(-1, width)


class ZResampler:
    """`resample_z_latents` as the latents come. The flow runs on the source frames in
    blocks once `context` frames after a block are known (and on the rest at the end);
    an output frame comes out once the z either side of its source time is final. What
    is kept is bounded: the source frames the flow still reads, the z still to be read."""

    decode_options: ClassVar[dict[str, bool]] = {"z": True}

    def __init__(self, resampling: ZResampling) -> None:
        self.resampling = resampling
        self.decoder_lookahead = resampling.decoder_lookahead
        self._reset()

    def _reset(self) -> None:
        self._prior: list[torch.Tensor] = []  # source frames [C] from _prior_first on
        self._prior_first = 0
        self._z = torch.zeros(self.resampling.channels, 0)  # final z from _z_first on
        self._z_first = 0
        self._next = 0  # the next output frame
        self._frames: list[torch.Tensor] = []  # output frames not yet in a whole latent

    @property
    def held_frames(self) -> int:
        """Source frames kept (the flow's context and what it has not run on yet)."""
        return len(self._prior)

    @property
    def _received(self) -> int:
        return self._prior_first + len(self._prior)

    @property
    def _done(self) -> int:
        return self._z_first + self._z.shape[1]

    def push(self, latent: torch.Tensor) -> list[torch.Tensor]:
        r = self.resampling
        self._prior.extend(r.frames_of(latent))
        block = r.block if self._done else r.first_block
        if self._received - self._done >= block + r.context:
            self._flow_to(self._received - r.context)
        stop = self._next
        while math.floor(r.source_time(stop)) + 1 < self._done:
            stop += 1
        self._emit(stop, None)
        return _whole(self._frames, r.group)

    def finish(self) -> list[torch.Tensor]:
        """The clause ended: the rest of its z, resampled; the last latent completed."""
        frames = self._received
        if frames:
            self._flow_to(frames)
            self._emit(self.resampling.output_frames(frames), frames)
            self._frames += [self._frames[-1]] * (-len(self._frames) % self.resampling.group)
        latents = _whole(self._frames, self.resampling.group)
        self._reset()
        return latents

    def _flow_to(self, stop: int) -> None:
        """Final z up to source frame `stop`: the flow over the frames not yet final,
        with `context` frames either side (fewer at the clause's ends); the source frames
        no later call reads are dropped."""
        r, done, base = self.resampling, self._done, self._prior_first
        first = max(0, done - r.context)
        last = min(self._received, stop + r.context)
        z = r.flow(torch.stack(self._prior[first - base: last - base]).T)
        self._z = torch.cat([self._z, z[:, done - first: stop - first]], 1)
        drop = max(0, stop - r.context - base)
        del self._prior[:drop]
        self._prior_first += drop

    def _emit(self, stop: int, frames: int | None) -> None:
        """Output frames up to `stop` (`frames`: the clause's, once it ended), read from z
        at once."""
        if stop <= self._next:
            return
        times = self.resampling.source_times(self._next, stop, frames) - self._z_first
        self._frames += list(interpolate_frames(self._z, times))
        self._next = stop
        # z before the next output frame's source time is never read again
        drop = min(math.floor(self.resampling.source_time(stop)) - self._z_first,
                   self._z.shape[1])
        if frames is None and drop > 0:
            self._z = self._z[:, drop:]
            self._z_first += drop
