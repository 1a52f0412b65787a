"""Which of the client's words each clause speaks.

The engine speaks clauses of *normalized* text ("Dr. Patel owes $5." -> "Doctor Patel owes
five dollars."); a voice agent needs the words the client sent. `WordTracker` runs a text
through the same steps as the engine's `TextPipeline` (cleaning, normalization, clause
splitting; its clauses are identical) and keeps, for every spoken word of every clause,
the client word it came from.

How the mapping is kept, streaming-safe:
- The client's words are the whitespace-separated runs of the cleaned text (what remains
  once invisible and control characters are removed; they are never spoken).
- The normalizer is fed one word at a time. What it returns after each feed is final and
  is the spoken form of the input it consumed since the previous feed
  (`StreamingNormalizer.num_pending_chars` says how much it holds back), so each output
  segment maps to a span of input words. A segment of one word is the common case; a
  pattern over several words ("June 30, 2025", "Dr. Patel") comes out as one segment,
  whose spoken words are spread over its input words in order (one to one when the counts
  are equal).
- The clause splitter keeps every non-space character of its input, in order (it only
  cuts and re-spaces), so the k-th non-space character of the clauses is the k-th of the
  normalized stream: each clause word finds its source through that count.
"""

from __future__ import annotations

import bisect
import re
from typing import NamedTuple

from polyvox.text.pipeline import TextPipeline
from polyvox.text.sanitize import TextCleaner

_WORD_START = re.compile(r"(?<!\S)\S")  # a word's first character


class ClauseWords(NamedTuple):
    """One clause as the engine speaks it, and where its words came from."""

    index: int  # the clause's place in the utterance (0, 1, ...), as AudioChunk.clause_index
    spoken: list[str]  # the clause's normalized words (clause.split())
    sources: list[int]  # for each spoken word, the index of the client word it came from


class ClientWords:
    """The client's words of one utterance: the whitespace-separated runs of its cleaned
    text. Needs no model: a cluster ingress keeps these while its replicas, which hold
    the model's clause splitter, say which of them each clause speaks (WordTracker)."""

    def __init__(self, cleaner: TextCleaner | None = None) -> None:
        self.cleaner = cleaner or TextCleaner()
        self.text = ""  # the cleaned input so far
        self._word_starts: list[int] = []  # where each client word starts in self.text

    @property
    def words(self) -> list[str]:
        """The client's words so far (the last may still grow until more text comes)."""
        ends = self._word_starts[1:] + [len(self.text)]
        return [self.text[start:end].strip() for start, end in zip(self._word_starts, ends)]

    def feed(self, piece: str) -> list[ClauseWords]:
        """Add raw text. No clauses: they come from whoever splits the text."""
        self._add_clean(self.cleaner.feed(piece))
        return []

    def flush(self) -> list[ClauseWords]:
        """The end of the utterance."""
        self._add_clean(self.cleaner.flush())
        return []

    def _add_clean(self, cleaned: str) -> list[int]:
        """Append cleaned text; where the words it starts begin."""
        start = len(self.text)
        self.text += cleaned
        new_starts = [m.start() for m in _WORD_START.finditer(self.text, start)]
        self._word_starts += new_starts
        return new_starts


class WordTracker(ClientWords):
    """The client's words of one utterance, and the clauses that speak them."""

    def __init__(self, pipeline: TextPipeline) -> None:
        super().__init__(pipeline.cleaner)
        self.pipeline = pipeline
        self._fed = 0  # characters of self.text given to the normalizer
        self._consumed = 0  # ... of which it has turned into final spoken text
        self._sources: list[int] = []  # the client word of each non-space spoken char
        self._num_chars_in_clauses = 0  # non-space spoken chars handed out in clauses
        self._num_clauses = 0

    def feed(self, piece: str) -> list[ClauseWords]:
        """Add raw text; the clauses it completed (as the engine's pipeline gives them)."""
        return self._feed_clean(self.cleaner.feed(piece))

    def flush(self) -> list[ClauseWords]:
        """The end of the utterance: the remaining clauses."""
        clauses = self._feed_clean(self.cleaner.flush())
        spoken = self.pipeline.normalizer.flush()
        clauses += self._clauses(self._segment(spoken, len(self.text)))
        return clauses + [self._clause(text) for text in self.pipeline.splitter.flush()]

    def _feed_clean(self, cleaned: str) -> list[ClauseWords]:
        new_starts = self._add_clean(cleaned)
        clauses: list[ClauseWords] = []
        # One word at a time, so that each spoken segment maps to few input words.
        for end in [*new_starts, len(self.text)]:
            if end <= self._fed:
                continue
            normalizer = self.pipeline.normalizer
            spoken = normalizer.feed(self.text[self._fed:end])
            self._fed = end
            clauses += self._clauses(self._segment(spoken, end - normalizer.num_pending_chars))
        return clauses

    def _segment(self, spoken: str, consumed: int) -> str:
        """Attribute a final spoken segment (for input [self._consumed, consumed)) to the
        client words it came from; returns it for the splitter."""
        begin, end = self._consumed, consumed
        self._consumed = consumed
        tokens = spoken.split()
        if not tokens:
            return spoken
        span = self.text[begin:end]
        first = begin + len(span) - len(span.lstrip())  # first and last non-space input
        last = begin + len(span.rstrip()) - 1
        low = max(0, bisect.bisect_right(self._word_starts, first) - 1)
        high = max(low, bisect.bisect_right(self._word_starts, last) - 1)
        for word, token in zip(self._owners(low, high, len(tokens)), tokens):
            self._sources.extend([word] * len(token))
        return spoken

    def _owners(self, low: int, high: int, num_tokens: int) -> list[int]:
        """The client word (low..high) of each of a segment's spoken tokens, in order."""
        count = high - low + 1
        if count == num_tokens:
            return list(range(low, high + 1))
        # A pattern over several words, or the words held back until the end: each word
        # normalized alone says how many tokens it makes; context-dependent readings
        # (a date, a name) may not add up, and then tokens are spread evenly.
        words = self.words[low: high + 1]
        counts = [len(self.pipeline.rules.normalize(word).split()) for word in words]
        if count > 1 and sum(counts) == num_tokens:
            return [low + i for i, n in enumerate(counts) for _ in range(n)]
        return [low + j * count // num_tokens for j in range(num_tokens)]

    def _clauses(self, spoken: str) -> list[ClauseWords]:
        return [self._clause(text) for text in self.pipeline.splitter.feed(spoken)]

    def _clause(self, text: str) -> ClauseWords:
        spoken = text.split()
        sources = []
        for word in spoken:
            # NOTE: the splitter keeps every non-space character in order (invariant).
            position = min(self._num_chars_in_clauses, len(self._sources) - 1)
            sources.append(self._sources[position] if position >= 0 else 0)
            self._num_chars_in_clauses += len(word)
        clause = ClauseWords(self._num_clauses, spoken, sources)
        self._num_clauses += 1
        return clause
