"""Rules built from other rules: ranges ("5-7", "2-4 PM") and signed numbers ("-5")."""

from __future__ import annotations

import re

from ..base import Rule, Spoken
from . import spell
from .context import at_word_start
from .money import money
from .numbers import NUMBER, number_with_unit, number_words, percent, plain_number
from .times import clock_time

_NUMBER = re.compile(rf"(?P<number>{NUMBER})(?![\w])")
_YEAR = re.compile(r"\d{4}(?![\w])")
_RANGE_DASH = re.compile(r"\s?[-–]\s?(?=[\d.])")
_SIGN = re.compile(r"[-−+](?=\.?\d|\$)")

_RANGE_ENDS: tuple[Rule, ...] = (clock_time, percent, number_with_unit, plain_number)
_SIGNED: tuple[Rule, ...] = (money, percent, number_with_unit, plain_number)


def _first_match(rules: tuple[Rule, ...], text: str, pos: int) -> Spoken | None:
    for rule in rules:
        spoken = rule(text, pos)
        if spoken is not None:
            return spoken
    return None


def _year_range(text: str, pos: int, dash_end: int) -> Spoken | None:
    """ "2020-2024" -> "twenty twenty to twenty twenty-four"."""
    first, second = _YEAR.match(text, pos), _YEAR.match(text, dash_end)
    if first is None or second is None:
        return None
    start_year, end_year = int(first[0]), int(second[0])
    if not 1000 <= start_year < end_year <= 2099:
        return None
    return Spoken(second.end(), f"{spell.year(start_year)} to {spell.year(end_year)}")


def number_range(text: str, pos: int) -> Spoken | None:
    """ "5-7" -> "five to seven", "2-4 PM" -> "two to four PM", "9am-5pm" -> "nine AM
    to five PM", "10-20 kg" -> "ten to twenty kilograms".
    """
    if not at_word_start(text, pos):
        return None
    left = clock_time(text, pos)
    if left is None:
        match = _NUMBER.match(text, pos)
        if match is None:
            return None
        left = Spoken(match.end(), number_words(match["number"]))
    dash = _RANGE_DASH.match(text, left.end)
    if dash is None:
        return None
    year_range = _year_range(text, pos, dash.end())
    if year_range is not None and left.end == pos + 4:
        return year_range
    right = _first_match(_RANGE_ENDS, text, dash.end())
    if right is None:
        return None
    return Spoken(right.end, f"{left.text} to {right.text}")


def signed_number(text: str, pos: int) -> Spoken | None:
    """ "-5" -> "minus five", "+3%" -> "plus three percent", "-$20" -> "minus twenty
    dollars". Only where the sign starts a word, so "COVID-19" keeps its hyphen.
    """
    if _SIGN.match(text, pos) is None:
        return None
    if pos > 0 and not (text[pos - 1].isspace() or text[pos - 1] in "([{\"'"):
        return None
    spoken = _first_match(_SIGNED, text, pos + 1)
    if spoken is None:
        return None
    sign = "plus" if text[pos] == "+" else "minus"
    return Spoken(spoken.end, f"{sign} {spoken.text}")
