"""Refusing a speech request before any of its handling: the 429 that admission control
gives anyway, sent before routing, reading the JSON body into the request model, or
checking the model and voice.

Under overload most requests are refused, and refused callers come back together (a
burst, or the same Retry-After), so the last refusal of a herd waits for every refusal
before it on the one event loop: with the whole handler (~1-2 ms a refusal on a busy
2-core box) a herd of 80 took up to 190 ms to answer. Here a refusal costs a look at
admission's state and one small response. Only the speech endpoint is refused this way
(the WebSocket's turns are asked per utterance), only with the API key when one is
configured (else its handler answers 401), and only with 429 (a server not ready yet
answers 503 from the handler, with the loader's message). A request refused here is not
validated: a bad request during overload gets 429, then its 400 once admitted.
"""

from __future__ import annotations

import json
import time
from typing import Any

from polyvox.server.admission import Rejected
from polyvox.server.auth import carries_key
from polyvox.server.state import ServerState

SPEECH_PATH = "/v1/audio/speech"

Scope = dict[str, Any]


class RefuseEarly:
    """ASGI middleware: POST /v1/audio/speech gets admission's 429 before the app sees it."""

    def __init__(self, app: Any, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST"
                or scope["path"] != SPEECH_PATH or not self.state.admission.is_ready):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        try:
            if carries_key(_header(scope, b"authorization"), self.state.config.api_key):
                self.state.admission.check()
        except Rejected as rejected:
            if rejected.status == 429:
                await _refuse(self.state, rejected, started, receive, send)
                return
        await self.app(scope, receive, send)


async def _refuse(state: ServerState, rejected: Rejected, started: float, receive: Any,
                  send: Any) -> None:
    """Read the body (the connection stays usable for the client's next request), then
    answer as the handler would have."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            break
    error = state.refused(rejected, started)
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()),
               *((name.lower().encode(), value.encode()) for name, value in error.headers.items())]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None
