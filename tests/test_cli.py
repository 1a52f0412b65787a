"""The command line, run as a real process."""

from __future__ import annotations

import subprocess
import sys
import wave


def _polyvox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polyvox.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_say_writes_a_wav_and_warns_about_random_weights(tmp_path) -> None:
    out = tmp_path / "hello.wav"
    result = _polyvox("say", "Hello there.", "-o", str(out), "--model", "pocket/english_2m")
    assert result.returncode == 0, result.stderr
    assert "noise" in result.stderr
    assert str(out) in result.stdout
    with wave.open(str(out)) as wav:
        assert wav.getframerate() == 24000
        assert wav.getnframes() > 1920


def test_the_default_voice_is_our_own_trained_ar_voice(tmp_path) -> None:
    out = tmp_path / "default.wav"
    result = _polyvox("say", "Good morning. Your table is ready.", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "noise" not in result.stderr  # shipped weights, not random ones
    with wave.open(str(out)) as wav:
        assert wav.getframerate() == 22050  # the Piper teacher's rate
        assert wav.getnframes() > 22050  # two clauses of speech: well over a second


def test_unknown_model_is_a_clear_error(tmp_path) -> None:
    result = _polyvox("say", "Hi.", "-o", str(tmp_path / "x.wav"), "--model", "pocket/nope")
    assert result.returncode == 2
    assert "unknown Pocket TTS config" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_voice_file_is_a_clear_error(tmp_path) -> None:
    result = _polyvox("say", "Hi.", "-o", str(tmp_path / "x.wav"), "--model",
                      "pocket/english_2m", "--voice", str(tmp_path / "none.wav"))
    assert result.returncode == 2
    assert "voice file not found" in result.stderr
