"""Speech without a server, on the server's path: `polyvox say`, `polyvox eval` and Python.

The text goes through the engine exactly as a server request does: cleaned, normalized
(unless asked not to), split into clauses, chained as the family prefers, and decoded in
streaming chunks. So the same model, voice, seed, temperature and speed give the same
samples here as from `POST /v1/audio/speech`. The families' own one-request `synthesize`
methods are reference code for the parity tests, not a second way to speak.

    from polyvox.speak import Speaker
    speaker = Speaker.load("piper/joe")
    audio = speaker.speak("Your total is $12.50.", seed=1)   # float32 [N] at speaker.sample_rate
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from polyvox.config import EngineConfig, device_settings
from polyvox.engine.engine import EngineError
from polyvox.models.registry import DEFAULT_MODEL
from polyvox.serving import DEFAULT_VOICE, Served, load_served


# The step clock of a repeatable Speaker: 10 ms per engine step, about what one stream's
# step takes on 2 CPU cores (an AR step of joe-ar is 46 ms of audio, of pocket/english 80).
REPEATABLE_STEP_SECONDS = 0.01


class Speaker:
    """One loaded model and its engine, speaking one text at a time, synchronously.
    Not for use while the served model's AsyncEngine runs (that is the server's job)."""

    def __init__(self, served: Served) -> None:
        self.served = served

    @classmethod
    def load(cls, model: str = DEFAULT_MODEL, weights: str | None = None,
             tokenizer: str | None = None, device: str = "cpu", precision: str = "float32",
             seed: int = 0, chaining: str | None = None, repeatable: bool = False,
             context_window: int | None = None) -> Speaker:
        """`seed` seeds random weights (models without a checkpoint), as in `polyvox serve`;
        `chaining`, `context_window`: the engine's (EngineConfig; None: the family's
        preference).
        `repeatable`: the engine plans on a step clock (Engine.run_on_a_step_clock), so the
        same text, seed and settings give the same samples on every run, however busy the
        machine (the eval judge's choice; the audio differs from the wall-clock engine's
        only at float rounding)."""
        config = EngineConfig(**device_settings(device, "auto", "auto"), chaining=chaining,
                              context_window=context_window)
        speaker = cls(load_served(model, weights=weights, tokenizer=tokenizer, config=config,
                                  device=device, seed=seed, precision=precision))
        if repeatable:
            speaker.served.engine.run_on_a_step_clock(REPEATABLE_STEP_SECONDS)
        return speaker

    @property
    def sample_rate(self) -> int:
        return self.served.sample_rate

    @property
    def is_random(self) -> bool:
        """The model runs on random weights: its audio is noise."""
        return bool(self.served.family.is_random)

    def add_voice(self, path: str | Path) -> str:
        """Register a voice from a reference recording or a voice-state .safetensors file
        (families that clone voices); returns its name for `speak(voice=...)`."""
        from polyvox.models.pocket.voice import read_audio

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"voice file not found: {path}")
        if not self.served.supports_voice_cloning:
            raise ValueError(f"{self.served.name} has a single voice: drop --voice")
        if path.suffix == ".safetensors":
            prefix = self.served.voice_from_file(path)
        else:
            audio, sample_rate = read_audio(path)
            prefix = self.served.voice_from_audio(audio, sample_rate, name=path.stem)
        name = re.sub(r"[^A-Za-z0-9_-]", "-", path.stem)[:56] or "voice"
        engine = self.served.engine
        while name in engine.voices:
            name += "-x"
        engine.register_voice(name, prefix.k, prefix.v)
        return name

    def speak(self, text: str, voice: str = DEFAULT_VOICE, seed: int = 0,
              temperature: float | None = None, speed: float = 1.0,
              normalize: bool = True) -> torch.Tensor:
        """The whole utterance, float32 [N] at `sample_rate`. ValueError for bad options or
        empty text; EngineError when generation fails."""
        if self.served.runtime.is_running:
            raise RuntimeError("the engine is serving: speak through its AsyncEngine")
        params = self.served.params(seed=seed, temperature=temperature, speed=speed)
        engine = self.served.engine
        try:
            request = engine.add_request(text, voice, params, normalize=normalize)
        except EngineError as error:  # refused before any work: a caller's mistake
            raise ValueError(str(error)) from None
        parts: list[torch.Tensor] = []
        while True:
            for chunk in engine.step():
                if chunk.request_id != request.request_id:
                    continue
                if chunk.error:
                    raise EngineError(chunk.error)
                if chunk.is_last:
                    return torch.cat(parts).float().cpu() if parts else torch.zeros(0)
                parts.append(chunk.samples)


def synthesize(text: str, model: str = DEFAULT_MODEL, **options: Any) -> tuple[torch.Tensor, int]:
    """Load `model` and speak `text` once: (audio [N], sample_rate). Options are those of
    Speaker.load and Speaker.speak; load a Speaker yourself to speak many texts."""
    load_keys = {"weights", "tokenizer", "device", "precision"}
    speaker = Speaker.load(model, **{k: v for k, v in options.items() if k in load_keys})
    audio = speaker.speak(text, **{k: v for k, v in options.items() if k not in load_keys})
    return audio, speaker.sample_rate
