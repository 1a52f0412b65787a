"""PCM encoding: float samples in [-1, 1] to 16-bit PCM and WAV files."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np
import torch


def to_pcm16(samples: torch.Tensor | np.ndarray) -> bytes:
    """Float samples [N] -> little-endian int16 bytes (clipped to [-1, 1])."""
    array = samples.detach().cpu().numpy() if isinstance(samples, torch.Tensor) else samples
    return (np.clip(array, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def wav_bytes(samples: torch.Tensor | np.ndarray, sample_rate: int) -> bytes:
    """A complete mono 16-bit WAV file in memory."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(sample_rate)
        writer.writeframes(to_pcm16(samples))
    return buffer.getvalue()


def write_wav(path: str | Path, samples: torch.Tensor | np.ndarray, sample_rate: int) -> None:
    Path(path).write_bytes(wav_bytes(samples, sample_rate))
