"""POST /v1/audio/speech against a live server: the official openai client, every
response format, SSE, the OpenAI names, /v1/models, /health and /ready."""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import openai
import pytest
import soundfile
from server_harness import MODEL, SAMPLE_RATE, Server

TEXT = "Hello there. A short test."
MAX_ROUNDING_LSB = 2  # batched float rounding may move a 16-bit sample by a step or two


def speech(server: Server, timeout: float = 60, **body: object) -> httpx.Response:
    payload = {"model": "tts-1", "input": TEXT, "voice": "alloy", **body}
    return httpx.post(f"{server.url}/v1/audio/speech", json=payload, headers=server.headers,
                      timeout=timeout)


def pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.int32)


def test_openai_client_streams_and_creates(server: Server) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT, response_format="pcm") as response:
        assert response.headers["content-type"] == "audio/pcm"
        pieces = list(response.iter_bytes())
    streamed = b"".join(pieces)
    assert len(pieces) > 1 and len(streamed) > SAMPLE_RATE  # > 0.5 s of 16-bit audio

    created = client.audio.speech.create(model="gpt-4o-mini-tts", voice={"id": "nova"},
                                         input=TEXT, response_format="wav")
    audio, rate = soundfile.read(io.BytesIO(created.content), dtype="int16")
    assert rate == SAMPLE_RATE
    assert np.abs(audio.astype(np.int32) - pcm(streamed)).max() <= MAX_ROUNDING_LSB

    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.speech.create(model="tts-1", voice="nobody", input=TEXT)
    assert "unknown voice 'nobody'" in refused.value.message


@pytest.mark.parametrize("response_format", ["wav", "mp3", "opus", "flac"])
def test_each_format_decodes_at_its_sample_rate(server: Server, response_format: str) -> None:
    reference = pcm(speech(server, response_format="pcm").content)
    response = speech(server, response_format=response_format)
    assert response.status_code == 200, response.text
    audio, rate = soundfile.read(io.BytesIO(response.content), dtype="float32")
    assert rate == SAMPLE_RATE == int(response.headers["x-sample-rate"])
    seconds, expected = len(audio) / rate, len(reference) / SAMPLE_RATE
    # Lossy codecs pad a little (encoder delay, last frame).
    assert expected <= seconds <= expected + 0.15, (seconds, expected)


def test_requested_sample_rates_resample(server: Server) -> None:
    native = speech(server, response_format="pcm").content
    for response_format, rate in [("pcm", 16000), ("wav", 22050), ("opus", 48000)]:
        response = speech(server, response_format=response_format, sample_rate=rate)
        assert response.status_code == 200, response.text
        assert int(response.headers["x-sample-rate"]) == rate
        if response_format == "pcm":
            num_native = len(native) // 2
            assert len(response.content) // 2 == -(-num_native * rate // SAMPLE_RATE)  # ceil
        else:
            _, decoded_rate = soundfile.read(io.BytesIO(response.content))
            assert decoded_rate == rate


def test_sse_deltas_concatenate_to_the_pcm(server: Server) -> None:
    reference = pcm(speech(server, response_format="pcm", seed=5).content)
    response = speech(server, response_format="pcm", seed=5, stream_format="sse")
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[len("data: "):]) for line in response.text.splitlines()
              if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) > 1
    assert events[-1]["type"] == "speech.audio.done"
    joined = pcm(b"".join(base64.b64decode(e["audio"]) for e in deltas))
    assert len(joined) == len(reference)
    assert np.abs(joined - reference).max() <= MAX_ROUNDING_LSB


def test_seeds_and_voices_are_used(server: Server) -> None:
    one = pcm(speech(server, response_format="pcm", seed=1).content)
    other = pcm(speech(server, response_format="pcm", seed=2).content)
    same = pcm(speech(server, response_format="pcm", seed=1, voice="default").content)
    assert np.abs(same - one).max() <= MAX_ROUNDING_LSB  # alloy means the default voice
    assert len(one) != len(other) or np.abs(one - other).max() > 1000


def test_models_health_and_ready(server: Server) -> None:
    models = httpx.get(f"{server.url}/v1/models").json()
    ids = [m["id"] for m in models["data"]]
    assert ids[0] == MODEL and {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"} <= set(ids)
    assert httpx.get(f"{server.url}/v1/models/tts-1").json()["alias_of"] == MODEL
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{server.url}/ready").json()
    assert ready["model"] == MODEL and ready["sample_rate"] == SAMPLE_RATE
    assert speech(server, model=MODEL, response_format="pcm").status_code == 200


def test_metrics_count_streams(server: Server) -> None:
    speech(server, response_format="pcm")
    text = httpx.get(f"{server.url}/metrics").text
    for name in ("polyvox_ttfa_seconds_bucket", "polyvox_rtf_bucket", "polyvox_active_streams",
                 "polyvox_queued_requests", "polyvox_rejected_total", "polyvox_kv_blocks_used",
                 "polyvox_kv_blocks_free", "polyvox_decoder_slots_free"):
        assert name in text, name
    assert 'polyvox_streams_total{endpoint="speech",outcome="completed"}' in text


def test_unknown_endpoint_is_a_json_404(server: Server) -> None:
    response = httpx.get(f"{server.url}/v1/nothing")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "no such endpoint: GET /v1/nothing"
