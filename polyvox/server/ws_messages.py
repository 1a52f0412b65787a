"""The client's messages on WS /v1/audio/stream, validated (see docs/websocket.md)."""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from polyvox.server.encoders import MAX_RATE, MIN_RATE
from polyvox.server.errors import validation_error

Message = TypeVar("Message", bound=BaseModel)


class Configure(BaseModel):
    """The session's settings; the first message, once. Unknown fields are refused, so a
    misspelt setting is an error rather than silently the default."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["configure"]
    model: str | None = None
    voice: str | dict[str, Any] = "default"
    format: str = "pcm"
    sample_rate: int | None = Field(None, ge=MIN_RATE, le=MAX_RATE)
    seed: int = Field(0, ge=0, le=2**63 - 1)
    temperature: float | None = Field(None, ge=0.0, le=10.0)
    speed: float = Field(1.0, ge=0.25, le=4.0)
    normalize: bool = True
    word_timings: bool = False  # `words` events: when each of the client's words is spoken


class TextDelta(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class Cancel(BaseModel):
    """Barge-in: stop every utterance not yet done."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["cancel"]


class ProtocolError(Exception):
    """A message the session cannot take: an `error` event, then the session closes."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def parse(text: str) -> dict[str, Any]:
    try:
        message = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProtocolError(f"malformed JSON at line {error.lineno} column {error.colno}: "
                            f"{error.msg}") from None
    if not isinstance(message, dict):
        raise ProtocolError("each message must be a JSON object with a 'type'")
    return message


def validated(message: dict[str, Any], model: type[Message]) -> Message:
    try:
        return model.model_validate(message)
    except ValidationError as error:
        problem = validation_error(list(error.errors()))
        raise ProtocolError(problem.message, problem.param) from None
