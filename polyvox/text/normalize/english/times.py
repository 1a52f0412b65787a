"""Rules for clock times: "3:45 PM" -> "three forty-five PM", "7:05" -> "seven oh five".

The meridiem is written "AM" / "PM": front ends read those as letter names, while "a m"
starts with the article ("uh em", heard as "and M").
"""

from __future__ import annotations

import re

from ..base import Spoken
from . import spell
from .context import at_word_start, sentence_ends_after

_MERIDIEM = r"(?P<meridiem>[AaPp]\.?[Mm]\.?)(?![\w])"
_CLOCK = re.compile(
    rf"(?P<hour>\d{{1,2}}):(?P<minute>\d{{2}})(?::(?P<second>\d{{2}}))?(?:\s?{_MERIDIEM})?"
    r"(?![\w:])"
)
_HOUR_ONLY = re.compile(rf"(?P<hour>\d{{1,2}})\s?{_MERIDIEM}")


def _meridiem_words(text: str, written: str, end: int) -> str:
    words = f"{written[0].upper()}M"
    # "at 3 p.m. Thanks" -- the period closes the abbreviation and the sentence.
    if written.endswith(".") and sentence_ends_after(text, end):
        words += "."
    return words


def clock_time(text: str, pos: int) -> Spoken | None:
    """Read a clock time.

    "3:45 PM" -> "three forty-five PM", "10 a.m." -> "ten AM", "7:05" -> "seven oh
    five", "7:00" -> "seven o'clock", "15:00" -> "fifteen hundred".
    """
    if not at_word_start(text, pos):
        return None
    match = _CLOCK.match(text, pos) or _HOUR_ONLY.match(text, pos)
    if match is None:
        return None
    groups = match.groupdict()
    hour = int(groups["hour"])
    minute = int(groups.get("minute") or 0)
    meridiem = groups["meridiem"]
    if minute > 59 or hour > (12 if meridiem else 24) or (meridiem and hour == 0):
        return None
    words = [spell.cardinal(hour)]
    if minute:
        words.append(spell.clock_minutes(minute))
    if groups.get("second") and int(groups["second"]):
        words.append(f"and {spell.cardinal(int(groups['second']))} seconds")
    if meridiem:
        words.append(_meridiem_words(text, meridiem, match.end()))
    elif not minute:
        words.append("hundred" if hour == 0 or hour > 12 else "o'clock")
    return Spoken(match.end(), " ".join(words))
