"""Rewards for post-training joe-ar (issue 25; docs/distill.md): one score per spoken
clause, made of terms that are each logged, so a run shows which one moved.

    intelligibility  1 - WER (capped at 1) of whisper tiny.en's transcript against the
                     clause's normalized text: the same judge and scoring as polyvox.asr
    pace             1 inside ±`tolerance` of the target duration (the teacher's duration
                     for that text at speed 1, divided by the requested speed), falling
                     off exponentially outside it
Guards against the known shortcuts (a policy optimized on ASR error alone drifts to
monotone, stretched or artifact-laden audio that whisper still reads):
    bounds           0 outside [0.5, 2] x the target duration (a loop, a truncation), else 1
    silence          1 while no pause inside the clause is longer than `max_pause`
                     seconds, falling linearly to 0 at twice that
    repetition       1 minus the share of the transcript's word trigrams heard more often
                     than the text has them (a clause or phrase spoken twice)
    clipping         1 minus 10x the share of samples at full scale
    spectrum         1 while the mean spectral flatness (noise ~0.5+, speech ~0.05-0.3)
                     stays under `max_flatness`, falling linearly to 0 at 1.5x that

The total is the weighted sum over the weights' total (1 is perfect). Everything here is
a pure function of audio and text; the KL term against the reference model belongs to
the training objective, not to the reward.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from polyvox.asr.wer import normalize_for_wer, utterance_errors


@dataclass(frozen=True)
class RewardSettings:
    tolerance: float = 0.07  # pace band: ±7% (the target)
    pace_width: float = 0.15  # log-duration distance past the band at which pace is 1/e
    max_pause: float = 0.6  # seconds of silence inside a clause before it costs
    silence_db: float = -40.0  # below the clause's peak frame energy: silence
    max_flatness: float = 0.45


@dataclass(frozen=True)
class RewardWeights:
    intelligibility: float = 1.0
    pace: float = 0.5
    bounds: float = 1.0
    silence: float = 0.25
    repetition: float = 0.5
    clipping: float = 0.25
    spectrum: float = 0.25


@dataclass(frozen=True)
class ClauseRewards:
    """One clause's terms (each in [0, 1], 1 best) and what they were computed from."""

    intelligibility: float
    pace: float
    bounds: float
    silence: float
    repetition: float
    clipping: float
    spectrum: float
    wer: float
    seconds: float
    target_seconds: float

    def total(self, weights: RewardWeights = RewardWeights()) -> float:
        terms = asdict(weights)
        return sum(getattr(self, name) * weight for name, weight in terms.items()) \
            / sum(terms.values())

    def as_log(self, weights: RewardWeights = RewardWeights()) -> dict[str, float]:
        return {**{name: round(value, 5) for name, value in asdict(self).items()},
                "total": round(self.total(weights), 5)}


def pace_score(seconds: float, target: float, tolerance: float = 0.07,
               width: float = 0.15) -> float:
    """1 within ±tolerance of `target`, exp(-excess / width) past it, where excess is the
    log-duration distance beyond the band."""
    if seconds <= 0 or target <= 0:
        return 0.0
    excess = abs(math.log(seconds / target)) - math.log(1 + tolerance)
    return 1.0 if excess <= 0 else math.exp(-excess / width)


def frame_levels(audio: np.ndarray, sample_rate: int, frame_seconds: float = 0.02
                 ) -> np.ndarray:
    """Energy of each frame in dB (relative to full scale)."""
    size = max(1, int(frame_seconds * sample_rate))
    count = len(audio) // size
    if count == 0:
        return np.zeros(0)
    frames = audio[: count * size].reshape(count, size).astype(np.float64)
    return 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)


def longest_pause(audio: np.ndarray, sample_rate: int, silence_db: float = -40.0,
                  frame_seconds: float = 0.02) -> float:
    """The longest run of silent frames between the first and the last sounding one, in
    seconds (the clause's leading and trailing silence do not count)."""
    levels = frame_levels(audio, sample_rate, frame_seconds)
    if not len(levels):
        return 0.0
    loud = levels > levels.max() + silence_db
    sounding = np.flatnonzero(loud)
    longest = run = 0
    for is_loud in loud[sounding[0]: sounding[-1] + 1]:
        run = 0 if is_loud else run + 1
        longest = max(longest, run)
    return longest * frame_seconds


def repeated_trigrams(heard: Sequence[str], text: Sequence[str]) -> float:
    """The share of the heard trigrams that occur more often than in the text."""
    def trigrams(words: Sequence[str]) -> Counter[tuple[str, ...]]:
        return Counter(tuple(words[i: i + 3]) for i in range(len(words) - 2))

    heard_counts, text_counts = trigrams(heard), trigrams(text)
    total = sum(heard_counts.values())
    if not total:
        return 0.0
    extra = sum(max(0, count - text_counts[gram]) for gram, count in heard_counts.items()
                if count > 1)
    return extra / total


def clipped_share(audio: np.ndarray, level: float = 0.99) -> float:
    return float(np.mean(np.abs(audio) >= level)) if len(audio) else 0.0


def spectral_flatness(audio: np.ndarray, frame: int = 512) -> float:
    """Mean over sounding frames of geometric / arithmetic mean of the power spectrum."""
    count = len(audio) // frame
    if count == 0:
        return 0.0
    frames = audio[: count * frame].reshape(count, frame).astype(np.float64)
    energy = np.mean(frames**2, axis=1)
    frames = frames[energy > energy.max() * 1e-3] * np.hanning(frame)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2 + 1e-12
    flatness = np.exp(np.mean(np.log(power), axis=1)) / np.mean(power, axis=1)
    return float(np.mean(flatness))


def _ramp(value: float, start: float, end: float) -> float:
    """1 up to `start`, 0 from `end`, linear between."""
    if value <= start:
        return 1.0
    return max(0.0, 1.0 - (value - start) / (end - start))


def clause_rewards(audio: np.ndarray, sample_rate: int, transcript: str, text: str,
                   target_seconds: float, settings: RewardSettings = RewardSettings()
                   ) -> ClauseRewards:
    """The reward terms of one spoken clause (`audio` float32 mono; `text` the clause as
    the model was given it, normalized; `transcript` whisper's)."""
    seconds = len(audio) / sample_rate
    wer = utterance_errors(text, transcript).wer
    ratio = seconds / target_seconds if target_seconds > 0 else 0.0
    pause = longest_pause(audio, sample_rate, settings.silence_db)
    return ClauseRewards(
        intelligibility=max(0.0, 1.0 - min(1.0, wer)),
        pace=pace_score(seconds, target_seconds, settings.tolerance, settings.pace_width),
        bounds=1.0 if 0.5 <= ratio <= 2.0 else 0.0,
        silence=_ramp(pause, settings.max_pause, 2 * settings.max_pause),
        repetition=1.0 - repeated_trigrams(normalize_for_wer(transcript),
                                           normalize_for_wer(text)),
        clipping=max(0.0, 1.0 - 10 * clipped_share(audio)),
        spectrum=_ramp(spectral_flatness(audio), settings.max_flatness,
                       1.5 * settings.max_flatness),
        wer=wer, seconds=seconds, target_seconds=target_seconds)
