"""`StreamingNormalizer`: normalization for text that arrives in pieces (an LLM's tokens).

Invariant: for any split of a text into pieces,
    "".join(stream.feed(piece) for piece in pieces) + stream.flush() == normalize(text)
What `feed` returns is final: later input never changes it. It holds back only the last
few words, where a pattern such as "June 30, 2025" or "Dr. Patel" might still be forming.
"""

from __future__ import annotations

from .base import Normalizer


class StreamingNormalizer:
    """Per-request normalization state for one stream of text.

    One instance per request; `flush` ends the stream and resets the instance for reuse.
    """

    def __init__(self, normalizer: Normalizer) -> None:
        self._normalizer = normalizer
        # NOTE: self._text[:self._start] is already-normalized history, kept only as far
        # back as the normalizer's rules may look; self._text[self._start:] is pending.
        self._text = ""
        self._start = 0

    @property
    def num_pending_chars(self) -> int:
        """How many characters of input are held back, waiting for more context."""
        return len(self._text) - self._start

    def feed(self, piece: str) -> str:
        """Add a piece of input; return the spoken text that has become final."""
        if not piece:
            return ""
        self._text += piece
        spoken, end = self._normalizer.normalize_from(self._text, self._start, is_final=False)
        self._keep_history_from(end)
        return spoken

    def flush(self) -> str:
        """End the stream: return the spoken form of everything still held back."""
        spoken, _ = self._normalizer.normalize_from(self._text, self._start, is_final=True)
        self._text, self._start = "", 0
        return spoken

    def _keep_history_from(self, end: int) -> None:
        keep_from = max(0, end - self._normalizer.lookbehind_chars)
        self._text = self._text[keep_from:]
        self._start = end - keep_from
