"""One utterance of a WebSocket session (polyvox/server/websocket.py): its text as the
client writes it, handed to the engine as an async stream of pieces, and what of its
audio has gone out (what a `cancelled` acknowledgement reports)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from polyvox.server.word_timings import WordTimeline
from polyvox.text.sanitize import has_speech


class Utterance:
    """One utterance's text as it arrives (None ends it)."""

    def __init__(self, index: int, timeline: WordTimeline | None = None) -> None:
        self.index = index
        self.first_text_at = time.monotonic()
        self.num_chars = 0
        self.has_speech = False  # some text is more than whitespace once cleaned
        self.timeline = timeline  # when the session asked for word timings
        self.num_samples_sent = 0  # audio sent so far, at the output rate
        self._pieces: asyncio.Queue[str | None] = asyncio.Queue()
        self._is_decided = asyncio.Event()  # has_speech, or the utterance ended without

    def add(self, text: str) -> None:
        self.num_chars += len(text)
        self._pieces.put_nowait(text)
        if self.timeline is not None:
            self.timeline.add_text(text)
        if not self.has_speech and has_speech(text):
            self.has_speech = True
            self._is_decided.set()

    def end(self) -> None:
        self._pieces.put_nowait(None)
        if self.timeline is not None:
            self.timeline.end_text()
        self._is_decided.set()

    async def wait_for_speech(self) -> bool:
        """Wait for the first text with something to speak (True), or for the end of an
        utterance that had none (False)."""
        await self._is_decided.wait()
        return self.has_speech

    async def pieces(self) -> AsyncIterator[str]:
        while (piece := await self._pieces.get()) is not None:
            yield piece
