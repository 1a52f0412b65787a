"""Reading request bodies within limits, and turning them into validated models.

A body over the limit is refused (413) before it is read in full; bytes that are not UTF-8
and malformed JSON are 400s that say where the problem is.
"""

from __future__ import annotations

import json
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.types import Message

from polyvox.server.errors import APIError, validation_error

Model = TypeVar("Model", bound=BaseModel)


def _too_large(limit: int) -> APIError:
    return APIError(413, f"the request body is over the {limit} byte limit")


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


def replay(request: Request, body: bytes) -> Request:
    """A request whose body (already read and checked) is `body`, for parsers that read it
    themselves (multipart forms)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await request.receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)


def parse_json(body: bytes, model: type[Model]) -> Model:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise APIError(400, f"the request body is not valid UTF-8 (byte {error.start}): send "
                       "JSON encoded as UTF-8") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise APIError(400, f"malformed JSON at line {error.lineno} column {error.colno}: "
                       f"{error.msg}") from None
    return validate(data, model)


def validate(data: object, model: type[Model]) -> Model:
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise validation_error(list(error.errors())) from None
