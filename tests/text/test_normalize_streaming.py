"""Streaming normalization gives exactly the whole-text output, for any split of the input."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from test_normalize_table import CASES

from polyvox.text.normalize import (
    EnglishNormalizer,
    NoOpNormalizer,
    Normalizer,
    StreamingNormalizer,
    make_normalizer,
    sentence_boundaries,
)

NORMALIZER = EnglishNormalizer()
EXAMPLES = [written for written, _ in CASES]
# Characters the rules care about, so random text hits their edges: digits, separators,
# currency, abbreviation periods, capitals after spaces.
ALPHABET = "0123456789 .,:;-/$€£%@#+'()aAmMpPstDrSKQX\n"
WORDS = [
    "Dr.", "St.", "the", "PM", "p.m.", "ext.", "order", "in", "of", "to", "Baker", "Inc.",
    "No.", "#", "&", "-", "Ma", "March", "May", "Mo", "Monday", "Mon.", "Jr.", "U.S.",
    "J-O-N", "A-B-1", "X-ray",
]  # fmt: skip

fragments = st.one_of(
    st.sampled_from(EXAMPLES),
    st.sampled_from(WORDS),
    st.text(alphabet=ALPHABET, max_size=12),
    st.text(max_size=6),  # any unicode at all
)
separators = st.sampled_from([" ", " ", ", ", ". ", "  ", "\n", "", "-", "/"])


@st.composite
def texts(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(fragments, separators), max_size=8))
    return "".join(fragment + separator for fragment, separator in parts)


@st.composite
def split_text(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(texts())
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return text, [text[start:end] for start, end in itertools.pairwise(bounds)]


def stream(pieces: list[str], normalizer: Normalizer = NORMALIZER) -> str:
    streaming = StreamingNormalizer(normalizer)
    return "".join(streaming.feed(piece) for piece in pieces) + streaming.flush()


@settings(max_examples=400, deadline=None)
@given(split_text())
def test_any_split_gives_the_whole_text_output(case: tuple[str, list[str]]) -> None:
    text, pieces = case
    assert stream(pieces) == NORMALIZER.normalize(text)


@settings(max_examples=150, deadline=None)
@given(texts())
def test_one_character_at_a_time_gives_the_whole_text_output(text: str) -> None:
    assert stream(list(text)) == NORMALIZER.normalize(text)


@settings(max_examples=300, deadline=None)
@given(texts())
def test_no_ascii_digit_survives(text: str) -> None:
    """A voice must never be handed digits to guess at: every number becomes words."""
    assert not re.search(r"[0-9]", NORMALIZER.normalize(text))


def test_feed_emits_final_text_before_the_stream_ends() -> None:
    streaming = StreamingNormalizer(NORMALIZER)
    sentence = "Your balance is $1,249.50 and your appointment is on March 14th at 3:45 PM. "
    emitted = "".join(streaming.feed(word + " ") for word in sentence.split())
    assert emitted.startswith("Your balance is one thousand two hundred forty-nine dollars")
    assert emitted + streaming.flush() == NORMALIZER.normalize(sentence)


def test_feed_holds_back_a_pattern_that_is_still_forming() -> None:
    streaming = StreamingNormalizer(NORMALIZER)
    assert streaming.feed("Ask for Dr.") == ""
    assert streaming.num_pending_chars > 0
    assert streaming.feed(" Patel about it, please.") + streaming.flush() == (
        "Ask for Doctor Patel about it, please."
    )


def test_flush_resets_the_stream_for_reuse() -> None:
    streaming = StreamingNormalizer(NORMALIZER)
    assert streaming.feed("at 7:05") + streaming.flush() == "at seven oh five"
    assert streaming.num_pending_chars == 0
    assert streaming.feed("$5") + streaming.flush() == "five dollars"


def test_long_stream_keeps_only_bounded_state() -> None:
    streaming = StreamingNormalizer(NORMALIZER)
    for _ in range(500):
        streaming.feed("Call 555-123-4567 on June 30, 2025 at 3 PM. ")
    assert streaming.num_pending_chars < 200


def test_disabled_stream_passes_pieces_straight_through() -> None:
    streaming = StreamingNormalizer(make_normalizer(enabled=False))
    assert streaming.feed("Dr. Patel at 3:45") == "Dr. Patel at 3:45"
    assert streaming.feed(" PM") == " PM"
    assert streaming.flush() == ""


@settings(max_examples=100, deadline=None)
@given(split_text())
def test_no_op_normalizer_streams_unchanged(case: tuple[str, list[str]]) -> None:
    text, pieces = case
    assert stream(pieces, NoOpNormalizer()) == text


@settings(max_examples=200, deadline=None)
@given(split_text())
def test_sentence_ends_in_a_stream_prefix_are_sentence_ends_of_the_whole(
    case: tuple[str, list[str]],
) -> None:
    """A splitter working on what `feed` has emitted so far never cuts somewhere the whole
    text would not be cut.
    """
    text, pieces = case
    whole = NORMALIZER.normalize(text)
    whole_ends = set(sentence_boundaries(whole))
    streaming, emitted = StreamingNormalizer(NORMALIZER), ""
    for piece in pieces:
        emitted += streaming.feed(piece)
        assert set(sentence_boundaries(emitted, is_final=False)) <= whole_ends
