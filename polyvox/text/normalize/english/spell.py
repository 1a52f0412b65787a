"""Spelling numbers as American English words.

Hand-written rather than taken from a library: `num2words` is LGPL (kept out of the
Apache-2.0 core) and `inflect` (MIT) would add three dependencies for ~80 lines; neither
reads years, times or digit strings the way a support voice should. See
docs/normalization.md.
"""

from __future__ import annotations

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_TEENS = (
    "ten", "eleven", "twelve", "thirteen", "fourteen",
    "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_IRREGULAR_ORDINALS = {
    "one": "first", "two": "second", "three": "third", "five": "fifth",
    "eight": "eighth", "nine": "ninth", "twelve": "twelfth",
}  # fmt: skip

# Numbers at or above this are read digit by digit: nobody says "four quadrillion ...".
MAX_CARDINAL = 10**15


def digits(number_text: str) -> str:
    """Read a digit string one digit at a time: "0042" -> "zero zero four two"."""
    return " ".join(DIGIT_WORDS[int(char)] for char in number_text if char.isdigit())


def _below_thousand(number: int) -> str:
    hundreds, rest = divmod(number, 100)
    words = [f"{DIGIT_WORDS[hundreds]} hundred"] if hundreds else []
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_TENS[tens] + (f"-{DIGIT_WORDS[ones]}" if ones else ""))
    elif rest >= 10:
        words.append(_TEENS[rest - 10])
    elif rest or not hundreds:
        words.append(DIGIT_WORDS[rest])
    return " ".join(words)


def cardinal(number: int) -> str:
    """Spell a whole number: 1249 -> "one thousand two hundred forty-nine".

    Negative numbers get "minus"; numbers from `MAX_CARDINAL` up are read as digits.
    """
    if number < 0:
        return f"minus {cardinal(-number)}"
    if number >= MAX_CARDINAL:
        return digits(str(number))
    words = []
    for scale, name in _SCALES:
        count, number = divmod(number, scale)
        if count:
            words.append(f"{_below_thousand(count)} {name}")
    if number or not words:
        words.append(_below_thousand(number))
    return " ".join(words)


def ordinal_of_words(words: str) -> str:
    """Turn spelled cardinal words into ordinal ones: "twenty-one" -> "twenty-first"."""
    split_at = max(words.rfind(" "), words.rfind("-")) + 1
    head, last = words[:split_at], words[split_at:]
    if last in _IRREGULAR_ORDINALS:
        last = _IRREGULAR_ORDINALS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + last


def ordinal(number: int) -> str:
    """Spell an ordinal: 14 -> "fourteenth", 21 -> "twenty-first"."""
    return ordinal_of_words(cardinal(number))


def plural_of_words(words: str) -> str:
    """Pluralize spelled number words: "nineteen ninety" -> "nineteen nineties"."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    if words.endswith("x"):
        return words + "es"
    return words + "s"


def decimal(number_text: str) -> str:
    """Read a decimal written with a point: "3.05" -> "three point zero five"."""
    whole, _, fraction = number_text.partition(".")
    whole_words = cardinal(int(whole.replace(",", ""))) if whole else ""
    if not fraction:
        return whole_words
    return f"{whole_words} point {digits(fraction)}".strip()


def year(number: int) -> str:
    """Read a year the way people say it: 1999 -> "nineteen ninety-nine",
    2024 -> "twenty twenty-four", 2005 -> "two thousand five", 1905 -> "nineteen oh five".
    """
    if not 1000 <= number <= 9999:
        return cardinal(number)
    century, rest = divmod(number, 100)
    if 2000 <= number <= 2009 or (century % 10 == 0 and rest == 0):
        return cardinal(number)
    if rest == 0:
        return f"{cardinal(century)} hundred"
    if rest < 10:
        return f"{cardinal(century)} oh {DIGIT_WORDS[rest]}"
    return f"{cardinal(century)} {cardinal(rest)}"


def fraction(numerator: int, denominator: int) -> str:
    """Read a fraction: (1, 2) -> "one half", (3, 4) -> "three quarters",
    (5, 8) -> "five eighths".
    """
    if denominator == 2:
        name = "half" if numerator == 1 else "halves"
    elif denominator == 4:
        name = "quarter" if numerator == 1 else "quarters"
    else:
        name = ordinal(denominator)
        if numerator != 1:
            name = plural_of_words(name)
    return f"{cardinal(numerator)} {name}"


def clock_minutes(minutes: int) -> str:
    """The minutes of a clock time: 5 -> "oh five", 45 -> "forty-five"."""
    if minutes < 10:
        return f"oh {DIGIT_WORDS[minutes]}"
    return cardinal(minutes)
