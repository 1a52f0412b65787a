"""PiperModel end to end: equal to piper-tts' own synthesis at noise 0."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

piper = pytest.importorskip("piper")
pytest.importorskip("onnxruntime")

from polyvox.models.piper.model import PiperModel
from polyvox.models.piper.voice_files import VoiceFileError, VoiceFiles

RelativeError = Callable[[torch.Tensor, torch.Tensor], float]

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world. How are you today?",  # two sentences, synthesized one by one
    "Streaming speech, one chunk at a time; it should sound the same!",
]


def test_noise_free_audio_equals_piper_tts(
    joe_model: PiperModel, joe_files: VoiceFiles, relative_error: RelativeError
) -> None:
    from piper.config import SynthesisConfig

    voice = piper.PiperVoice.load(joe_files.onnx_path)
    # piper-tts peak-normalizes each sentence by default; compare the raw model output.
    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, normalize_audio=False)
    for text in SENTENCES:
        chunks = [chunk.audio_float_array for chunk in voice.synthesize(text, config)]
        expected = torch.from_numpy(np.concatenate(chunks))
        audio = joe_model.synthesize(text, seed=123, noise=False)
        error = relative_error(audio, expected)
        print(f"polyvox vs piper-tts at noise 0, {text[:20]!r}: {error:.2e}")
        assert error <= 1e-4
    assert joe_model.sample_rate == 22050
    assert joe_model.audio.samples_per_frame == 256


def test_noise_changes_with_seed_only(joe_model: PiperModel) -> None:
    text = "Seeds make noise repeatable."
    a, b = joe_model.synthesize(text, seed=1), joe_model.synthesize(text, seed=1)
    c = joe_model.synthesize(text, seed=2)
    assert torch.equal(a, b) and not torch.equal(a[:4096], c[:4096])
    assert a.dtype == torch.float32 and a.abs().max() <= 1.0


def test_speed_and_empty_text(joe_model: PiperModel) -> None:
    text = "Faster speech is shorter."
    normal = joe_model.synthesize(text, noise=False)
    fast = joe_model.synthesize(text, speed=1.5, noise=False)
    assert len(fast) < 0.8 * len(normal)
    assert joe_model.synthesize("").shape == (0,)
    assert list(joe_model.stream("")) == []
    with pytest.raises(ValueError, match="speed"):
        joe_model.synthesize(text, speed=0.0)


def test_load_without_json_names_the_missing_file(tmp_path: Path, joe_files: VoiceFiles) -> None:
    onnx_path = tmp_path / "copied.onnx"
    onnx_path.symlink_to(joe_files.onnx_path)
    with pytest.raises(VoiceFileError, match=r"copied\.onnx\.json does not exist"):
        PiperModel.load(onnx_path)
