"""Spell numbers as words, so a transcript's "3" and a reference's "three" compare equal.

This is a scoring aid, not a text-to-speech normalizer: it picks one canonical reading
per written form and applies it to reference and hypothesis alike. Readings:

    114     -> one hundred fourteen          (no "and"; see `drop_number_and`)
    1,250   -> one thousand two hundred fifty
    3.05    -> three point zero five
    14th    -> fourteenth
    $5.50   -> five dollars fifty cents
    3:45    -> three forty five      3:05 -> three oh five      3:00 -> three oclock
    20%     -> twenty percent
    1990s   -> one thousand nine hundred nineties

Years are read as cardinals ("1990" -> "one thousand nine hundred ninety"): both sides of
a comparison usually write them the same way, so the reading only needs to be consistent.
"""

from __future__ import annotations

import re

# fmt: off
ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
        "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
        "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
# fmt: on
# Short scale; numbers of 10**18 and more are read digit by digit.
SCALES = (
    (10**15, "quadrillion"),
    (10**12, "trillion"),
    (10**9, "billion"),
    (10**6, "million"),
    (10**3, "thousand"),
)
MAX_CARDINAL = 10**18 - 1

_IRREGULAR_ORDINALS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}

NUMBER_WORDS = frozenset(ONES + TENS[2:] + ["hundred"] + [name for _, name in SCALES])


def _below_thousand(value: int) -> list[str]:
    """0 < value < 1000 -> words."""
    words: list[str] = []
    hundreds, rest = divmod(value, 100)
    if hundreds:
        words += [ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(TENS[tens])
        if ones:
            words.append(ONES[ones])
    elif rest:
        words.append(ONES[rest])
    return words


def cardinal(value: int) -> list[str]:
    """A non-negative integer as words: 1250 -> one thousand two hundred fifty."""
    if value < 0:
        return ["minus", *cardinal(-value)]
    if value == 0:
        return ["zero"]
    if value > MAX_CARDINAL:
        return digits(str(value))
    words: list[str] = []
    for size, name in SCALES:
        count, value = divmod(value, size)
        if count:
            words += [*_below_thousand(count), name]
    if value:
        words += _below_thousand(value)
    return words


def digits(text: str) -> list[str]:
    """Digit by digit: "05" -> zero five."""
    return [ONES[int(char)] for char in text]


def ordinal(value: int) -> list[str]:
    """14 -> fourteenth, 21 -> twenty first, 100 -> one hundredth."""
    words = cardinal(value)
    last = words[-1]
    if last in _IRREGULAR_ORDINALS:
        words[-1] = _IRREGULAR_ORDINALS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return words


def plural(words: list[str]) -> list[str]:
    """The 1990s / the 90s: pluralize the last number word (ninety -> nineties)."""
    last = words[-1]
    if last.endswith("y"):
        last = last[:-1] + "ies"
    elif last.endswith("x"):
        last += "es"
    else:
        last += "s"
    return [*words[:-1], last]


def decimal(text: str) -> list[str]:
    """ "3.05" -> three point zero five; ".5" -> zero point five."""
    whole, _, fraction = text.partition(".")
    words = cardinal(int(whole or "0"))
    if fraction:
        words += ["point", *digits(fraction)]
    return words


def money(amount: str, scale: str | None = None) -> list[str]:
    """ "5.50" -> five dollars fifty cents; with a scale word ("$5 million") the scale
    stays with the number: five million dollars."""
    if scale:
        return [*decimal(amount), scale, "dollars"]
    whole, _, fraction = amount.partition(".")
    dollars = int(whole or "0")
    if len(fraction) > 2:  # $1.005: not a cents amount, read as a number
        return [*decimal(amount), "dollars"]
    cents = int(fraction.ljust(2, "0")) if fraction else 0
    words: list[str] = []
    if dollars or not cents:
        words += [*cardinal(dollars), "dollar" if dollars == 1 else "dollars"]
    if cents:
        words += [*cardinal(cents), "cent" if cents == 1 else "cents"]
    return words


def clock_time(hours: str, minutes: str) -> list[str]:
    """ "3", "45" -> three forty five; "3", "05" -> three oh five; "3", "00" -> three
    oclock (the apostrophe is dropped like every other one)."""
    words = cardinal(int(hours))
    minute = int(minutes)
    if minute == 0:
        return [*words, "oclock"]
    if minute < 10:
        return [*words, "oh", ONES[minute]]
    return [*words, *cardinal(minute)]


# One written number, with what may surround it. Thousands separators must come in
# groups of three ("1,250"), so "3,4" stays two numbers.
_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
_TOKEN = re.compile(
    rf"""
    (?P<time>(?P<hours>\d{{1,2}}):(?P<minutes>\d{{2}}))(?!\d)
  | (?P<money>\$(?P<amount>{_NUMBER})(?:\s+(?P<scale>{"|".join(n for _, n in SCALES)})\b)?)
  | (?P<sign>-)?(?P<number>{_NUMBER})
      (?:(?P<ordinal>st|nd|rd|th)|(?P<plural>'?s)|(?P<percent>\s?%))?
      (?![A-Za-z0-9])
    """,
    re.VERBOSE | re.IGNORECASE,
)


def _spell(match: re.Match[str]) -> str:
    if match["time"]:
        words = clock_time(match["hours"], match["minutes"])
    elif match["money"]:
        words = money(match["amount"].replace(",", ""), match["scale"])
    else:
        number = match["number"].replace(",", "")
        is_integer = "." not in number
        if match["ordinal"] and is_integer:
            words = ordinal(int(number))
        else:
            words = cardinal(int(number)) if is_integer else decimal(number)
            if match["ordinal"]:  # "1.5th": not an ordinal, keep the suffix as a word
                words.append(match["ordinal"].lower())
            if match["plural"] and is_integer:
                words = plural(words)
            if match["percent"]:
                words.append("percent")
        if match["sign"] and _starts_word(match):
            words = ["minus", *words]
        elif match["sign"]:
            return " " + " ".join(words)  # "3-4": the hyphen joins, it is not a sign
    return " " + " ".join(words) + " "


def _starts_word(match: re.Match[str]) -> bool:
    """A '-' is a minus sign only at the start of a word ("-5", not "3-5")."""
    start = match.start()
    return start == 0 or match.string[start - 1].isspace()


def spell_numbers(text: str) -> str:
    """Replace every written number in `text` with words (see the module docstring)."""
    return _TOKEN.sub(_spell, text)


def drop_number_and(words: list[str]) -> list[str]:
    """ "one hundred and fourteen" -> "one hundred fourteen", matching how `cardinal`
    reads 114; an "and" elsewhere ("bread and butter") stays."""
    kept: list[str] = []
    for index, word in enumerate(words):
        is_inside_number = (
            word == "and"
            and 0 < index < len(words) - 1
            and words[index - 1] in ("hundred", *(name for _, name in SCALES))
            and words[index + 1] in NUMBER_WORDS
        )
        if not is_inside_number:
            kept.append(word)
    return kept
