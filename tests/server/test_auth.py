"""With an API key (here from POLYVOX_API_KEY), everything but /health and the static page
needs `Authorization: Bearer <key>`; WebSockets may offer it as a subprotocol. (The same
server, with a 1 s WebSocket idle limit, checks that idle sessions are let go.)"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest
import websockets
from server_harness import Server, start_server

KEY = "test-key-123"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory):
    server = start_server(tmp_path_factory.mktemp("locked"), "--ws-idle-seconds", "1",
                          api_key_env=KEY)
    yield server
    server.stop()


def test_endpoints_need_the_key(locked: Server) -> None:
    url = locked.url
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.get(f"{url}/").status_code == 200  # static page, asks for the key itself
    speech = {"model": "tts-1", "input": "Hi there.", "voice": "alloy", "response_format": "pcm"}
    requests = [("GET", "/ready", None), ("GET", "/v1/models", None),
                ("GET", "/v1/voices", None), ("GET", "/metrics", None),
                ("POST", "/v1/audio/speech", speech), ("DELETE", "/v1/voices/x", None)]
    for method, path, body in requests:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            response = httpx.request(method, url + path, json=body, headers=headers)
            assert response.status_code == 401, (path, headers, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"]["type"] == "authentication_error"
        good = httpx.request(method, url + path, json=body, timeout=60,
                             headers={"Authorization": f"Bearer {KEY}"})
        assert good.status_code in (200, 404), (path, good.text)  # 404: no voice 'x'


def test_openai_client_with_the_key(locked: Server) -> None:
    client = openai.OpenAI(base_url=f"{locked.url}/v1", api_key=KEY, max_retries=0)
    audio = client.audio.speech.create(model="tts-1", voice="alloy", input="Hi there.",
                                       response_format="pcm")
    assert len(audio.content) > 1000
    refused = openai.OpenAI(base_url=f"{locked.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        refused.audio.speech.create(model="tts-1", voice="alloy", input="Hi there.")


def test_websocket_needs_the_key(locked: Server) -> None:
    async def run() -> None:
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(locked.ws_url):
                pass
        assert refused.value.response.status_code == 403
        for options in ({"additional_headers": {"Authorization": f"Bearer {KEY}"}},
                        {"subprotocols": ["polyvox", f"bearer.{KEY}"]}):
            async with websockets.connect(locked.ws_url, **options) as socket:
                await socket.send(json.dumps({"type": "configure"}))
                assert json.loads(await socket.recv())["type"] == "configured"

    asyncio.run(run())


def test_idle_websocket_is_closed_but_one_speaking_is_not(locked: Server) -> None:
    async def run() -> None:
        headers = {"Authorization": f"Bearer {KEY}"}
        async with websockets.connect(locked.ws_url, additional_headers=headers) as socket:
            await socket.send(json.dumps({"type": "configure"}))
            await socket.recv()
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(socket.recv(), 10)
            assert socket.close_code == 1001
        async with websockets.connect(locked.ws_url, additional_headers=headers) as socket:
            await socket.send(json.dumps({"type": "configure"}))
            await socket.recv()
            # NOTE: long enough to outlast the 1 s idle limit with room to spare (16
            # sentences once took only 1.25 s).
            long_text = " ".join(f"Sentence {i} of a long read." for i in range(48))
            await socket.send(json.dumps({"type": "text", "text": long_text}))
            await socket.send(json.dumps({"type": "flush"}))
            flushed = time.monotonic()
            # The audio takes longer than the idle limit; the session waits for it.
            kinds = []
            while "utterance.done" not in kinds:
                message = await asyncio.wait_for(socket.recv(), 60)
                if isinstance(message, str):
                    kinds.append(json.loads(message)["type"])
            assert [k for k in kinds if k != "clause.done"] == ["audio.start", "utterance.done"]
            assert "clause.done" in kinds
            assert time.monotonic() - flushed > 1.5  # it did outlast the idle limit

    asyncio.run(run())
