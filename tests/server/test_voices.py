"""Voices over HTTP: add from a recording or a voice state, list, use, delete; bad uploads
are refused with a reason; added voices survive a restart."""

from __future__ import annotations

import io
import json
import struct

import httpx
import numpy as np
import soundfile
from server_harness import MODEL, Server, start_server

VOICE_DIR = MODEL.replace("/", "_")


def _recording(seconds: float, rate: int = 16000) -> bytes:
    time = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * (180 + 60 * np.sin(3 * time)) * time)
    tone *= 0.5 + 0.5 * np.abs(np.sin(5 * time))  # syllable-like loudness
    buffer = io.BytesIO()
    soundfile.write(buffer, tone.astype(np.float32), rate, format="WAV")
    return buffer.getvalue()


def _add(server: Server, voice_id: str, data: bytes, name: str = "voice.wav") -> httpx.Response:
    return httpx.post(f"{server.url}/v1/voices", data={"id": voice_id},
                      files={"file": (name, data, "application/octet-stream")}, timeout=60)


def _speak(server: Server, voice: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
        "model": "tts-1", "input": "Hello from a voice.", "voice": voice,
        "response_format": "pcm", "seed": 4})


def _pcm(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.int32)


def _error(response: httpx.Response, status: int, words: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in error["message"], error
    return error


def _safetensors(tensors: dict[str, tuple[list[int], bytes]]) -> bytes:
    header = {name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}
              for name, (shape, _) in tensors.items()}
    offset, data = 0, b""
    for name, (_, raw) in tensors.items():
        header[name]["data_offsets"] = [offset, offset + len(raw)]
        offset += len(raw)
        data += raw
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded + data


def test_voices_lifecycle_limits_and_persistence(tmp_path) -> None:
    data_dir = tmp_path / "data"
    server = start_server(tmp_path, "--max-voice-seconds", "5", "--max-voice-mb", "1",
                          data_dir=data_dir)
    try:
        default_audio = _pcm(_speak(server, "default"))
        added = _add(server, "bob", _recording(2.0))
        assert added.status_code == 201, added.text
        assert added.json() | {"created_at": 0} == {
            "id": "bob", "object": "voice", "builtin": False, "source": "audio",
            "seconds": 2.0, "created_at": 0}
        listing = httpx.get(f"{server.url}/v1/voices").json()
        assert [v["id"] for v in listing["data"]] == ["bob", "default"]
        assert listing["aliases"]["alloy"] == "default"
        bob_audio = _pcm(_speak(server, "bob"))
        assert len(bob_audio) != len(default_audio) or not np.array_equal(bob_audio,
                                                                          default_audio)

        _refusals(server)

        saved = data_dir / "voices" / VOICE_DIR
        state = (saved / "bob.safetensors").read_bytes()
        carol = _add(server, "carol", state, name="bob.safetensors")
        assert carol.status_code == 201 and carol.json()["source"] == "voice_state"
        carol_audio = _pcm(_speak(server, "carol"))
        assert np.abs(carol_audio - bob_audio).max() <= 2

        assert httpx.delete(f"{server.url}/v1/voices/bob").json()["deleted"] is True
        _error(_speak(server, "bob"), 400, "unknown voice 'bob'")
        _error(httpx.delete(f"{server.url}/v1/voices/bob"), 404, "no voice 'bob'")
        _error(httpx.delete(f"{server.url}/v1/voices/default"), 400, "built in")
        assert sorted(p.name for p in saved.iterdir()) == ["carol.json", "carol.safetensors"]
    finally:
        server.stop()

    restarted = start_server(tmp_path, data_dir=data_dir)
    try:
        listing = httpx.get(f"{restarted.url}/v1/voices").json()
        assert [v["id"] for v in listing["data"]] == ["carol", "default"]
        assert listing["data"][0]["source"] == "voice_state"
        assert np.abs(_pcm(_speak(restarted, "carol")) - carol_audio).max() <= 2
    finally:
        restarted.stop()


def _refusals(server: Server) -> None:
    good = _recording(1.0)
    for bad_id in ["../evil", "a/b", "..", ".hidden", "x" * 65, "", "caf\u00e9"]:
        response = _add(server, bad_id, good)
        assert response.status_code == 400, (bad_id, response.text)
        assert response.json()["error"]["param"] == "id"
    _error(_add(server, "bob", good), 409, "exists")
    _error(_add(server, "long", _recording(6.0)), 400, "over the 5 s limit")
    _error(_add(server, "short", _recording(0.1)), 400, "under the 0.5 s minimum")
    _error(_add(server, "huge", b"RIFF" + bytes(1_200_000)), 413, "limit")
    _error(_add(server, "text", b"this is not audio at all" * 10), 400, "cannot read the file")
    wrong_shape = _safetensors({"k": ([1, 2, 1, 3], bytes(24)), "v": ([1, 2, 1, 3], bytes(24))})
    _error(_add(server, "wrong", wrong_shape, "x.safetensors"), 400, "another model")
    _error(httpx.post(f"{server.url}/v1/voices", json={"id": "x"}), 415, "multipart/form-data")
    _error(httpx.post(f"{server.url}/v1/voices", data={"id": "nofile"}, files={
        "other": ("a", b"b")}), 400, "'file' field")
    response = httpx.delete(f"{server.url}/v1/voices/..%2F..%2Fdata")
    assert response.status_code in (400, 404)
    assert [v["id"] for v in httpx.get(f"{server.url}/v1/voices").json()["data"]] == [
        "bob", "default"]
