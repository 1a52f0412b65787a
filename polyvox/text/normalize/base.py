"""The language-independent part of text normalization: the contract and the scanner.

A normalizer turns written text ("$1,249.50 due 02/17/2024") into the words a voice should
say ("one thousand two hundred forty-nine dollars and fifty cents due February seventeenth,
twenty twenty-four"). Languages plug in as an ordered list of rules; `RuleNormalizer` runs
them left to right over the text.

NOTE (the streaming rule): a rule called at `pos` may read
  - at most `lookbehind_chars` characters before `pos`, and
  - at most `max_pattern_words` whitespace-separated runs from `pos` on (the run `pos` is in
    counts as the first), plus the first character of the run after those.
Given that, a rule's answer at `pos` is fixed as soon as the text holds the start of run
`max_pattern_words + 1`, whatever arrives later. `normalize_from(..., is_final=False)`
stops exactly where that is not yet true, which is what makes `StreamingNormalizer` give
the same output for any split of the input.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol


class Spoken(NamedTuple):
    """What one rule made of the text from its start position up to `end`."""

    end: int  # index just past the written text the rule consumed
    text: str  # the spoken form of text[start:end]


class Normalized(NamedTuple):
    """What `Normalizer.normalize_from` hands back: spoken text for `text[start:end]`."""

    spoken: str
    end: int


# A rule gets the whole text and a start position and either claims text[pos:end] or
# returns None. It must keep to the reading limits in the module NOTE.
Rule = Callable[[str, int], Spoken | None]


class Normalizer(Protocol):
    """Written text in, spoken words out, for one language.

    `normalize_from` is the streaming contract: with `is_final=False` it only returns
    output that no continuation of `text` can change, and says where it stopped.
    """

    @property
    def lookbehind_chars(self) -> int:
        """How many characters before `start` `normalize_from` may read."""
        ...

    def normalize(self, text: str) -> str:
        """The spoken form of a complete text."""
        ...

    def normalize_from(self, text: str, start: int, *, is_final: bool) -> Normalized:
        """Normalize `text` from `start`; stop early when more input could change it."""
        ...


class NoOpNormalizer:
    """A normalizer that changes nothing: what a request with normalization off gets."""

    lookbehind_chars = 0

    def normalize(self, text: str) -> str:
        """Return `text` unchanged."""
        return text

    def normalize_from(self, text: str, start: int, *, is_final: bool) -> Normalized:
        """Return `text[start:]` unchanged; nothing ever needs holding back."""
        return Normalized(text[start:], len(text))


def is_word_char(char: str) -> bool:
    """Letters and decimal digits make up words; "¼" or "²" stand alone."""
    return char.isalpha() or char.isdecimal()


def _passthrough(text: str, pos: int) -> Spoken:
    """The unit copied when no rule matches: a whole word, or one other character.

    Taking a whole word at once keeps rules from ever starting in the middle of one.
    """
    end = pos + 1
    if is_word_char(text[pos]):
        while end < len(text) and is_word_char(text[end]):
            end += 1
    return Spoken(end, text[pos:end])


def _run_starts(text: str, start: int) -> list[int]:
    """Indices after `start` where a non-space character follows whitespace."""
    return [
        index
        for index in range(max(start, 1), len(text))
        if text[index - 1].isspace() and not text[index].isspace()
    ]


class RuleNormalizer:
    """Runs an ordered list of rules left to right; the first rule that matches wins.

    Whitespace and anything no rule claims are copied unchanged, so text without any
    pattern passes through exactly.
    """

    def __init__(
        self, rules: Sequence[Rule], *, max_pattern_words: int, lookbehind_chars: int
    ) -> None:
        if max_pattern_words < 1 or lookbehind_chars < 0:
            raise ValueError(
                f"max_pattern_words must be >= 1 and lookbehind_chars >= 0, got "
                f"{max_pattern_words} and {lookbehind_chars}"
            )
        self._rules = tuple(rules)
        self._max_pattern_words = max_pattern_words
        self._lookbehind_chars = lookbehind_chars

    @property
    def lookbehind_chars(self) -> int:
        """How many characters before a position the rules may read."""
        return self._lookbehind_chars

    def normalize(self, text: str) -> str:
        """The spoken form of a complete text."""
        return self.normalize_from(text, 0, is_final=True).spoken

    def normalize_from(self, text: str, start: int, *, is_final: bool) -> Normalized:
        """Normalize `text[start:]`, stopping where more input could change the output."""
        run_starts = [] if is_final else _run_starts(text, start)
        pieces: list[str] = []
        pos = start
        while pos < len(text):
            if text[pos].isspace():
                end = pos + 1
                while end < len(text) and text[end].isspace():
                    end += 1
                if end == len(text) and not is_final:
                    break  # the whitespace run may go on
                pieces.append(text[pos:end])
                pos = end
                continue
            if not is_final:
                num_runs_ahead = len(run_starts) - bisect.bisect_right(run_starts, pos)
                if num_runs_ahead < self._max_pattern_words:
                    break  # a rule here could still read text that has not arrived
            spoken = self._apply_rules(text, pos)
            if spoken.end <= pos:
                raise AssertionError(f"a normalizer rule consumed nothing at {pos}: {spoken}")
            pieces.append(spoken.text)
            pos = spoken.end
        return Normalized("".join(pieces), pos)

    def _apply_rules(self, text: str, pos: int) -> Spoken:
        for rule in self._rules:
            spoken = rule(text, pos)
            if spoken is not None:
                return spoken
        return _passthrough(text, pos)
