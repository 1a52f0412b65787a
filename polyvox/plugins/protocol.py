"""The client side of WS /v1/audio/stream that both plugins share (docs/websocket.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

STREAM_PATH = "/v1/audio/stream"
SUBPROTOCOL = "polyvox"


@dataclass(frozen=True)
class PolyvoxOptions:
    """What a plugin asks the server for. `url` is the server's base URL
    (`http://host:8000`) or the WebSocket's own (`ws://host:8000/v1/audio/stream`)."""

    url: str = "http://127.0.0.1:8000"
    api_key: str | None = None
    voice: str = "default"
    speed: float = 1.0
    sample_rate: int | None = None  # None: the model's
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.25 <= self.speed <= 4.0:
            raise ValueError(f"speed must be between 0.25 and 4.0, got {self.speed}")
        if self.sample_rate is not None and not 8000 <= self.sample_rate <= 48000:
            raise ValueError(f"sample_rate must be 8000 to 48000 Hz, got {self.sample_rate}")

    @property
    def ws_url(self) -> str:
        parts = urlsplit(self.url)
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        if scheme not in ("ws", "wss"):
            raise ValueError(f"url must be http(s):// or ws(s)://, got {self.url!r}")
        path = parts.path.rstrip("/")
        if not path.endswith(STREAM_PATH):
            path += STREAM_PATH
        return urlunsplit((scheme, parts.netloc, path, parts.query, ""))

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def configure(self, sample_rate: int | None = None) -> str:
        """The session's first message: 16-bit PCM, with word timings."""
        message: dict[str, Any] = {"type": "configure", "voice": self.voice, "format": "pcm",
                                   "speed": self.speed, "seed": self.seed,
                                   "word_timings": True}
        rate = sample_rate or self.sample_rate
        if rate is not None:
            message["sample_rate"] = rate
        return json.dumps(message)


def text(piece: str) -> str:
    return json.dumps({"type": "text", "text": piece})


FLUSH = json.dumps({"type": "flush"})
CANCEL = json.dumps({"type": "cancel"})
END = json.dumps({"type": "end"})


class ServerError(RuntimeError):
    """An `error` event from the server (the session is over)."""

    def __init__(self, event: dict[str, Any]) -> None:
        error = event.get("error", {})
        super().__init__(f"polyvox: {error.get('message', event)}")
        self.code = error.get("code")
        self.retry_after = retry_after_seconds(event.get("retry_after_ms"),
                                               event.get("retry_after"))


def retry_after_seconds(milliseconds: Any, seconds: Any) -> float | None:
    """How long a refused client waits, in seconds: the server's Retry-After-Ms (or an
    error event's `retry_after_ms`) where it sent one, else its whole seconds, as OpenAI's
    clients read them; None when it sent neither."""
    if milliseconds is not None:
        return float(milliseconds) / 1000
    return None if seconds is None else float(seconds)
