"""Clients that go away mid-stream: their requests are aborted in the engine and every KV
block and decoder slot goes back to its pool."""

from __future__ import annotations

import asyncio
import json

import httpx
import websockets
from server_harness import Server

LONG_TEXT = " ".join(f"Sentence number {i} is here to make this stream last a while."
                     for i in range(40))
NUM_STREAMS = 100


async def _leave_http_midway(client: httpx.AsyncClient, server: Server, seed: int) -> int:
    body = {"model": "tts-1", "input": LONG_TEXT, "voice": "alloy", "response_format": "pcm",
            "seed": seed}
    async with client.stream("POST", f"{server.url}/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        received = 0
        async for piece in response.aiter_bytes():
            received += len(piece)
            if received >= 9600:  # 0.2 s of audio, then hang up
                return received
    raise AssertionError("the stream ended before the client left")


async def _leave_websocket_midway(server: Server) -> None:
    async with websockets.connect(server.ws_url) as socket:
        await socket.send(json.dumps({"type": "configure"}))
        await socket.recv()
        await socket.send(json.dumps({"type": "text", "text": LONG_TEXT}))
        while not isinstance(await asyncio.wait_for(socket.recv(), 60), bytes):
            pass
    # leaving the block closes the socket with the utterance still going


def test_pools_are_idle_after_100_streams_disconnect(server: Server) -> None:
    async def run() -> None:
        limits = httpx.Limits(max_connections=NUM_STREAMS)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            received = await asyncio.gather(
                *(_leave_http_midway(client, server, seed) for seed in range(NUM_STREAMS - 4)),
                *(_leave_websocket_midway(server) for _ in range(4)))
        assert all(r is None or r >= 9600 for r in received)

    asyncio.run(run())
    state = server.wait_idle(timeout=15)
    assert state["is_consistent"]
    assert state["engine_requests"] == 0
    assert state["kv_blocks_used"] == state["voice_blocks"]
    assert state["decoder_slots_used"] == 0
    metrics = httpx.get(f"{server.url}/metrics").text
    disconnected = [line for line in metrics.splitlines()
                    if line.startswith('polyvox_streams_total{endpoint="speech",'
                                       'outcome="disconnected"}')]
    assert disconnected and float(disconnected[0].split()[-1]) >= NUM_STREAMS - 4
