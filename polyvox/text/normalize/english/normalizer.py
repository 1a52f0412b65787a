"""`EnglishNormalizer`: the English rules in the order they are tried."""

from __future__ import annotations

from ..base import Rule, RuleNormalizer
from .abbreviations import abbreviation, dotted_abbreviation, initial, symbol
from .compound import number_range, signed_number
from .context import LOOKBEHIND_CHARS, MAX_PATTERN_WORDS
from .dates import day_first_date, month_first_date, numeric_date, short_date, weekday
from .identifiers import (
    card_number,
    code,
    digit_groups,
    email_address,
    mixed_alphanumeric,
    phone_number,
    spelled_word,
    web_address,
)
from .money import money
from .numbers import (
    decade,
    house_number,
    mixed_fraction,
    number_sign,
    number_with_unit,
    ordinal_number,
    percent,
    plain_number,
    simple_fraction,
)
from .times import clock_time

# NOTE: order is priority. Longer, more specific shapes come first so that, for example,
# "555-123-4567" is a phone number before "555-123" can be a range, "2-4 PM" is a range
# of times before "2" is a number, and "5GB" is a unit before it is a code.
ENGLISH_RULES: tuple[Rule, ...] = (
    email_address,
    web_address,
    spelled_word,
    phone_number,
    card_number,
    numeric_date,
    digit_groups,
    short_date,
    number_range,
    clock_time,
    money,
    day_first_date,
    house_number,
    ordinal_number,
    decade,
    percent,
    number_with_unit,
    code,
    mixed_fraction,
    simple_fraction,
    plain_number,
    signed_number,
    number_sign,
    month_first_date,
    weekday,
    dotted_abbreviation,
    abbreviation,
    initial,
    symbol,
    mixed_alphanumeric,
)


class EnglishNormalizer(RuleNormalizer):
    """Written American English in, words for a customer-service voice out.

    >>> EnglishNormalizer().normalize("Your balance is $1,249.50.")
    'Your balance is one thousand two hundred forty-nine dollars and fifty cents.'
    """

    def __init__(self) -> None:
        super().__init__(
            ENGLISH_RULES,
            max_pattern_words=MAX_PATTERN_WORDS,
            lookbehind_chars=LOOKBEHIND_CHARS,
        )
