"""Rules for amounts of money: "$1,249.50" -> "one thousand two hundred forty-nine dollars and
fifty cents", "€20" -> "twenty euros", "£3.99" -> "three pounds and ninety-nine pence".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..base import Spoken
from . import spell
from .context import at_word_start
from .numbers import NUMBER, number_words
from .vocab import CURRENCY_CODES, CURRENCY_SYMBOLS, MONEY_SCALES, PER_PERIODS, Currency


def _alternatives(words: Iterable[str]) -> str:
    return "|".join(re.escape(word) for word in sorted(words, key=len, reverse=True))


_SYMBOL = _alternatives(CURRENCY_SYMBOLS)
_CODE = _alternatives(CURRENCY_CODES)
_SCALE_WORDS = _alternatives(MONEY_SCALES)
_PER = rf"(?:/(?P<per>{_alternatives(PER_PERIODS)})(?![\w]))?"


def _amount(index: int) -> str:
    """Pattern for an amount with an optional scale word, groups named amount{index} and
    scale{index}: "1,249.50", "2.5M", "3 million".
    """
    return rf"(?P<amount{index}>{NUMBER})(?:\s?(?P<scale{index}>{_SCALE_WORDS})(?![\w]))?"


# NOTE: at most five runs of text ("$1 million - $2 million"), within the streaming limit.
_PREFIXED = re.compile(
    rf"(?P<symbol>{_SYMBOL}){_amount(1)}"
    rf"(?:\s?[-–]\s?(?:{_SYMBOL})?{_amount(2)})?{_PER}(?![\w])"
)
_CODE_PREFIXED = re.compile(rf"(?P<symbol>{_CODE})\s?{_amount(1)}{_PER}(?![\w])")
_SUFFIXED = re.compile(rf"(?P<amount1>{NUMBER})\s?(?P<code>{_CODE}|[€¢])(?![\w])")


def _amount_words(amount: str, scale: str | None, currency: Currency) -> tuple[str, bool]:
    """Spoken amount without the currency name when it goes after it, and whether the
    amount already names the currency (as "... dollars and fifty cents" does).
    """
    if scale:
        return f"{number_words(amount)} {MONEY_SCALES[scale]}", False
    whole, _, fraction = amount.partition(".")
    units = int(whole.replace(",", "") or "0")
    if not fraction or int(fraction) == 0:
        return spell.cardinal(units), False
    if len(fraction) > 2 or currency.subunit is None or currency.subunits is None:
        return number_words(amount), False
    subunits = int(fraction.ljust(2, "0"))
    subunit_name = currency.subunit if subunits == 1 else currency.subunits
    cents = f"{spell.cardinal(subunits)} {subunit_name}"
    if units == 0:
        return cents, True
    unit_name = currency.unit if units == 1 else currency.units
    return f"{spell.cardinal(units)} {unit_name} and {cents}", True


def _currency_name(amount: str, scale: str | None, currency: Currency) -> str:
    is_one = amount.replace(",", "").lstrip("0") in ("1", "1.", "1.0", "1.00") and not scale
    return currency.unit if is_one else currency.units


def _say_amount(amount: str, scale: str | None, currency: Currency) -> str:
    words, has_name = _amount_words(amount, scale, currency)
    return words if has_name else f"{words} {_currency_name(amount, scale, currency)}"


def money(text: str, pos: int) -> Spoken | None:
    """An amount with a currency symbol or code in front or behind.

    "$10-20/hr" -> "ten to twenty dollars per hour", "$2.5M" -> "two point five million
    dollars", "25¢" -> "twenty-five cents", "20 EUR" -> "twenty euros".
    """
    if not at_word_start(text, pos):
        return None
    match = _PREFIXED.match(text, pos) or _CODE_PREFIXED.match(text, pos)
    if match is not None:
        currency = CURRENCY_SYMBOLS.get(match["symbol"]) or CURRENCY_CODES[match["symbol"]]
        first = (match["amount1"], match["scale1"])
        groups = match.groupdict()
        if groups.get("amount2") is None:
            words = _say_amount(*first, currency)
        else:
            second = (groups["amount2"], groups["scale2"])
            # "$10-20" -> "ten to twenty dollars": the currency is said once, at the end.
            left, left_named = _amount_words(*first, currency)
            if left_named:
                left = _say_amount(*first, currency)
            words = f"{left} to {_say_amount(*second, currency)}"
        if match["per"]:
            words += f" per {PER_PERIODS[match['per']]}"
        return Spoken(match.end(), words)
    match = _SUFFIXED.match(text, pos)
    if match is None:
        return None
    if match["code"] == "¢":
        amount = match["amount1"]
        name = "cent" if amount == "1" else "cents"
        return Spoken(match.end(), f"{number_words(amount)} {name}")
    currency = CURRENCY_SYMBOLS["€"] if match["code"] == "€" else CURRENCY_CODES[match["code"]]
    return Spoken(match.end(), _say_amount(match["amount1"], None, currency))
