"""One synthesis path: `polyvox say` (and the Python API) speak a text with the same samples
as `POST /v1/audio/speech` with the same model, voice and seed."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest

from server_harness import MODEL, Server, start_server

TEXTS = [
    "Your total is $12.50, due on 03/14/2025 at 4:30 PM.",
    "Write to jane.doe@example.com or call 555-0134.",
    "Hello there. Your order shipped today! Is there anything else?",
    "Confirmation code J-O-N-E-S, seat 14B.",
]


def _server_pcm(server: Server, text: str, seed: int, sample_rate: int,
                speed: float = 1.0) -> np.ndarray:
    """Raw PCM16 at the model's own rate (OpenAI's pcm is 24 kHz unless asked otherwise)."""
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=120, json={
        "model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm",
        "seed": seed, "sample_rate": sample_rate, "speed": speed})
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2")


def _wav_samples(path: Path) -> np.ndarray:
    with wave.open(str(path)) as wav:
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")


def _assert_same(said: np.ndarray, served: np.ndarray) -> None:
    assert said.size == served.size and said.size > 0
    # PCM16 on both sides: the same float samples (<= 1e-5 apart) give the same integers.
    assert np.abs(said.astype(np.int32) - served.astype(np.int32)).max() <= 1


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from polyvox.models.registry import DEFAULT_MODEL

    pytest.importorskip("piper")  # the default voice, joe-ar, decodes through Piper's parts
    server = start_server(tmp_path_factory.mktemp("default"), "--model", DEFAULT_MODEL)
    yield server
    server.stop()


def test_say_writes_the_servers_samples(default_server: Server, tmp_path: Path) -> None:
    """The CLI's default model (pocket/joe-ar), normalizer on, several clauses."""
    for index, text in enumerate(TEXTS):
        out = tmp_path / f"say{index}.wav"
        result = subprocess.run([sys.executable, "-m", "polyvox.cli", "say", text, "-o", str(out),
                                 "--seed", str(index)], capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr
        _assert_same(_wav_samples(out), _server_pcm(default_server, text, index, 22050))


def test_say_at_another_speed_writes_the_servers_samples(default_server: Server,
                                                         tmp_path: Path) -> None:
    """joe-ar faster (its z resampled as it comes) and slower (its pace input): the
    CLI and the server say the same samples, at about 1 / speed of the length at 1."""
    text = TEXTS[2]
    normal = _server_pcm(default_server, text, 0, 22050)
    for speed in (1.5, 0.75):
        out = tmp_path / f"say-{speed}.wav"
        result = subprocess.run([sys.executable, "-m", "polyvox.cli", "say", text, "-o", str(out),
                                 "--speed", str(speed)], capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr
        served = _server_pcm(default_server, text, 0, 22050, speed)
        _assert_same(_wav_samples(out), served)
        # the pace judge's band is ±7% of the median; one text is given ±15%
        assert abs(served.size / normal.size * speed - 1) < 0.15, (speed, served.size)


def test_python_api_speaks_the_servers_samples(server: Server) -> None:
    """The random-weight Pocket model of the shared test server, through polyvox.speak."""
    from polyvox.audio.wav import to_pcm16
    from polyvox.speak import Speaker

    speaker = Speaker.load(MODEL)
    for index, text in enumerate(TEXTS[:3]):
        said = np.frombuffer(to_pcm16(speaker.speak(text, seed=10 + index)), dtype="<i2")
        _assert_same(said, _server_pcm(server, text, 10 + index, speaker.sample_rate))
    assert speaker.served.engine.is_idle()
