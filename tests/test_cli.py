"""The command line, run as a real process."""

from __future__ import annotations

import subprocess
import sys
import wave


def _polyvox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polyvox.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def test_say_writes_a_wav_and_warns_about_random_weights(tmp_path) -> None:
    out = tmp_path / "hello.wav"
    result = _polyvox("say", "Hello there.", "-o", str(out), "--model", "pocket/english_2m")
    assert result.returncode == 0, result.stderr
    assert "noise" in result.stderr
    assert str(out) in result.stdout
    with wave.open(str(out)) as wav:
        assert wav.getframerate() == 24000
        assert wav.getnframes() > 1920


def test_the_default_voice_is_piper_joe_through_the_normalizer(tmp_path) -> None:
    out, raw = tmp_path / "default.wav", tmp_path / "raw.wav"
    text = "Your total is $12.50."
    result = _polyvox("say", text, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "noise" not in result.stderr  # shipped weights, not random ones
    result = _polyvox("say", text, "-o", str(raw), "--no-normalize")
    assert result.returncode == 0, result.stderr
    with wave.open(str(out)) as wav, wave.open(str(raw)) as unnormalized:
        assert wav.getframerate() == 22050  # Piper joe's rate
        assert wav.getnframes() > 22050  # "twelve dollars and fifty cents": over a second
        # Read as words ("twelve dollars and fifty cents"), not symbol by symbol.
        assert wav.getnframes() != unnormalized.getnframes()


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


def test_say_chains_clauses_as_asked_like_the_python_api(tmp_path) -> None:
    import numpy as np

    from polyvox.audio.wav import to_pcm16
    from polyvox.speak import Speaker

    text = "Hello there. Your order shipped today."
    said = {}
    for mode in ("pocket", "chained"):
        out = tmp_path / f"{mode}.wav"
        result = _polyvox("say", text, "-o", str(out), "--model", "pocket/english_2m",
                          "--chaining", mode)
        assert result.returncode == 0, result.stderr
        with wave.open(str(out)) as wav:
            said[mode] = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    api = np.frombuffer(to_pcm16(Speaker.load("pocket/english_2m", chaining="pocket")
                                 .speak(text)), dtype="<i2")
    assert api.size == said["pocket"].size
    assert np.abs(api.astype(np.int32) - said["pocket"].astype(np.int32)).max() <= 1
    # the second clause heard the first (chained) or not (pocket)
    assert said["chained"].size != said["pocket"].size or \
        not np.array_equal(said["chained"], said["pocket"])
