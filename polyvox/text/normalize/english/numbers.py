"""Rules for numbers on their own: cardinals, decimals, ordinals, years, identifiers,
house numbers, fractions, percentages and units. Signs and ranges are in `compound`.
"""

from __future__ import annotations

import re

from ..base import Spoken
from . import spell
from .context import at_word_start, previous_word_raw, previous_words
from .vocab import (
    IDENTIFIER_LINK_WORDS,
    IDENTIFIER_PHRASES,
    IDENTIFIER_WORDS,
    UNICODE_FRACTIONS,
    UNITS,
    YEAR_CONTEXT_WORDS,
)

# A number as written: "1,249", "1249", "3.5", ".5". Never crosses whitespace.
NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
_END = r"(?![\w])"  # a number must not run into a word: "5kg" is the unit rule's business

_NUMBER = re.compile(rf"(?P<number>{NUMBER}){_END}")
_ORDINAL = re.compile(r"(?P<number>\d{1,3}(?:,\d{3})+|\d+)(?:st|nd|rd|th|ST|ND|RD|TH)(?![\w])")
_DECADE = re.compile(r"'?(?P<number>\d{4}|\d{2})'?s(?![\w])")
_PERCENT = re.compile(rf"(?P<number>{NUMBER})\s?%")
_UNIT_NAMES = "|".join(re.escape(unit) for unit in sorted(UNITS, key=len, reverse=True))
_UNIT = re.compile(rf"(?P<number>{NUMBER})\s?(?P<unit>{_UNIT_NAMES})(?![\w/])")
# The period of an abbreviated unit inside a sentence ("6 ft. tall", "5 lbs. of flour"): a
# lowercase word or a digit follows. Inches only in this form: "6 in." is a unit, "6 in" not.
_UNIT_PERIOD = re.compile(r"\.(?=\s+[a-z0-9])")
_INCHES = re.compile(rf"(?P<number>{NUMBER})\s?in(?=\.\s+[a-z0-9])")
_FRACTION = re.compile(r"(?P<numerator>\d{1,3})/(?P<denominator>\d{1,3})(?![\w/])")
_MIXED_FRACTION = re.compile(
    r"(?P<whole>\d+)(?:\s(?P<numerator>\d{1,2})/(?P<denominator>\d{1,2})(?![\w/])"
    rf"|\s?(?P<glyph>[{''.join(UNICODE_FRACTIONS)}]))"
)
_GLYPH = re.compile(rf"[{''.join(UNICODE_FRACTIONS)}]")
_STREET_TYPES = (
    "St|Street|Ave|Avenue|Rd|Road|Dr|Drive|Blvd|Boulevard|Ln|Lane|Ct|Court|Pl|Place|Way|"
    "Hwy|Highway|Pkwy|Parkway|Cir|Circle|Ter|Terrace|Sq|Square"
)
# "221 Baker St." -- a house number, then one or two capitalized names, then a street type.
_HOUSE_NUMBER = re.compile(
    rf"(?P<number>[1-9]\d{{0,4}})(?=\s(?:[NSEW]\.?\s)?[A-Z][a-z]+(?:\s[A-Z][a-z]+)?"
    rf"\s(?:{_STREET_TYPES})(?![\w]))"
)
_NUMBER_SIGN = re.compile(r"#(?P<number>\d+)(?![\w])")


def number_words(number_text: str) -> str:
    """Spell a written number ("1,249", "3.5", ".5") as words."""
    if "." in number_text:
        return spell.decimal(number_text)
    return spell.cardinal(int(number_text.replace(",", "")))


def _is_identifier_context(text: str, pos: int, number: str) -> bool:
    words = previous_words(text, pos, 2)
    if words and words[-1] in IDENTIFIER_WORDS:
        return True
    if len(words) == 2 and words[-1] in IDENTIFIER_LINK_WORDS and words[0] in IDENTIFIER_WORDS:
        return True
    if tuple(words) in IDENTIFIER_PHRASES:
        return True
    # A US state code before a ZIP code: "Springfield, IL 62704".
    raw = previous_word_raw(text, pos, allow_comma=True)
    return (
        len(number) == 5
        and raw is not None
        and len(raw[0]) == 2
        and raw[0].isupper()
        and raw[0].isalpha()
    )


def plain_number(text: str, pos: int) -> Spoken | None:
    """A bare number: identifiers digit by digit, years as years, the rest as cardinals."""
    match = _NUMBER.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    written = match["number"]
    if "." in written or "," in written:
        return Spoken(match.end(), number_words(written))
    is_digit_string = len(written) > 1 and written.startswith("0")
    if is_digit_string or _is_identifier_context(text, pos, written):
        return Spoken(match.end(), spell.digits(written))
    words = previous_words(text, pos, 1)
    if len(written) == 4 and words and words[0] in YEAR_CONTEXT_WORDS:
        return Spoken(match.end(), spell.year(int(written)))
    return Spoken(match.end(), spell.cardinal(int(written)))


def house_number(text: str, pos: int) -> Spoken | None:
    """A street address number, read the way addresses are said: "221 Baker St." -> "two
    twenty-one", "1600 Pennsylvania Ave." -> "sixteen hundred".
    """
    match = _HOUSE_NUMBER.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    written = match["number"]
    if len(written) <= 2 or (len(written) == 3 and written.endswith("00")):
        words = spell.cardinal(int(written))
    elif len(written) == 3:  # "two twenty-one", "three oh five"
        words = f"{spell.DIGIT_WORDS[int(written[0])]} {spell.clock_minutes(int(written[1:]))}"
    elif len(written) == 4:
        words = spell.year(int(written))
    else:
        words = spell.digits(written)
    return Spoken(match.end(), words)


def ordinal_number(text: str, pos: int) -> Spoken | None:
    """ "14th" -> "fourteenth", "1st" -> "first"."""
    match = _ORDINAL.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    return Spoken(match.end(), spell.ordinal(int(match["number"].replace(",", ""))))


def decade(text: str, pos: int) -> Spoken | None:
    """ "1990s" -> "nineteen nineties", "'80s" -> "eighties"."""
    match = _DECADE.match(text, pos)
    if match is None or not at_word_start(text, pos) or not match["number"].endswith("0"):
        return None
    value = int(match["number"])
    words = spell.year(value) if value >= 1000 else spell.cardinal(value)
    return Spoken(match.end(), spell.plural_of_words(words))


def percent(text: str, pos: int) -> Spoken | None:
    """ "15%" -> "fifteen percent"."""
    match = _PERCENT.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    return Spoken(match.end(), f"{number_words(match['number'])} percent")


def number_with_unit(text: str, pos: int) -> Spoken | None:
    """ "5 kg" -> "five kilograms", "1 mi" -> "one mile", "72°F" -> "seventy-two degrees
    Fahrenheit", "6 ft. tall" -> "six feet tall", "55 in. wide" -> "fifty-five inches wide".
    """
    if not at_word_start(text, pos):
        return None
    match = _UNIT.match(text, pos)
    if match is not None:
        singular, plural = UNITS[match["unit"]]
    else:
        match = _INCHES.match(text, pos)
        if match is None:
            return None
        singular, plural = "inch", "inches"
    name = singular if match["number"] == "1" else plural
    end = match.end()
    is_abbreviated = match.lastgroup != "unit" or match["unit"][-1].isalpha()
    if is_abbreviated and _UNIT_PERIOD.match(text, end):  # not a sentence end: drop it
        end += 1
    return Spoken(end, f"{number_words(match['number'])} {name}")


def simple_fraction(text: str, pos: int) -> Spoken | None:
    """ "3/4" -> "three quarters"; "24/7" and "50/50" as people say them; else "a over b"."""
    match = _FRACTION.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    numerator, denominator = int(match["numerator"]), int(match["denominator"])
    if denominator == 0:
        return None
    if numerator == denominator or (numerator, denominator) == (24, 7):
        words = f"{spell.cardinal(numerator)} {spell.cardinal(denominator)}"
    elif numerator < denominator or denominator <= 4:
        words = spell.fraction(numerator, denominator)
    else:
        words = f"{spell.cardinal(numerator)} over {spell.cardinal(denominator)}"
    return Spoken(match.end(), words)


def _fraction_after_and(numerator: int, denominator: int) -> str:
    if numerator == 1:
        return "a " + spell.fraction(1, denominator).partition(" ")[2]
    return spell.fraction(numerator, denominator)


def mixed_fraction(text: str, pos: int) -> Spoken | None:
    """ "2 1/2" -> "two and a half", "3¾" -> "three and three quarters", "½" -> "one half"."""
    if _GLYPH.match(text, pos):
        numerator, denominator = UNICODE_FRACTIONS[text[pos]]
        return Spoken(pos + 1, spell.fraction(numerator, denominator))
    match = _MIXED_FRACTION.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    if match["glyph"]:
        numerator, denominator = UNICODE_FRACTIONS[match["glyph"]]
    else:
        numerator, denominator = int(match["numerator"]), int(match["denominator"])
        if not 0 < numerator < denominator:
            return None
    whole = spell.cardinal(int(match["whole"]))
    return Spoken(match.end(), f"{whole} and {_fraction_after_and(numerator, denominator)}")


def number_sign(text: str, pos: int) -> Spoken | None:
    """ "#4521" -> "number four five two one", "#1" -> "number one"."""
    match = _NUMBER_SIGN.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    written = match["number"]
    words = spell.cardinal(int(written)) if len(written) <= 2 else spell.digits(written)
    return Spoken(match.end(), f"number {words}")
