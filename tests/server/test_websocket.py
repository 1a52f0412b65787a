"""WS /v1/audio/stream against a live server: text streamed in, audio streamed out before
the text ends; malformed and out-of-order messages get an error event and a clean close."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import numpy as np
import pytest
import websockets
from server_harness import SAMPLE_RATE, Server

MAX_ROUNDING_LSB = 2  # batch composition changes float rounding, never more (test_bad_input)
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


# --- barge-in: cancel ------------------------------------------------------------------

LONG = ("The first sentence of a long answer is spoken here. The second sentence goes on "
        "for a while longer. A third sentence follows it, and a fourth one after that. ")


async def _configure(socket: Any, **settings: Any) -> dict:
    await _send(socket, type="configure", **settings)
    configured = json.loads(await asyncio.wait_for(socket.recv(), 30))
    assert configured["type"] == "configured", configured
    return configured


async def _recv_until_cancelled(socket: Any) -> tuple[dict, int]:
    """Audio bytes received before the `cancelled` acknowledgement, and the ack."""
    num_bytes = 0
    while True:
        message = await asyncio.wait_for(socket.recv(), 30)
        if isinstance(message, bytes):
            num_bytes += len(message)
            continue
        event = json.loads(message)
        if event["type"] == "cancelled":
            return event, num_bytes
        assert event["type"] in ("audio.start", "clause.done", "words", "utterance.done"), event


def _assert_engine_free(server: Server) -> None:
    """At once (no waiting): the engine holds nothing for any request."""
    state = server.state()
    assert state["engine_requests"] == 0, state
    assert state["kv_blocks_used"] == state["voice_blocks"], state
    assert state["decoder_slots_used"] == 0, state
    assert state["admission_running"] == 0, state
    assert state["is_consistent"], state


def test_cancel_stops_the_audio_and_frees_the_engine(server: Server) -> None:
    async def session() -> None:
        async with websockets.connect(server.ws_url) as socket:
            await _configure(socket, seed=5)
            await _send(socket, type="text", text=LONG * 3)
            num_bytes = 0
            while num_bytes < 4800:  # some audio of the first sentence, then barge in
                message = await asyncio.wait_for(socket.recv(), 30)
                num_bytes += len(message) if isinstance(message, bytes) else 0
            await _send(socket, type="cancel")
            ack, more = await _recv_until_cancelled(socket)
            assert ack["utterances"] == [0]
            assert ack["audio_samples"] * 2 == num_bytes + more  # pcm: exactly what was sent
            assert ack["audio_seconds"] == pytest.approx(ack["audio_samples"] / SAMPLE_RATE,
                                                         abs=1e-4)
            _assert_engine_free(server)  # freed before the acknowledgement
            with pytest.raises(TimeoutError):  # nothing of the utterance after the ack
                await asyncio.wait_for(socket.recv(), 0.5)
            # The session goes on: the next text is a new utterance.
            await _send(socket, type="text", text="Something else now.")
            await _send(socket, type="end")
            events, num_bytes = await _recv_until(socket, "done")
            assert events[0] == {"type": "audio.start", "utterance": 1,
                                 "ttfa_ms": events[0]["ttfa_ms"]}
            assert [e for e in events if e["type"] == "utterance.done"][0]["utterance"] == 1
            assert num_bytes > 0

    asyncio.run(session())
    server.wait_idle()


def test_cancel_drops_waiting_utterances_and_acknowledges_an_idle_session(server: Server
                                                                           ) -> None:
    async def session() -> None:
        async with websockets.connect(server.ws_url) as socket:
            await _configure(socket)
            await _send(socket, type="cancel")  # nothing to cancel: still acknowledged
            ack, _ = await _recv_until_cancelled(socket)
            assert ack == {"type": "cancelled", "utterances": [], "audio_samples": 0,
                           "audio_seconds": 0.0}
            for text in (LONG, "A second utterance waits its turn.", "A third is open"):
                await _send(socket, type="text", text=text)
                if not text.endswith("open"):
                    await _send(socket, type="flush")
            await _send(socket, type="cancel")
            ack, num_bytes = await _recv_until_cancelled(socket)
            assert ack["utterances"] == [0, 1, 2]
            assert ack["audio_samples"] * 2 == num_bytes
            _assert_engine_free(server)
            await _send(socket, type="text", text="Fine.")
            await _send(socket, type="end")
            events, _ = await _recv_until(socket, "done")
            assert [e["utterance"] for e in events if e["type"] == "utterance.done"] == [3]

    asyncio.run(session())
    server.wait_idle()


NUM_LOAD_STREAMS = 16
LOAD_TEXTS = ["Stream {i} says its sentence.", "This is stream {i}, with a few words."]


async def _load_stream(server: Server, index: int, cancel_after: int | None) -> bytes:
    """One session of the load test: its utterance's audio; with `cancel_after`, cancelled
    once that many audio frames have arrived."""
    async with websockets.connect(server.ws_url) as socket:
        await _configure(socket, seed=100 + index)
        await _send(socket, type="text", text=LOAD_TEXTS[index % 2].format(i=index))
        await _send(socket, type="flush")
        audio, frames = bytearray(), 0
        while True:
            message = await asyncio.wait_for(socket.recv(), 120)
            if isinstance(message, bytes):
                audio += message
                frames += 1
                if cancel_after is not None and frames == cancel_after:
                    await _send(socket, type="cancel")
                    ack, more = await _recv_until_cancelled(socket)
                    assert ack["utterances"] == [0]
                    assert ack["audio_samples"] * 2 == len(audio) + more
                    break
                continue
            if json.loads(message)["type"] == "utterance.done":
                assert cancel_after is None or frames < cancel_after
                break
        await _send(socket, type="end")
        await _recv_until(socket, "done")
        return bytes(audio)


def test_cancel_under_load_leaks_nothing_and_disturbs_no_other_stream(server: Server) -> None:
    rng = random.Random(7)
    cancels = {i: rng.randint(1, 4) for i in rng.sample(range(NUM_LOAD_STREAMS), 8)}

    async def run(with_cancels: bool) -> list[bytes]:
        return await asyncio.gather(*(
            _load_stream(server, i, cancels.get(i) if with_cancels else None)
            for i in range(NUM_LOAD_STREAMS)))

    interrupted = asyncio.run(run(with_cancels=True))
    state = server.wait_idle()
    assert state["is_consistent"] and state["engine_requests"] == 0
    assert state["kv_blocks_used"] == state["voice_blocks"] and state["decoder_slots_used"] == 0
    whole = asyncio.run(run(with_cancels=False))
    server.wait_idle()
    for i in range(NUM_LOAD_STREAMS):
        got, want = _pcm(interrupted[i]), _pcm(whole[i])
        if i in cancels:  # what was sent before the cancel is the start of the audio
            assert 0 < len(got) < len(want)
            want = want[: len(got)]
        assert len(got) == len(want), i
        assert np.abs(got - want).max() <= MAX_ROUNDING_LSB, i


def _pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.int32)


# --- word timings ------------------------------------------------------------------------

WORDS_TEXT = ("Dr. Patel sees you on March 14th at 3:45 PM, in room 12B. It costs $1,249.50 "
              "- or less! Call 555-123-4567 today.")


async def _words_session(server: Server, text: str, piece_size: int, **settings: Any
                         ) -> tuple[list[dict], float]:
    """The `words` of one utterance sent in pieces, and its audio_seconds."""
    async with websockets.connect(server.ws_url) as socket:
        await _configure(socket, word_timings=True, **settings)
        for start in range(0, len(text), piece_size):
            await _send(socket, type="text", text=text[start: start + piece_size])
        await _send(socket, type="end")
        events, _ = await _recv_until(socket, "done", timeout=120)
    kinds = [e["type"] for e in events]
    assert "error" not in kinds, events
    words = [w for e in events if e["type"] == "words" for w in e["words"]]
    done = [e for e in events if e["type"] == "utterance.done"][0]
    # Each clause's words come before its clause.done.
    for event in (e for e in events if e["type"] == "words" and e["clause"] is not None):
        assert kinds.index("clause.done", events.index(event)) > events.index(event)
    return words, done["audio_seconds"]


def _assert_word_timings(words: list[dict], text: str, audio_seconds: float) -> None:
    assert [w["word"] for w in words] == text.split()  # the client's words, each once
    assert [w["index"] for w in words] == list(range(len(text.split())))
    starts = [w["start"] for w in words]
    assert starts == sorted(starts) and starts[0] >= 0
    assert all(w["end"] >= w["start"] for w in words)
    assert all(a["end"] <= b["start"] + 1e-4 for a, b in zip(words, words[1:]))
    assert abs(words[-1]["end"] - audio_seconds) < 0.1


@pytest.mark.parametrize("piece_size", [1, 7, 1000])
def test_word_timings_cover_the_client_words_in_order(server: Server, piece_size: int) -> None:
    words, seconds = asyncio.run(_words_session(server, WORDS_TEXT, piece_size, seed=2))
    _assert_word_timings(words, WORDS_TEXT, seconds)
    by_word = {w["word"]: w for w in words}
    assert by_word["$1,249.50"]["end"] - by_word["$1,249.50"]["start"] > \
        by_word["It"]["end"] - by_word["It"]["start"]  # "one thousand two hundred ..."
