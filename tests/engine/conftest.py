"""Engine fixtures: a small random-weight Pocket model (fast; its audio is noise, but every
stage runs for real) and helpers to run an engine to completion."""

from __future__ import annotations

import pytest
import torch

from polyvox.config import EngineConfig
from polyvox.engine.engine import Engine
from polyvox.models.pocket.loader import load_pocket
from polyvox.models.pocket.model import GenerationParams

TEXTS = [
    "Hello world.",
    "The quick brown fox jumps over the lazy dog.",
    "Short one!",
    "Another sentence, with a comma, and more words here.",
    "Is this a question? Yes, it is one.",
    "Numbers like three and four are words here.",
    "A long sentence goes on and on, with many words, to make the clause run for a while.",
    "Good morning.",
]


@pytest.fixture(scope="session")
def model():
    return load_pocket("english_2m", seed=0)


@pytest.fixture(scope="session")
def voice(model):
    """A voice prefix from a synthetic recording (Mimi encoder + prefill)."""
    t = torch.arange(24000) / 24000
    audio = 0.4 * torch.sin(2 * torch.pi * (150 + 100 * t) * t)
    return model.voice_from_audio(audio, 24000, name="chirp")


@pytest.fixture(scope="session")
def family():
    """The Piper joe voice (the default model), loaded once for the engine's Piper tests."""
    pytest.importorskip("piper")
    from polyvox.models.registry import load_model

    return load_model("piper/joe")


def make_engine(model, voice=None, **overrides) -> Engine:
    config = EngineConfig(**({"kv_memory_mb": 32} | overrides))
    engine = Engine(model, config)
    empty = model.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    if voice is not None:
        engine.register_voice("chirp", voice.k, voice.v)
    return engine


def params(seed: int, **kw) -> GenerationParams:
    return GenerationParams(**({"temperature": 0.5, "seed": seed} | kw))


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))
