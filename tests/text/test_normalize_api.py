"""Passthrough, switching normalization off, sentence boundaries, and the rule contract
that makes streaming exact.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_normalize_streaming import texts

from polyvox.text.normalize import (
    EnglishNormalizer,
    NoOpNormalizer,
    make_normalizer,
    sentence_boundaries,
    split_sentences,
)
from polyvox.text.normalize.english import ENGLISH_RULES, spell
from polyvox.text.normalize.english.context import LOOKBEHIND_CHARS, MAX_PATTERN_WORDS

NORMALIZER = EnglishNormalizer()

PLAIN_SENTENCES = [
    "Hello, how can I help you today?",
    "I'm sorry to hear that. Let me check on that for you!",
    "Thanks for calling; have a great day.",
    '"Sure," she said. (It\'s fine.)',
    "May I have your name, please?",
    "The A-team is here, and I am at home.",
    "No, thanks. We're all set -- see you soon...",
    "Please hold while I transfer you to billing.",
    "Is there anything else I can help with?\nGoodbye.",
    "Our store on Main Street opens early on Monday.",
]
PLAIN_WORDS = (
    "hello", "thanks", "please", "your", "order", "account", "billing", "help", "today", "we",
    "you", "it", "is", "was", "the", "a", "an", "and", "or", "but", "sorry", "check", "call",
    "back", "soon", "great", "day", "team", "agent", "store", "street", "on", "at", "in",
)  # fmt: skip


@pytest.mark.parametrize("sentence", PLAIN_SENTENCES)
def test_plain_sentences_pass_through_unchanged(sentence: str) -> None:
    assert NORMALIZER.normalize(sentence) == sentence


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(PLAIN_WORDS).map(lambda word: word.capitalize())
            | st.sampled_from(PLAIN_WORDS),
            st.sampled_from([" ", ", ", ". ", "! ", "? ", "; ", "\n", " -- ", "'s "]),
        ),
        max_size=20,
    )
)
def test_random_plain_text_passes_through_unchanged(parts: list[tuple[str, str]]) -> None:
    text = "".join(word + separator for word, separator in parts)
    assert NORMALIZER.normalize(text) == text


def test_disabled_normalizer_returns_input_unchanged() -> None:
    text = "Dr. Patel, $1,249.50, 3:45 PM, j.smith@example.com, A7X-392-KQ."
    disabled = make_normalizer("en", enabled=False)
    assert isinstance(disabled, NoOpNormalizer)
    assert disabled.normalize(text) == text


def test_make_normalizer_accepts_regional_codes_and_rejects_unknown_languages() -> None:
    assert make_normalizer("en-US").normalize("5 kg") == "five kilograms"
    with pytest.raises(ValueError, match="supported: en"):
        make_normalizer("xx")
    assert make_normalizer("xx", enabled=False).normalize("5") == "5"


def test_sentence_boundaries_do_not_cut_inside_numbers_emails_or_abbreviations() -> None:
    text = "Dr. Patel paid $3.50 to j.smith@example.com at 3 p.m. Call 555-0142 now."
    spoken = NORMALIZER.normalize(text)
    first = (
        "Doctor Patel paid three dollars and fifty cents to j dot smith at example dot com at"
        " three PM."
    )
    assert split_sentences(spoken) == [first, " Call five five five, zero one four two now."]


def test_sentence_boundaries_hold_back_a_possible_end_until_more_text_arrives() -> None:
    assert sentence_boundaries("Hi. Wait...") == [3, 11]
    assert sentence_boundaries("Hi. Wait..", is_final=False) == [3]
    assert sentence_boundaries('He said "no." Then left') == [13]


def test_distinct_numbers_are_spelled_differently() -> None:
    """A wrong digit is the worst mistake: no two numbers may sound alike."""
    numbers = [*range(20_000), *range(999_000, 1_001_000), 10**12 + 7, 10**15 - 1]
    spelled = {spell.cardinal(number) for number in numbers}
    assert len(spelled) == len(numbers)
    years = {spell.year(number) for number in range(1000, 2100)}
    assert len(years) == 1100


@settings(max_examples=300, deadline=None)
@given(texts(), st.data())
def test_rules_read_no_further_than_the_streaming_contract_allows(
    text: str, data: st.DataObject
) -> None:
    """Each rule gives the same answer on any text that agrees on the window it may read:
    `LOOKBEHIND_CHARS` back and `MAX_PATTERN_WORDS` runs (plus one character) ahead.
    """
    if not text:
        return
    pos = data.draw(st.integers(0, len(text) - 1))
    run_starts = [
        index
        for index in range(pos + 1, len(text))
        if text[index - 1].isspace() and not text[index].isspace()
    ]
    if len(run_starts) < MAX_PATTERN_WORDS:
        return
    window_end = run_starts[MAX_PATTERN_WORDS - 1] + 1
    cut = data.draw(st.integers(window_end, len(text)))
    start = max(0, pos - LOOKBEHIND_CHARS)
    tail = data.draw(st.text(alphabet="0123456789 .,:-/$%aAmMpPDrSt", max_size=8))
    window_text = text[start:cut] + tail
    for rule in ENGLISH_RULES:
        expected = rule(text, pos)
        got = rule(window_text, pos - start)
        if expected is None:
            assert got is None, rule.__name__
        else:
            assert got is not None, rule.__name__
            assert (got.end + start, got.text) == expected, rule.__name__
