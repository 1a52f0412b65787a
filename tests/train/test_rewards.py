"""The post-training reward terms: each one catches what it is for, on synthetic signals
and on the teacher's real speech."""

from __future__ import annotations

import math

import numpy as np
import pytest

from polyvox.train.rewards import (
    RewardWeights,
    clause_rewards,
    longest_pause,
    pace_score,
    repeated_trigrams,
    spectral_flatness,
)

RATE = 22050


def _tone(seconds: float, frequency: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), dtype=np.float32)


def test_pace_is_full_inside_the_band_and_falls_off_evenly_outside() -> None:
    assert pace_score(2.0, 2.0) == 1.0
    assert pace_score(2.0 * 1.069, 2.0) == 1.0 and pace_score(2.0 / 1.069, 2.0) == 1.0
    past = 1.07 * math.exp(0.15)  # one width past the band: 1/e
    assert pace_score(2.0 * past, 2.0) == pytest.approx(math.exp(-1))
    assert pace_score(2.0 / past, 2.0) == pytest.approx(math.exp(-1))  # log-symmetric
    assert pace_score(0.0, 2.0) == 0.0


def test_only_pauses_inside_the_clause_count() -> None:
    audio = np.concatenate([_silence(1.0), _tone(0.5), _silence(0.8), _tone(0.5),
                            _silence(2.0)])
    assert longest_pause(audio, RATE) == pytest.approx(0.8, abs=0.041)
    assert longest_pause(_tone(1.0), RATE) == 0.0


def test_a_phrase_heard_twice_is_a_repetition() -> None:
    text = "the parcel goes to denver tomorrow".split()
    assert repeated_trigrams(text, text) == 0.0
    assert repeated_trigrams(text + text[:4], text) > 0.2
    song = "la la la la".split()
    assert repeated_trigrams(song, song) == 0.0  # as often as the text has it


def test_noise_is_flat_and_speech_is_not(teacher) -> None:
    speech = teacher.synthesize("Your parcel arrives on Tuesday morning.").numpy()
    noise = np.random.default_rng(0).normal(0, 0.1, len(speech)).astype(np.float32)
    assert spectral_flatness(speech) < 0.3 < 0.45 < spectral_flatness(noise)


def test_the_teachers_own_speech_scores_full_and_a_loop_does_not(teacher) -> None:
    text = "Your parcel arrives on Tuesday morning."
    speech = teacher.synthesize(text).numpy()
    seconds = len(speech) / RATE
    good = clause_rewards(speech, RATE, text, text, seconds)
    for name in ("intelligibility", "pace", "bounds", "silence", "repetition", "clipping",
                 "spectrum"):
        assert getattr(good, name) == 1.0, (name, good)
    assert good.total() == 1.0
    looped = clause_rewards(np.concatenate([speech] * 3), RATE, f"{text} {text} {text}",
                            text, seconds)
    assert looped.bounds == 0.0 and looped.repetition < 0.6 and looped.pace < 0.01
    assert looped.intelligibility == 0.0  # WER 2: capped
    assert looped.total() < 0.5
    clipped = clause_rewards(np.clip(speech * 50, -1, 1), RATE, text, text, seconds)
    assert clipped.clipping < 0.5 and clipped.total() < good.total()
    log = looped.as_log(RewardWeights())
    assert set(log) >= {"intelligibility", "pace", "total", "wer", "seconds"}
