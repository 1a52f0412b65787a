"""API keys: with a key configured, every endpoint but /health (and the static page at /,
which holds no data and asks for the key itself) needs `Authorization: Bearer <key>`.

Browsers cannot set headers on a WebSocket, so a WebSocket may instead offer the key as a
subprotocol `bearer.<key>` next to `polyvox`; the server answers with `polyvox`.
"""

from __future__ import annotations

import hmac

from fastapi import Request
from starlette.websockets import WebSocket

from polyvox.server.errors import APIError

BEARER_PROTOCOL_PREFIX = "bearer."


def _matches(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def is_authorized(authorization: str | None, expected: str | None) -> bool:
    """Whether an `Authorization` header carries the configured key (any does without
    one)."""
    return expected is None or _matches(_bearer(authorization), expected)


async def require_api_key(request: Request) -> None:
    """FastAPI dependency: 401 unless the request carries the configured key.

    NOTE: async, though it awaits nothing: FastAPI runs a plain `def` dependency on a
    worker thread, a hop to another thread and back for every request (on a busy box
    the hop waits for the cores the engine uses); this runs on the event loop."""
    authorization = request.headers.get("authorization")
    if is_authorized(authorization, request.app.state.polyvox.config.api_key):
        return
    reason = "missing" if _bearer(authorization) is None else "invalid"
    raise APIError(401, f"{reason} API key: send the header 'Authorization: Bearer <key>'",
                   code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def websocket_is_authorized(websocket: WebSocket, expected: str | None) -> bool:
    if is_authorized(websocket.headers.get("authorization"), expected):
        return True
    offered = websocket.scope.get("subprotocols", [])
    return expected is not None and any(
        _matches(p[len(BEARER_PROTOCOL_PREFIX):], expected)
        for p in offered if p.startswith(BEARER_PROTOCOL_PREFIX))
