"""Clause splitting for streamed text."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from polyvox.text.clauses import ClauseSplitter, split_text
from polyvox.text.normalize import make_normalizer


def words(text: str) -> int:
    return len(text.split())


def test_sentences_become_clauses() -> None:
    assert split_text("Hello there. How are you? Fine!", words) == [
        "Hello there.", "How are you?", "Fine!"]


def test_a_clause_is_ready_only_once_it_provably_ended() -> None:
    splitter = ClauseSplitter(words)
    assert splitter.feed("It costs 3.") == []  # maybe "3.5": wait
    assert splitter.feed("5 dollars. Next") == ["It costs 3.5 dollars."]
    assert splitter.flush() == ["Next"]


def test_long_sentences_are_cut_at_commas_under_the_cap() -> None:
    text = ("first part here, second part here, third part here, fourth part here, "
            "fifth part here.")
    clauses = split_text(text, words, max_tokens=7)
    assert all(words(c) <= 7 for c in clauses)
    assert " ".join(clauses) == text


def test_never_cuts_inside_a_spelled_number() -> None:
    spoken = make_normalizer().normalize(
        "Please call our support line at 555-123-4567 and give them the code A7X-392-KQ "
        "when they ask for it.")
    clauses = split_text(spoken, words, max_tokens=6)
    for clause in clauses[:-1]:
        last = clause.rstrip(",;:").split()[-1]
        assert last not in {"five", "seven", "two", "three", "K", "X", "Q"}, clauses


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_pieces_give_the_same_clauses_as_the_whole(seed: int) -> None:
    text = ("Hi. It costs 3.50 today, or 4 tomorrow; call me: now! Really? Yes... "
            "A long clause goes on, and on, and on, with many words to cut it somewhere.")
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), 12))
    splitter = ClauseSplitter(words, max_tokens=8)
    streamed = []
    for a, b in zip([0, *cuts], [*cuts, len(text)]):
        streamed += splitter.feed(text[a:b])
    streamed += splitter.flush()
    assert streamed == split_text(text, words, max_tokens=8)


def test_the_first_clause_ends_at_its_first_comma_past_the_first_cap() -> None:
    text = ("When the power went out, we lit candles and told stories until midnight. "
            "Later, after the storm, the lights came back.")
    assert split_text(text, words, max_tokens=50, first_max_tokens=3) == [
        "When the power went out,", "we lit candles and told stories until midnight.",
        "Later, after the storm, the lights came back."]  # later sentences stay whole
    assert split_text("No comma in this rather long first sentence at all.", words,
                      max_tokens=50, first_max_tokens=3) == [
        "No comma in this rather long first sentence at all."]
    # streamed in pieces, the same clauses come out
    splitter = ClauseSplitter(words, max_tokens=50, first_max_tokens=3)
    streamed = [c for piece in (text[:17], text[17:40], text[40:]) for c in splitter.feed(piece)]
    assert streamed + splitter.flush() == split_text(text, words, 50, 3)
