"""WS /v1/audio/stream against a live server: text streamed in, audio streamed out before
the text ends; malformed and out-of-order messages get an error event and a clean close."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import websockets
from server_harness import SAMPLE_RATE, Server

FIRST = "Hello there, this is the first sentence. "
# The engine's streaming normalizer holds back the last few words (a date or a name may
# still be forming), so a clause is spoken once a few words past its end have arrived.
MORE = ["And here is", " the second sentence", " which keeps"]
REST = [" on going until", " it ends here."]


async def _recv_until(socket: Any, kind: str, timeout: float = 30) -> tuple[list[dict], int]:
    """Events up to and including the first of `kind`, and the audio bytes seen."""
    events, num_bytes = [], 0
    while True:
        message = await asyncio.wait_for(socket.recv(), timeout)
        if isinstance(message, bytes):
            num_bytes += len(message)
            continue
        events.append(json.loads(message))
        if events[-1]["type"] in (kind, "error"):
            return events, num_bytes


def _send(socket: Any, **message: Any) -> Any:
    return socket.send(json.dumps(message))


def test_audio_starts_before_the_text_ends(server: Server) -> None:
    async def session() -> None:
        async with websockets.connect(server.ws_url, subprotocols=["polyvox"]) as socket:
            assert socket.subprotocol == "polyvox"
            await _send(socket, type="configure", voice="default", format="pcm", seed=3)
            configured = json.loads(await socket.recv())
            assert configured["type"] == "configured"
            assert configured["sample_rate"] == SAMPLE_RATE
            for piece in [FIRST, *MORE]:
                await _send(socket, type="text", text=piece)
            # Nothing more is sent until audio for the first clause has arrived.
            start = json.loads(await asyncio.wait_for(socket.recv(), 30))
            assert start["type"] == "audio.start" and start["utterance"] == 0
            first_audio = await asyncio.wait_for(socket.recv(), 30)
            assert isinstance(first_audio, bytes) and len(first_audio) % 2 == 0
            for piece in REST:
                await _send(socket, type="text", text=piece)
            await _send(socket, type="flush")
            events, num_bytes = await _recv_until(socket, "utterance.done")
            clauses = [e for e in events if e["type"] == "clause.done"]
            assert len(clauses) >= 2  # the text has several sentences
            assert [e["clause"] for e in clauses] == list(range(clauses[0]["clause"],
                                                                clauses[0]["clause"] + len(clauses)))
            assert events[-1] == {"type": "utterance.done", "utterance": 0,
                                  "audio_seconds": pytest.approx(
                                      (len(first_audio) + num_bytes) / 2 / SAMPLE_RATE,
                                      abs=1e-3)}
            await _send(socket, type="text", text="A second utterance.")
            await _send(socket, type="end")
            events, num_bytes = await _recv_until(socket, "done")
            kinds = [e["type"] for e in events if e["type"] != "clause.done"]
            assert kinds == ["audio.start", "utterance.done", "done"]
            assert events[-3] == {"type": "clause.done", "utterance": 1, "clause": 0}
            assert num_bytes > 0
            with pytest.raises(websockets.ConnectionClosedOK):
                await socket.recv()
            assert socket.close_code == 1000

    asyncio.run(session())
    server.wait_idle()


BAD_SESSIONS = {
    "malformed JSON": ['{"type": "configure"'],
    "not an object": ["[1, 2]"],
    "text before configure": [json.dumps({"type": "text", "text": "hi"})],
    "configure twice": [json.dumps({"type": "configure"}), json.dumps({"type": "configure"})],
    "unknown type": [json.dumps({"type": "configure"}), json.dumps({"type": "speak"})],
    "unknown field": [json.dumps({"type": "configure", "sampleRate": 16000})],
    "unknown voice": [json.dumps({"type": "configure", "voice": "nobody"})],
    "bad format": [json.dumps({"type": "configure", "format": "aac"})],
    "speed out of range": [json.dumps({"type": "configure", "speed": 9})],
    "text not a string": [json.dumps({"type": "configure"}), json.dumps({"type": "text",
                                                                         "text": 5})],
    "binary from the client": [json.dumps({"type": "configure"}), b"\x00\x01"],
    # A JSON "\ud800" is a lone surrogate: quoted in an error, it must not break the close.
    "lone surrogate field": [json.dumps({"type": "configure", "\ud800": 1})],
    "lone surrogate voice": [json.dumps({"type": "configure", "voice": "\ud800"})],
}
EXPECTED_WORDS = {
    "malformed JSON": "malformed JSON", "not an object": "JSON object",
    "text before configure": "configure the session first", "configure twice": "already",
    "unknown type": "unknown message type", "unknown field": "sampleRate",
    "unknown voice": "unknown voice 'nobody'", "bad format": "aac", "speed out of range": "speed",
    "text not a string": "text", "binary from the client": "binary frames",
    "lone surrogate field": "valid string", "lone surrogate voice": "unknown voice",
}


@pytest.mark.parametrize("case", sorted(BAD_SESSIONS))
def test_bad_messages_get_an_error_and_a_clean_close(server: Server, case: str) -> None:
    async def session() -> dict:
        async with websockets.connect(server.ws_url) as socket:
            for message in BAD_SESSIONS[case]:
                await socket.send(message)
            while True:
                event = json.loads(await asyncio.wait_for(socket.recv(), 30))
                if event["type"] == "error":
                    break
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(socket.recv(), 30)
            assert socket.close_code == 1008
            return event

    event = asyncio.run(session())
    assert EXPECTED_WORDS[case] in event["error"]["message"]
    assert event["error"]["type"] == "invalid_request_error"


def test_bad_message_mid_utterance_aborts_its_generation(server: Server) -> None:
    async def session() -> None:
        async with websockets.connect(server.ws_url) as socket:
            await _send(socket, type="configure")
            await socket.recv()
            for piece in [FIRST, *MORE]:
                await _send(socket, type="text", text=piece)
            await asyncio.wait_for(socket.recv(), 30)  # audio.start
            await socket.send("oops")
            events, _ = await _recv_until(socket, "error")
            assert "malformed JSON" in events[-1]["error"]["message"]
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    await asyncio.wait_for(socket.recv(), 30)
            assert socket.close_code == 1008

    asyncio.run(session())
    server.wait_idle()
