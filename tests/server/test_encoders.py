"""Wire formats and resampling, without a server: encoded chunk by chunk, every format
decodes to the audio that went in, at the rate asked for."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile
from scipy.signal import resample_poly

from polyvox.server.encoders import Encoder, available_formats, format_error, output_rate
from polyvox.server.resample import StreamingResampler


def _chunks(samples: np.ndarray, seed: int = 0) -> list[np.ndarray]:
    sizes = np.random.default_rng(seed).integers(1, 4000, size=len(samples))
    bounds = np.cumsum(sizes)
    return np.split(samples, bounds[bounds < len(samples)])


@pytest.mark.parametrize(("source", "target"), [(24000, 22050), (22050, 24000),
                                                  (22050, 48000), (24000, 16000)])
def test_streaming_resampler_equals_resampling_whole(source: int, target: int) -> None:
    signal = np.random.default_rng(1).standard_normal(30011).astype(np.float32) * 0.3
    resampler = StreamingResampler(source, target)
    pieces = [resampler.process(chunk) for chunk in _chunks(signal)] + [resampler.finish()]
    divisor = np.gcd(source, target)
    whole = resample_poly(signal.astype(np.float64), target // divisor, source // divisor)
    streamed = np.concatenate(pieces)
    assert len(streamed) == len(whole)
    assert np.abs(streamed - whole).max() < 1e-6


def test_formats_and_rates() -> None:
    assert {"pcm", "wav"} <= set(available_formats())
    assert format_error("pcm") is None
    assert "unsupported response format 'aac'" in format_error("aac")
    assert output_rate("pcm", 22050, None) == 24000  # OpenAI's pcm rate
    assert output_rate("wav", 22050, None) == 22050
    assert output_rate("opus", 22050, None) == 24000  # the next rate Opus takes
    assert output_rate("mp3", 24000, 16000) == 16000


@pytest.mark.parametrize("name", ["wav", "mp3", "opus", "flac"])
@pytest.mark.parametrize("model_rate", [24000, 22050])
def test_streamed_encodings_decode(name: str, model_rate: int) -> None:
    if name not in available_formats():
        pytest.skip(f"this libsndfile cannot write {name}")
    time = np.arange(2 * model_rate) / model_rate
    signal = (0.4 * np.sin(2 * np.pi * 330 * time)).astype(np.float32)
    encoder = Encoder(name, model_rate)
    pieces = [encoder.encode(chunk) for chunk in _chunks(signal, seed=2)] + [encoder.finish()]
    if name != "flac":  # FLAC goes out whole at the end (its header holds the length)
        assert sum(len(p) for p in pieces[: len(pieces) // 2]) > 0, "nothing streamed early"
    audio, rate = soundfile.read(io.BytesIO(b"".join(pieces)), dtype="float32")
    assert rate == encoder.sample_rate
    expected = len(signal) * rate / model_rate
    assert expected <= len(audio) <= expected + 0.1 * rate  # codecs pad a little
    if name in ("wav", "flac"):  # lossless: the 16-bit samples themselves
        assert np.abs(audio[: len(signal)] - signal).max() < 1e-3
