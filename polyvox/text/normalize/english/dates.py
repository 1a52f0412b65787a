"""Rules for dates: "March 14th" -> "March fourteenth", "02/17/2024" -> "February
seventeenth, twenty twenty-four", "June 30, 2025" -> "June thirtieth, twenty twenty-five".
"""

from __future__ import annotations

import re

from ..base import Spoken
from . import spell
from .context import at_word_start, previous_words, sentence_ends_after
from .vocab import DATE_CONTEXT_WORDS, MONTH_NUMBERS, MONTHS, WEEKDAY_NAMES

_MONTH_NAMES = "|".join(sorted(MONTH_NUMBERS, key=len, reverse=True))
_ORDINAL_SUFFIX = r"(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})(?![\w])"

_MONTH_FIRST = re.compile(
    rf"(?P<month>{_MONTH_NAMES})\.?"
    rf"(?:\s(?P<day>\d{{1,2}}){_ORDINAL_SUFFIX}(?![\w])(?:(?P<comma>,?)\s{_YEAR})?"
    rf"|\s(?P<year_only>\d{{4}})(?![\w]))"
)
_DAY_FIRST = re.compile(
    rf"(?P<day>\d{{1,2}}){_ORDINAL_SUFFIX}(?:\sof)?\s(?P<month>{_MONTH_NAMES})\.?(?![\w])"
    rf"(?:(?P<comma>,?)\s{_YEAR})?"
)
# 02/17/2024, 2-17-24, 17.02.2024 (dots: day first, as in Europe).
_NUMERIC = re.compile(
    r"(?P<first>\d{1,2})(?P<separator>[/.-])(?P<second>\d{1,2})(?P=separator)"
    r"(?P<year>\d{4}|\d{2})(?![\w/])"
)
_ISO = re.compile(r"(?P<year>\d{4})(?P<separator>[-/])(?P<month>\d{2})(?P=separator)"
                  r"(?P<day>\d{2})(?![\w])")  # fmt: skip
_SHORT = re.compile(r"(?P<first>\d{1,2})/(?P<second>\d{1,2})(?![\w/])")
_WEEKDAY = "|".join(sorted(WEEKDAY_NAMES, key=len, reverse=True))
_WEEKDAY_RANGE = re.compile(rf"(?P<first>{_WEEKDAY})\.?\s?[-–]\s?(?P<last>{_WEEKDAY})\.?(?![\w])")
# "Mon. 3/4", "Sat 10-2": a short weekday name before a date or hours.
_WEEKDAY_BEFORE_DATE = re.compile(
    rf"(?P<day>{_WEEKDAY})(?P<period>\.?)(?=,?\s(?:\d|(?:{_MONTH_NAMES})(?![a-z])))"
)
_EXPIRY_WORDS = frozenset(("exp", "expires", "expiry", "expiration"))


def _full_year(written: str) -> int:
    """'24' -> 2024, '99' -> 1999, '2024' -> 2024."""
    if len(written) == 4:
        return int(written)
    return int(written) + (2000 if int(written) < 70 else 1900)


def _say_date(month: int, day: int, year: int | None) -> str:
    words = f"{MONTHS[month - 1]} {spell.ordinal(day)}"
    return words if year is None else f"{words}, {spell.year(year)}"


def _is_valid(month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= 31


def numeric_date(text: str, pos: int) -> Spoken | None:
    """All-number dates with a year: US month-first unless the first part can only be a
    day (17/02/2024) or the parts are dotted (17.02.2024); ISO year-first (2024-02-17).
    """
    if not at_word_start(text, pos):
        return None
    iso = _ISO.match(text, pos)
    if iso is not None:
        month, day = int(iso["month"]), int(iso["day"])
        if not _is_valid(month, day):
            return None
        return Spoken(iso.end(), _say_date(month, day, int(iso["year"])))
    match = _NUMERIC.match(text, pos)
    if match is None:
        return None
    first, second = int(match["first"]), int(match["second"])
    is_day_first = match["separator"] == "." or (first > 12 and second <= 12)
    month, day = (second, first) if is_day_first else (first, second)
    if not _is_valid(month, day):
        return None
    return Spoken(match.end(), _say_date(month, day, _full_year(match["year"])))


def short_date(text: str, pos: int) -> Spoken | None:
    """ "due 3/4" -> "due March fourth": month/day without a year, only after a word that
    says a date follows; "exp 12/25" -> "exp twelve twenty-five" (a card's expiry).
    Elsewhere "3/4" is a fraction.
    """
    match = _SHORT.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    words = previous_words(text, pos, 1)
    first, second = int(match["first"]), int(match["second"])
    if words and words[0] in _EXPIRY_WORDS and 1 <= first <= 12:
        return Spoken(match.end(), f"{spell.cardinal(first)} {spell.cardinal(second)}")
    if not words or words[0] not in DATE_CONTEXT_WORDS or not _is_valid(first, second):
        return None
    return Spoken(match.end(), _say_date(first, second, None))


def month_first_date(text: str, pos: int) -> Spoken | None:
    """ "March 14th" -> "March fourteenth", "Jan. 5, 2024" -> "January fifth, twenty
    twenty-four", "June 2025" -> "June twenty twenty-five".
    """
    match = _MONTH_FIRST.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    month = MONTH_NUMBERS[match["month"]]
    if match["year_only"]:
        return Spoken(match.end(), f"{MONTHS[month - 1]} {spell.year(int(match['year_only']))}")
    day = int(match["day"])
    if not _is_valid(month, day):
        return None
    words = f"{MONTHS[month - 1]} {spell.ordinal(day)}"
    if match["year"]:
        words += f"{match['comma']} {spell.year(int(match['year']))}"
    return Spoken(match.end(), words)


def day_first_date(text: str, pos: int) -> Spoken | None:
    """ "14 March" -> "the fourteenth of March", "the 14th of March, 2024" -> "the
    fourteenth of March, twenty twenty-four".
    """
    match = _DAY_FIRST.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    month, day = MONTH_NUMBERS[match["month"]], int(match["day"])
    if not _is_valid(month, day):
        return None
    has_article = previous_words(text, pos, 1) == ["the"]
    words = f"{'' if has_article else 'the '}{spell.ordinal(day)} of {MONTHS[month - 1]}"
    if match["year"]:
        words += f"{match['comma']} {spell.year(int(match['year']))}"
    return Spoken(match.end(), words)


def weekday(text: str, pos: int) -> Spoken | None:
    """Short weekday names in schedules: "Mon-Fri" -> "Monday to Friday", "Sat. 10-2" ->
    "Saturday ten to two", "Tue, Mar 5" -> "Tuesday, March fifth".
    """
    if not at_word_start(text, pos):
        return None
    single = _WEEKDAY_BEFORE_DATE.match(text, pos)
    if single is not None:
        return Spoken(single.end(), WEEKDAY_NAMES[single["day"]])
    match = _WEEKDAY_RANGE.match(text, pos)
    if match is None:
        return None
    first, last = WEEKDAY_NAMES[match["first"]], WEEKDAY_NAMES[match["last"]]
    period = "." if match[0].endswith(".") and sentence_ends_after(text, match.end()) else ""
    return Spoken(match.end(), f"{first} to {last}{period}")
