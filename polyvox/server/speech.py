"""POST /v1/audio/speech: OpenAI's speech API, streamed.

The body is OpenAI's (model, input, voice, response_format, speed, stream_format,
instructions) plus polyvox's own optional fields (seed, temperature, sample_rate). The
audio streams as it is made: raw bytes of the format (stream_format "audio") or
server-sent events whose base64 deltas concatenate to the same bytes ("sse").

A request that admission would refuse now for load gets its 429 before it is routed or
its body read (`RefuseEarly`, installed by app.py).

Response headers go out with the first audio, so a request the engine refuses still gets
a proper 4xx; after that, a failure breaks the connection (audio) or ends with an
`error` event (sse).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from polyvox.engine.engine import EngineError
from polyvox.server.admission import Ticket
from polyvox.server.auth import is_authorized, require_api_key
from polyvox.server.bodies import parse_json, read_body
from polyvox.server.catalog import resolve_model, resolve_voice
from polyvox.server.encoders import MAX_RATE, MIN_RATE, Encoder, format_error
from polyvox.server.errors import APIError
from polyvox.server.state import LiveStream, ServerState
from polyvox.server.streaming import StreamResponse
from polyvox.text.sanitize import clean_text, encodable

log = logging.getLogger(__name__)
PATH = "/v1/audio/speech"
router = APIRouter(dependencies=[Depends(require_api_key)])


class SpeechBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    input: str
    voice: str | dict[str, Any]
    instructions: str | None = None  # accepted for compatibility; the models take none
    response_format: str = "mp3"  # OpenAI's default
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio", "sse"] = "audio"
    # polyvox's own
    seed: int = Field(0, ge=0, le=2**63 - 1)
    temperature: float | None = Field(None, ge=0.0, le=10.0)
    sample_rate: int | None = Field(None, ge=MIN_RATE, le=MAX_RATE)
    normalize: bool = True  # read numbers, dates, codes, ... as words


def check_text(text: str, limit: int, param: str = "input") -> str:
    """The text to speak, cleaned (`clean_text`), or a 400 saying why there is none."""
    cleaned = clean_text(text)
    if not cleaned.strip():
        detail = "" if not text.strip() else (
            " once control and invisible formatting characters are removed (it holds only "
            "such characters: NUL, zero-width spaces, bidi marks, lone surrogates, ...)")
        raise APIError(400, f"{param} is empty{detail}: give at least one word to speak",
                       param=param)
    if len(text) > limit:
        raise APIError(400, f"{param} is {len(text)} characters, over the limit of {limit}: "
                       "split it into several requests (or stream it over the WebSocket)",
                       param=param)
    return cleaned


@router.post(PATH)
async def create_speech(request: Request) -> Response:
    started = time.monotonic()
    state: ServerState = request.app.state.polyvox
    try:
        served = state.served
        body = parse_json(await read_body(request, state.config.max_body_bytes), SpeechBody)
        resolve_model(body.model, served.name)
        text = check_text(body.input, state.config.max_input_chars)
        voice = resolve_voice(body.voice, served.voice_names())
        problem = format_error(body.response_format)
        if problem:
            raise APIError(400, problem, param="response_format")
        params = state.params(body.seed, body.temperature, body.speed)
    except APIError as error:
        if error.status < 500:
            state.metrics.bad_requests.labels("speech").inc()
        # NOTE: a message or param may quote what the client sent (a JSON "\ud800" is a
        # lone surrogate), and the response must still encode as UTF-8.
        error.message = encodable(error.message)
        if error.param is not None:
            error.param = encodable(error.param)
        raise
    encoder = Encoder(body.response_format, served.sample_rate, body.sample_rate)
    ticket = await _admit_unless_gone(request, state, started)
    if ticket is None:
        return Response(status_code=499)  # nobody is listening any more
    stream = state.start(text, voice, params, ticket, "speech", started, body.normalize)
    try:
        first = await stream.next()
    except EngineError as error:
        await stream.close()
        raise APIError(400, f"the request was refused: {error}") from None
    except BaseException:
        await stream.close()
        raise
    if body.stream_format == "sse":
        content, media_type = _sse_body(first, stream, encoder, len(text)), "text/event-stream"
    else:
        content, media_type = _audio_body(first, stream, encoder), encoder.media_type
    headers = {"X-Sample-Rate": str(encoder.sample_rate), "Cache-Control": "no-cache"}
    return StreamResponse(content, on_close=stream.close, media_type=media_type,
                          headers=headers)


async def _admit_unless_gone(request: Request, state: ServerState,
                             started: float) -> Ticket | None:
    """Wait for a turn, but give up the place in the queue if the client leaves."""
    admit = asyncio.ensure_future(state.admit(started))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({admit, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not admit.done():
            admit.cancel()
    if admit.cancelled():
        return None
    return admit.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _audio_body(first: np.ndarray | None, stream: LiveStream,
                      encoder: Encoder) -> AsyncIterator[bytes]:
    samples = first
    while samples is not None:
        data = encoder.encode(samples)
        if data:
            yield data
        samples = await stream.next()
    tail = encoder.finish()
    if tail:
        yield tail


def _event(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def _sse_body(first: np.ndarray | None, stream: LiveStream, encoder: Encoder,
                    num_chars: int) -> AsyncIterator[bytes]:
    try:
        async for data in _audio_body(first, stream, encoder):
            yield _event({"type": "speech.audio.delta",
                          "audio": base64.b64encode(data).decode("ascii")})
    except EngineError as error:
        log.warning("speech stream failed: %s", error)
        yield _event({"type": "error", "error": {"message": f"generation failed: {error}",
                                                 "type": "server_error", "param": None,
                                                 "code": None}})
        return
    yield _event({"type": "speech.audio.done",
                  "usage": {"input_characters": num_chars,
                            "audio_seconds": round(encoder.num_samples / encoder.sample_rate,
                                                   3)}})


class RefuseEarly:
    """ASGI middleware: a speech request that admission would refuse now for load gets its
    429 before FastAPI routes it and before its body is read.

    NOTE: a refusal is what an overloaded server answers most, all at once in a burst, on
    the cores the engine uses: the route (dependencies, body, validation, an encoder,
    exception handlers) made it cost 0.47 ms of CPU against 0.2 for /health (docs/perf.md).
    The price: a request that is also malformed learns of it when it comes back, as behind
    any rate limiter. A request without the key still gets its 401 from the route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == PATH:
            started = time.monotonic()
            state: ServerState = scope["app"].state.polyvox
            if is_authorized(Headers(scope=scope).get("authorization"), state.config.api_key):
                error = state.refusal_now(started)
                if error is not None:
                    await error.response()(scope, receive, send)
                    return
        await self.app(scope, receive, send)
