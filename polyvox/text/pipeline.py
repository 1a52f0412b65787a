"""A request's text path: cleaning, normalization, then clause splitting, for text that
arrives whole or in pieces. Every step is streaming-safe, so a number, email or
abbreviation split across pieces is spoken exactly as if it had arrived whole.

Cleaning (`polyvox.text.sanitize`) runs whether or not normalization is on: no model ever
sees a control character, a format character or a lone surrogate."""

from __future__ import annotations

from collections.abc import Callable

from polyvox.text.clauses import ClauseSplitter
from polyvox.text.normalize import StreamingNormalizer, make_normalizer
from polyvox.text.sanitize import TextCleaner


class TextPipeline:
    def __init__(self, count_tokens: Callable[[str], int], max_tokens: int,
                 normalize: bool = True, language: str = "en",
                 first_max_tokens: int | None = None) -> None:
        self.cleaner = TextCleaner()
        self.rules = make_normalizer(language, enabled=normalize)  # stateless (WordTracker)
        self.normalizer = StreamingNormalizer(self.rules)
        self.splitter = ClauseSplitter(count_tokens, max_tokens, first_max_tokens)

    def feed(self, text: str) -> list[str]:
        """Add raw text; return the clauses (cleaned and normalized) it completed."""
        return self.splitter.feed(self.normalizer.feed(self.cleaner.feed(text)))

    def flush(self) -> list[str]:
        """The end of the input: the remaining clauses."""
        rest = self.normalizer.feed(self.cleaner.flush()) + self.normalizer.flush()
        return self.splitter.feed(rest) + self.splitter.flush()
