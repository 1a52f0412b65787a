"""WordTracker: the engine's clauses, and the client word each spoken word came from,
whatever pieces the text arrives in."""

from __future__ import annotations

import random

import pytest

from polyvox.text.pipeline import TextPipeline
from polyvox.text.words import WordTracker

TEXTS = [
    "Dr. Patel sees you March 14th at 3:45 PM. Call 555-123-4567, or email "
    "j.smith@example.com today! It costs $1,249.50 — really.",
    "  Leading spaces\tand\nnewlines... ok?  The U.S.A. is big; very big: huge.",
    "No punctuation at all here just words",
]


def _pipeline() -> TextPipeline:
    return TextPipeline(lambda text: len(text.split()), 12, first_max_tokens=6)


def _track(text: str, seed: int) -> tuple[WordTracker, list]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, 20))) if seed else []
    tracker, clauses = WordTracker(_pipeline()), []
    for start, end in zip([0, *cuts], [*cuts, len(text)]):
        clauses += tracker.feed(text[start:end])
    return tracker, clauses + tracker.flush()


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("seed", range(8))
def test_clauses_are_the_engines_and_words_the_clients(text: str, seed: int) -> None:
    pipeline = _pipeline()
    expected = pipeline.feed(text) + pipeline.flush()
    tracker, clauses = _track(text, seed)
    assert [" ".join(c.spoken) for c in clauses] == [" ".join(c.split()) for c in expected]
    assert [c.index for c in clauses] == list(range(len(clauses)))
    assert tracker.words == text.split()
    sources = [s for c in clauses for s in c.sources]
    assert sources == sorted(sources)  # in order, never back
    assert set(sources) <= set(range(len(text.split())))


def test_each_spoken_word_finds_its_client_word() -> None:
    tracker, clauses = _track(TEXTS[0], 3)
    pairs = [(word, tracker.words[source]) for c in clauses
             for word, source in zip(c.spoken, c.sources)]
    assert ("Doctor", "Dr.") in pairs and ("fourteenth", "14th") in pairs
    assert ("forty-five", "3:45") in pairs and ("smith", "j.smith@example.com") in pairs
    assert [w for w, s in pairs if s == "$1,249.50"] == [
        "one", "thousand", "two", "hundred", "forty-nine", "dollars", "and", "fifty", "cents"]
    assert ("It", "It") in pairs and ("really.", "really.") in pairs
