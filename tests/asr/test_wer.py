"""Word error rate and the normalization it compares under."""

from __future__ import annotations

import math

import pytest

from polyvox.asr.numbers import cardinal, ordinal
from polyvox.asr.wer import (
    align,
    corpus_errors,
    normalize_for_wer,
    utterance_errors,
    word_error_rate,
)


def words(text: str) -> list[str]:
    return text.split()


# --- normalization ---------------------------------------------------------------------


def test_lowercases_and_strips_punctuation() -> None:
    assert normalize_for_wer("Hello, World! How are you?") == words("hello world how are you")
    assert normalize_for_wer("“Quoted” (aside); a:b... end.") == words("quoted aside a b end")


def test_apostrophes_inside_words_join() -> None:
    assert normalize_for_wer("It’s the dog's bone, don't") == words("its the dogs bone dont")


def test_hyphens_and_dashes_split_words() -> None:
    assert normalize_for_wer("A well-known twenty-one—no, two") == words(
        "a well known twenty one no two"
    )


def test_accents_fold() -> None:
    assert normalize_for_wer("Café naïve") == words("cafe naive")


@pytest.mark.parametrize(
    ("value", "spoken"),
    [
        (0, "zero"),
        (7, "seven"),
        (13, "thirteen"),
        (40, "forty"),
        (99, "ninety nine"),
        (100, "one hundred"),
        (114, "one hundred fourteen"),
        (1_000, "one thousand"),
        (1_250, "one thousand two hundred fifty"),
        (2_000_017, "two million seventeen"),
        (10**12 + 1, "one trillion one"),
    ],
)
def test_cardinals(value: int, spoken: str) -> None:
    assert cardinal(value) == words(spoken)


@pytest.mark.parametrize(
    ("value", "spoken"),
    [
        (1, "first"),
        (2, "second"),
        (3, "third"),
        (5, "fifth"),
        (12, "twelfth"),
        (14, "fourteenth"),
        (20, "twentieth"),
        (21, "twenty first"),
        (100, "one hundredth"),
    ],
)
def test_ordinals(value: int, spoken: str) -> None:
    assert ordinal(value) == words(spoken)


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("3", "three"),
        ("I have 3 cats", "i have three cats"),
        ("1,250 people", "one thousand two hundred fifty people"),
        ("one hundred and fourteen", "one hundred fourteen"),  # the spoken "and" goes...
        ("bread and 4 eggs", "bread and four eggs"),  # ...but only inside a number
        ("3.05", "three point zero five"),
        ("pi is 3.14.", "pi is three point one four"),
        ("the 14th of May", "the fourteenth of may"),
        ("1st, 2nd and 3rd", "first second and third"),
        ("$5", "five dollars"),
        ("$1", "one dollar"),
        ("$5.50", "five dollars fifty cents"),
        ("$0.75", "seventy five cents"),
        ("$1,200", "one thousand two hundred dollars"),
        ("$3 million", "three million dollars"),
        ("at 3:45", "at three forty five"),
        ("at 3:05", "at three oh five"),
        ("at 3:00 p.m.", "at three oclock pm"),
        ("20%", "twenty percent"),
        ("4.5 %", "four point five percent"),
        ("the 1990s", "the one thousand nine hundred nineties"),
        ("-5 degrees", "minus five degrees"),
        ("pages 3-5", "pages three five"),
        ("COVID-19", "covid nineteen"),
        ("Tom & Jerry", "tom and jerry"),
        ("the U.S.A. team", "the usa team"),
    ],
)
def test_numbers_are_spelled(written: str, spoken: str) -> None:
    assert normalize_for_wer(written) == words(spoken)


@pytest.mark.parametrize(
    ("reference", "hypothesis"),
    [
        ("She paid five dollars", "She paid $5."),
        ("it's three forty-five", "It’s 3:45"),
        ("the fourteenth floor", "the 14th floor"),
        ("twenty percent off", "20% off"),
        ("one hundred and fourteen steps", "114 steps"),
        ("seventy years", "70 years"),
    ],
)
def test_written_and_spoken_numbers_match(reference: str, hypothesis: str) -> None:
    errors = utterance_errors(reference, hypothesis)
    assert errors.num_edits == 0, (errors.reference, errors.hypothesis)


def test_contractions_are_not_expanded() -> None:
    # "it is" / "it's" cost 2 edits: a known limit, shared by both sides of a comparison.
    assert utterance_errors("it is late", "it's late").num_edits == 2


def test_empty_and_punctuation_only_text_has_no_words() -> None:
    assert normalize_for_wer("") == []
    assert normalize_for_wer("  ... -- !? ") == []


# --- edit distance ---------------------------------------------------------------------


def test_identical_is_zero() -> None:
    assert align(words("a b c"), words("a b c")) == (0, 0, 0)
    assert word_error_rate(["The cat sat."], ["the cat sat"]) == 0.0


def test_substitution() -> None:
    errors = utterance_errors("the cat sat", "the bat sat")
    assert (errors.substitutions, errors.deletions, errors.insertions) == (1, 0, 0)
    assert errors.wer == pytest.approx(1 / 3)


def test_deletion() -> None:
    errors = utterance_errors("the black cat sat", "the cat sat")
    assert (errors.substitutions, errors.deletions, errors.insertions) == (0, 1, 0)
    assert errors.wer == pytest.approx(1 / 4)


def test_insertion() -> None:
    errors = utterance_errors("the cat sat", "the fat cat sat down")
    assert (errors.substitutions, errors.deletions, errors.insertions) == (0, 0, 2)
    assert errors.wer == pytest.approx(2 / 3)


def test_wer_can_exceed_one() -> None:
    assert word_error_rate(["yes"], ["no no no"]) == pytest.approx(3.0)


def test_mixed_edits_are_minimal() -> None:
    # kitten -> sitting, over words: k/s substitution, e/i substitution, g insertion
    assert align(list("kitten"), list("sitting")) == (2, 0, 1)
    # A shift costs two edits (one deletion, one insertion), not a run of substitutions.
    assert sum(align(words("a b c d"), words("b c d a"))) == 2


def test_ties_prefer_substitutions() -> None:
    assert align(["a"], ["b"]) == (1, 0, 0)  # not a deletion plus an insertion


def test_empty_reference_and_hypothesis() -> None:
    assert word_error_rate([""], [""]) == 0.0
    assert word_error_rate([], []) == 0.0
    assert word_error_rate(["the cat"], [""]) == 1.0  # everything deleted
    assert math.isinf(word_error_rate([""], ["hello"]))  # inserted into nothing


def test_corpus_wer_weights_by_reference_words() -> None:
    references = ["one two three four five six seven eight nine ten", "hello"]
    hypotheses = ["one two three four five six seven eight nine ten", "goodbye"]
    errors = corpus_errors(references, hypotheses)
    assert [u.wer for u in errors.utterances] == [0.0, 1.0]
    assert errors.num_edits == 1
    assert errors.num_reference_words == 11
    assert errors.wer == pytest.approx(1 / 11)  # not the mean of 0.0 and 1.0
    assert word_error_rate(references, hypotheses) == errors.wer


def test_unpaired_lists_are_rejected() -> None:
    with pytest.raises(ValueError, match="2 references but 1 hypotheses"):
        word_error_rate(["a", "b"], ["a"])


def test_details_keep_the_normalized_words() -> None:
    errors = utterance_errors("Turn left at the 2nd light.", "turn left at the second lights")
    assert errors.reference == ("turn", "left", "at", "the", "second", "light")
    assert errors.hypothesis == ("turn", "left", "at", "the", "second", "lights")
    assert errors.num_edits == 1
