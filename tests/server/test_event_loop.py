"""Requests are handled on the event loop, never on FastAPI's worker threads.

FastAPI runs a plain `def` endpoint or dependency on a worker thread: a hop there and
back per request which, on a box whose cores the engine keeps busy, waits for a core. The
API-key check made 4 such hops per speech request, and a refusal that takes a fraction of
a millisecond on the loop waited behind the engine for them (docs/perf.md). Here the only
worker thread is taken for the whole test: every endpoint must still answer."""

from __future__ import annotations

import asyncio
import threading

import anyio.to_thread
import httpx

from polyvox.cluster.deploy import cluster_router
from polyvox.server.app import create_app
from polyvox.server.config import ServerConfig

KEY = "key"
REQUESTS = [  # (method, path, body): every router the app includes (not loaded: 503 mostly)
    ("POST", "/v1/audio/speech", {"model": "tts-1", "input": "Hi.", "voice": "alloy"}),
    ("GET", "/v1/voices", None),
    ("GET", "/v1/models", None),
    ("GET", "/ready", None),
    ("GET", "/metrics", None),
    ("GET", "/debug/state", None),
    ("GET", "/v1/cluster", None),
    ("GET", "/health", None),
]


def test_every_endpoint_answers_while_no_worker_thread_is_free(tmp_path) -> None:
    app = create_app(ServerConfig(model="pocket/english_2m", data_dir=tmp_path, api_key=KEY,
                                  debug_state=True), routers=[cluster_router()])

    async def ask_all() -> list[tuple[str, int]]:
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = 1
        release = threading.Event()
        holder = asyncio.create_task(anyio.to_thread.run_sync(release.wait))
        await asyncio.sleep(0.05)
        assert limiter.borrowed_tokens == 1  # no worker thread is left
        answers = []
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://polyvox") as client:
                for method, path, body in REQUESTS:
                    for key in (KEY, "wrong"):
                        response = await asyncio.wait_for(client.request(
                            method, path, json=body,
                            headers={"Authorization": f"Bearer {key}"}), timeout=10)
                        answers.append((f"{method} {path} key={key}", response.status_code))
        finally:
            release.set()
            await holder
        return answers

    answers = dict(asyncio.run(ask_all()))
    for request, status in answers.items():
        if request.startswith("GET /health"):
            assert status == 200, request
        elif request.endswith("key=wrong"):
            assert status == 401, request
        else:  # the model is not loaded in this app: not ready, but answered
            assert status in (200, 503), request
    assert answers["GET /metrics key=key"] == 200
    assert answers["POST /v1/audio/speech key=key"] == 503
