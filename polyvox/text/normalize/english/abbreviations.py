"""Rules for abbreviations, titles, initials and stand-alone symbols.

"Dr." and "St." have two readings: a title before a name ("Dr. Patel" -> doctor,
"St. Louis" -> saint) and a place after one ("Elm Dr." -> drive, "Baker St." -> street).
A period that closes a place abbreviation at the end of a sentence stays, so the voice
still hears the sentence end: "on Baker St. The office" -> "on Baker Street. The office".
"""

from __future__ import annotations

import re

from ..base import Spoken
from .context import (
    at_word_start,
    next_word_is_capitalized,
    previous_word_raw,
    sentence_ends_after,
)
from .identifiers import say_characters
from .vocab import ABBREVIATIONS, BEFORE_NUMBER_ONLY, DOTTED_WORDS, SYMBOL_WORDS, Abbreviation

_WORD = re.compile(r"(?P<word>[A-Za-z]+)(?P<period>\.)?(?![\w])")
_NUMBER_AHEAD = re.compile(r"\.?\s?#?\d")
_DOTTED_ACRONYM = re.compile(r"(?:[A-Za-z]\.){2,}(?![\w])")
_INITIAL = re.compile(r"(?P<letter>[B-HJ-Z])\.(?=\s+[A-Z][a-z])")
_NEXT_WORD = re.compile(r"\s+(?P<word>[A-Za-z]+)")
_COMPASS_POINTS = frozenset(("N", "S", "E", "W", "NE", "NW", "SE", "SW"))
_TEXT_END = re.compile(r"\s*\Z")
_SYMBOL = re.compile(r"(?P<symbol>w/o|w/|[&@+=])(?=\s)")
_MERIDIEMS = {"am": "AM", "pm": "PM"}


def _match_case(reading: str, written: str) -> str:
    """Capitalize the reading when the abbreviation was: "Dr." -> "Doctor"."""
    return reading[0].upper() + reading[1:] if written[0].isupper() else reading


def _is_place(abbreviation: Abbreviation, text: str, pos: int, end: int) -> bool:
    """Pick the place reading ("Elm Dr.") over the title reading ("Dr. Patel")."""
    if abbreviation.title is None:
        return True
    if abbreviation.place is None:
        return False
    previous = previous_word_raw(text, pos)
    if previous is not None:
        word, is_sentence_start = previous
        if word[0].isdecimal() or (word[0].isupper() and not is_sentence_start):
            return True  # "221 Baker St.", "on 5th Ave.", "at Elm Dr."
    if next_word_is_capitalized(text, end):
        return False  # "Dr. Patel", "Visit St. Louis"
    # "Main St. is closed" vs "the Dr. will see you".
    return previous is not None and previous[0][0].isupper()


def _ends_sentence(text: str, end: int) -> bool:
    """Whether the period that closes a place abbreviation also closes the sentence.

    Not when the name goes on: "King Jr. Blvd.", "Pennsylvania Ave. NW".
    """
    if not sentence_ends_after(text, end):
        return False
    following = _NEXT_WORD.match(text, end)
    if following is None:
        return True
    return following["word"] not in ABBREVIATIONS and following["word"] not in _COMPASS_POINTS


def abbreviation(text: str, pos: int) -> Spoken | None:
    """Titles, street types, company suffixes and other common abbreviations."""
    match = _WORD.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    written, has_period = match["word"], bool(match["period"])
    entry = ABBREVIATIONS.get(written)
    if entry is None or (entry.needs_period and not has_period):
        return None
    if written in BEFORE_NUMBER_ONLY and _NUMBER_AHEAD.match(text, match.end("word")) is None:
        return None
    if _is_place(entry, text, pos, match.end()):
        reading = entry.place
        keeps_period = has_period and _ends_sentence(text, match.end())
    else:  # a title's period only survives at the very end: "Call the Dr."
        reading = entry.title
        keeps_period = has_period and _TEXT_END.match(text, match.end()) is not None
    assert reading is not None, "an abbreviation has at least one reading"
    return Spoken(match.end(), _match_case(reading, written) + ("." if keeps_period else ""))


def dotted_abbreviation(text: str, pos: int) -> Spoken | None:
    """ "e.g." -> "for example"; "U.S." -> "U S"; "a.m." -> "AM"; "A.T.M." -> "A-T M"."""
    if not at_word_start(text, pos):
        return None
    for written, reading in DOTTED_WORDS.items():
        if text.startswith(written, pos):
            end = pos + len(written)
            if end < len(text) and text[end].isalnum():
                return None
            return Spoken(end, reading)
    match = _DOTTED_ACRONYM.match(text, pos)
    if match is None:
        return None
    written = match[0].replace(".", "")
    # "a.m." / "p.m." on their own: "AM" is read as letter names, "a m" as "uh em".
    letters = _MERIDIEMS.get(written.lower()) or say_characters(list(written))
    period = "." if sentence_ends_after(text, match.end()) else ""
    return Spoken(match.end(), letters + period)


def initial(text: str, pos: int) -> Spoken | None:
    """ "John F. Kennedy" -> "John F Kennedy": the period of an initial ends no sentence.

    "A." and "I." are left alone: they end sentences far more often than they start names.
    """
    match = _INITIAL.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    return Spoken(match.end(), match["letter"])


def symbol(text: str, pos: int) -> Spoken | None:
    """A symbol standing alone between spaces: "Q & A" -> "Q and A", "@ 3pm" -> "at"."""
    if pos > 0 and not text[pos - 1].isspace():
        return None
    match = _SYMBOL.match(text, pos)
    if match is None:
        return None
    return Spoken(match.end(), SYMBOL_WORDS[match["symbol"]])
