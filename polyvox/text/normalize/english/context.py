"""What English rules may know about the text around a position.

NOTE: every look back goes through `text_before`, which never reads more than
`LOOKBEHIND_CHARS` characters; every look ahead stays within `MAX_PATTERN_WORDS` runs of
non-space text (see the streaming rule in `..base`). Both limits are what make the
streaming normalizer exact.
"""

from __future__ import annotations

import re

from ..base import is_word_char
from .vocab import MONTH_NUMBERS, WEEKDAY_NAMES, WEEKDAYS

LOOKBEHIND_CHARS = 48
# The longest English read is six runs: "9:00 AM - 5:00 p.m. Monday" -- a time range with
# spaces around the dash, plus the word after it, which decides whether "p.m." also ends
# the sentence. Other patterns stay within five ("+44 20 7946 0958", "14th of March, 2024").
MAX_PATTERN_WORDS = 6

_WORD_BEFORE = re.compile(r"([^\W_]+(?:[.'][^\W_]+)*)[^\w\s]*\s*\Z")
_RAW_WORD_BEFORE = re.compile(r"([^\W_]+)(,?)\s+\Z")
_SENTENCE_END = re.compile(r"(?:\A|[.!?:;]['\")\]]*)\s*\Z")
_CAPITAL_AHEAD = re.compile(r"\s+[A-Z]")
_NEXT_WORD = re.compile(r"\s+([A-Za-z]+)")
# After a token: the end of the text, or whitespace then a capital.
_SENTENCE_END_AHEAD = re.compile(r"\s*\Z|\s+[A-Z]")


# Capitalized words that continue a phrase rather than start a sentence.
NAMES_THAT_CONTINUE = frozenset((*WEEKDAYS, *WEEKDAY_NAMES, *MONTH_NUMBERS))


def text_before(text: str, pos: int) -> str:
    """Up to `LOOKBEHIND_CHARS` characters of text before `pos`."""
    return text[max(0, pos - LOOKBEHIND_CHARS) : pos]


def at_word_start(text: str, pos: int) -> bool:
    """True when the character before `pos` is not a letter or digit."""
    return pos == 0 or not is_word_char(text[pos - 1])


def previous_words(text: str, pos: int, count: int) -> list[str]:
    """The last `count` words before `pos`, lowercased, nearest last, punctuation stripped.

    "Order No. 12" at the "12" gives ["order", "no"] for count 2.
    """
    before = text_before(text, pos)
    words: list[str] = []
    while len(words) < count:
        match = _WORD_BEFORE.search(before)
        if match is None:
            break
        words.insert(0, match.group(1).lower())
        before = before[: match.start()]
    return words


def previous_word_raw(text: str, pos: int, *, allow_comma: bool = False) -> tuple[str, bool] | None:
    """The word right before `pos` as written, and whether it starts its sentence.

    None when there is no word in reach, or when punctuation sits between that word and
    `pos` (a comma is let through with `allow_comma`: "Springfield, IL").
    """
    before = text_before(text, pos)
    match = _RAW_WORD_BEFORE.search(before)
    if match is None or (match[2] and not allow_comma):
        return None
    is_sentence_start = bool(_SENTENCE_END.search(before[: match.start()]))
    if match.start() == 0 and pos >= LOOKBEHIND_CHARS:
        is_sentence_start = False  # the window cut the text; assume mid-sentence
    return match.group(1), is_sentence_start


def sentence_ends_after(text: str, pos: int) -> bool:
    """True when a period that ended at `pos` should also end the sentence: at the end of
    the text, or before a capitalized word that is not a day or month name ("by 5 p.m.
    Friday" goes on).
    """
    if _SENTENCE_END_AHEAD.match(text, pos) is None:
        return False
    following = _NEXT_WORD.match(text, pos)
    return following is None or following[1] not in NAMES_THAT_CONTINUE


def next_word_is_capitalized(text: str, pos: int) -> bool:
    """True when whitespace then an uppercase letter follow `pos`."""
    return _CAPITAL_AHEAD.match(text, pos) is not None
