"""A request's text path: normalization, then clause splitting, for text that arrives
whole or in pieces. Normalization is streaming-safe, so a number, email or abbreviation
split across pieces is spoken exactly as if it had arrived whole."""

from __future__ import annotations

from collections.abc import Callable

from polyvox.text.clauses import ClauseSplitter
from polyvox.text.normalize import StreamingNormalizer, make_normalizer


class TextPipeline:
    def __init__(self, count_tokens: Callable[[str], int], max_tokens: int,
                 normalize: bool = True, language: str = "en",
                 first_max_tokens: int | None = None) -> None:
        self.normalizer = StreamingNormalizer(make_normalizer(language, enabled=normalize))
        self.splitter = ClauseSplitter(count_tokens, max_tokens, first_max_tokens)

    def feed(self, text: str) -> list[str]:
        """Add raw text; return the clauses (normalized) it completed."""
        return self.splitter.feed(self.normalizer.feed(text))

    def flush(self) -> list[str]:
        """The end of the input: the remaining clauses."""
        return self.splitter.feed(self.normalizer.flush()) + self.splitter.flush()
