"""`polyvox serve --no-eos`: a random-weight model served for benchmarks runs every
request to its length cap, exactly as `polyvox bench` runs it in process (the same
overrides, so the HTTP and in-process figures measure the same work); trained weights
refuse the flag with a clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import safetensors.torch

from server_harness import MODEL, start_server

TEXT = "Hello there. Your order shipped today!"


def _served_pcm(url: str, seed: int, sample_rate: int) -> np.ndarray:
    response = httpx.post(f"{url}/v1/audio/speech", timeout=120, json={
        "model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm",
        "seed": seed, "sample_rate": sample_rate})
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2")


def test_no_eos_serves_the_in_process_benchmarks_requests(tmp_path: Path) -> None:
    from polyvox.audio.wav import to_pcm16
    from polyvox.serving import length_cap_overrides
    from polyvox.speak import Speaker

    speaker = Speaker.load(MODEL)
    plain = np.frombuffer(to_pcm16(speaker.speak(TEXT, seed=3)), dtype="<i2")
    speaker.served.param_overrides = length_cap_overrides(speaker.served.family)
    capped = np.frombuffer(to_pcm16(speaker.speak(TEXT, seed=3)), dtype="<i2")
    # random weights stop at a random end of speech; at the cap, speech is longer
    assert capped.size > plain.size
    server = start_server(tmp_path, "--no-eos")
    try:
        served = _served_pcm(server.url, 3, speaker.sample_rate)
    finally:
        server.stop()
    assert served.size == capped.size
    assert np.abs(served.astype(np.int32) - capped.astype(np.int32)).max() <= 1


def test_no_eos_is_refused_for_trained_weights(tmp_path: Path) -> None:
    from polyvox.models.pocket.loader import get_config
    from polyvox.models.pocket.local_tokenizer import train_local_tokenizer
    from polyvox.models.pocket.model import PocketModules
    from polyvox.models.pocket.weights import random_init

    modules = PocketModules(get_config("english_2m"))
    random_init(modules, 4)
    checkpoint = tmp_path / "model.safetensors"
    safetensors.torch.save_file({k: v.clone() for k, v in modules.state_dict().items()},
                                str(checkpoint))
    result = subprocess.run(
        [sys.executable, "-m", "polyvox.server", "--model", MODEL, "--weights", str(checkpoint),
         "--tokenizer", str(train_local_tokenizer()), "--no-eos", "--port", "0",
         "--data-dir", str(tmp_path / "data"), "--log-level", "warning"],
        capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 2, result.stderr
    assert "--no-eos is for random weights" in result.stderr
    assert "Traceback" not in result.stderr
