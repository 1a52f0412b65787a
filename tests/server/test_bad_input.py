"""Bad requests get a 4xx JSON error that says what was wrong, and streams running at the
same time are not disturbed: their audio equals the audio they make alone."""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
from server_harness import Server

GOOD = [(11, "The first good stream speaks this sentence. Then another one follows it."),
        (12, "A second good stream, with its own words and its own seed."),
        (13, "Number three is the last good stream here.")]
MAX_ROUNDING_LSB = 2
OK_BODY = {"model": "tts-1", "input": "Hello.", "voice": "alloy", "response_format": "pcm"}


def _json(**changes: object) -> bytes:
    return json.dumps({**OK_BODY, **changes}).encode()


# name -> (body bytes, expected status, words the message must contain, param)
BAD = {
    "empty input": (_json(input=""), 400, "input is empty", "input"),
    "blank input": (_json(input="   \n"), 400, "input is empty", "input"),
    "input too long": (_json(input="word " * 1000), 400, "over the limit of 4096", "input"),
    "unknown voice": (_json(voice="nobody"), 400, "unknown voice 'nobody'", "voice"),
    "bad voice object": (_json(voice={"name": "x"}), 400, "voice must be", "voice"),
    "bad format": (_json(response_format="aac"), 400, "unsupported response format 'aac'",
                   "response_format"),
    "bad stream format": (_json(stream_format="xml"), 400, "stream_format", "stream_format"),
    "speed too high": (_json(speed=4.5), 400, "speed", "speed"),
    "speed too low": (_json(speed=0.1), 400, "speed", "speed"),
    "bad temperature": (_json(temperature=-1), 400, "temperature", "temperature"),
    "unknown model": (_json(model="tts-9"), 400, "unknown model 'tts-9'", "model"),
    "missing input": (json.dumps({"model": "tts-1", "voice": "alloy"}).encode(), 400,
                      "input", "input"),
    "input not a string": (_json(input=5), 400, "input", "input"),
    "invalid UTF-8": (b'{"model": "tts-1", "input": "caf\xe9", "voice": "alloy"}', 400,
                      "not valid UTF-8", None),
    "malformed JSON": (b'{"model": "tts-1", "input": ', 400, "malformed JSON", None),
    "not an object": (b'["tts-1"]', 400, "JSON object", None),
    "body too large": (_json(input="x" * (2 * 2**20)), 413, "over the 1048576 byte limit",
                       None),
}


async def _good(client: httpx.AsyncClient, server: Server, seed: int, text: str) -> np.ndarray:
    response = await client.post(f"{server.url}/v1/audio/speech", json={
        **OK_BODY, "input": text, "seed": seed})
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.int32)


async def _bad(client: httpx.AsyncClient, server: Server, name: str) -> None:
    body, status, words, param = BAD[name]
    response = await client.post(f"{server.url}/v1/audio/speech", content=body,
                                 headers={"Content-Type": "application/json"})
    assert response.status_code == status, (name, response.text)
    error = response.json()["error"]
    assert words in error["message"], (name, error)
    assert error["param"] == param, (name, error)
    assert error["type"] == "invalid_request_error"


async def _oversized_voice(client: httpx.AsyncClient, server: Server) -> None:
    files = {"file": ("big.wav", b"\0" * (11 * 2**20), "audio/wav")}
    response = await client.post(f"{server.url}/v1/voices", data={"id": "big"}, files=files)
    assert response.status_code == 413, response.text
    assert "limit" in response.json()["error"]["message"]


def test_bad_input_does_not_disturb_good_streams(server: Server) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            alone = [await _good(client, server, seed, text) for seed, text in GOOD]
            good = [asyncio.ensure_future(_good(client, server, seed, text))
                    for seed, text in GOOD]
            await asyncio.gather(*(_bad(client, server, name) for name in BAD for _ in (1, 2)),
                                 _oversized_voice(client, server))
            together = await asyncio.gather(*good)
        for (seed, _), solo, mixed in zip(GOOD, alone, together):
            assert len(solo) == len(mixed), seed
            assert np.abs(solo - mixed).max() <= MAX_ROUNDING_LSB, seed

    asyncio.run(run())
    state = server.wait_idle()
    assert state["is_consistent"]
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'polyvox_bad_requests_total{endpoint="speech"}' in metrics
