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


@pytest.mark.parametrize("text", TEXTS)
def test_a_timeline_given_each_clauses_words_equals_one_that_splits_itself(text: str) -> None:
    """A cluster ingress holds no model: it keeps the client's words, and each clause's
    words arrive with the audio that ends it (from the replica's WordTracker). Its events
    equal those of a timeline that splits the text itself, and a clause restarted on
    another replica is timed from its restart."""
    from polyvox.server.word_timings import WordTimeline

    local = WordTimeline(_pipeline(), 1000, 10)
    remote = WordTimeline(None, 1000, 10)
    _, clauses = _track(text, seed=3)  # the replica's split, fed in other pieces
    for timeline in (local, remote):
        for start in range(0, len(text), 5):
            timeline.add_text(text[start: start + 5])
        timeline.end_text()
    local_events: list = []
    remote_events: list = []
    for clause in clauses:
        for size, ends in ((300, False), (200 + 10 * clause.index, True)):
            local_events += local.add_audio(size, ends, None)
            remote_events += remote.add_audio(size, ends, None, clause if ends else None)
    assert remote_events == local_events and local_events
    assert local.finish() == remote.finish()
    words = [w for event in local_events for w in event["words"]]
    assert [w["index"] for w in words] == list(range(len(words)))

    restarted = WordTimeline(None, 1000, 10)
    restarted.add_text(text)
    restarted.end_text()
    restarted.add_audio(700, False, None)  # clause 0 cut after 0.7 s ...
    events = restarted.add_audio(400, True, None, clauses[0], restarts_clause=True)
    first = events[0]["words"]
    assert first[0]["start"] == 0.7 and first[-1]["end"] == 1.1  # ... and spoken again
