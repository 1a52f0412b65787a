"""The post-training judge: its paragraphs and repeat counter, and its pace rows on the
teacher, which follows `speed` exactly (so the judge must say so)."""

from __future__ import annotations

import pytest

from polyvox.eval.sets import load_items
from polyvox.train.posteval import heard_twice, judge_pace, paragraphs


def test_paragraphs_are_consecutive_read_sentences_three_to_five_at_a_time() -> None:
    read = load_items("dev", "read")
    groups = paragraphs(read, 10, seed=1)
    assert len(groups) == 10 and all(3 <= len(group) <= 5 for group in groups)
    flat = [item for group in groups for item in group]
    assert flat == list(read[: len(flat)])
    assert paragraphs(read, 10, seed=1) == groups


def test_a_clause_heard_twice_is_counted_once_per_sentence() -> None:
    sentences = ["The harbor master waved the boats in.", "Then the storm arrived early."]
    assert heard_twice(sentences, " ".join(sentences)) == 0
    again = " ".join(sentences) + " The harbor master waved again."
    assert heard_twice(sentences, again) == 1
    assert heard_twice(sentences, "the storm") == 0  # lost words are WER, not repeats


class _Clock:
    """A voice whose clip lasts `seconds / speed ** follow` (follow 1: exact pace) and a
    transcriber that hears the text it was given (the judge's arithmetic, alone)."""

    sample_rate = 100

    def __init__(self, follow: float) -> None:
        self.follow, self.last = follow, ""

    def speak(self, text: str, seed: int = 0, speed: float = 1.0):
        import torch

        self.last = text
        return torch.zeros(int(len(text) * 10 / speed ** self.follow))

    def transcribe(self, audio, sample_rate: int) -> str:
        return self.last


@pytest.mark.parametrize("follow", [1.0, 0.5, 0.0])
def test_the_pace_rows_say_how_closely_a_voice_follows_speed(follow: float) -> None:
    clock = _Clock(follow)
    items = load_items("dev", "read")[:5]
    rows = judge_pace(clock, clock, items, [0.75, 1.5])
    for row in rows:
        assert row.median_ratio == pytest.approx(row.speed ** (1 - follow), rel=0.01)
        assert row.within_band == (1.0 if follow == 1.0 else 0.0)
        assert row.wer == row.wer_at_one == 0.0


def test_the_judge_on_the_teacher_through_the_engine() -> None:
    """Piper follows `speed` less than in proportion (each phoneme's frames are rounded
    up): at 1.5 its clips are ~1/1.33 as long, and the judge, on real audio through the
    engine, sees that (docs/distill.md)."""
    pytest.importorskip("piper")
    pytest.importorskip("faster_whisper")
    from polyvox.asr.transcribe import Transcriber
    from polyvox.speak import Speaker

    speaker = Speaker.load("piper/joe")
    items = load_items("dev", "read")[:3]
    (row,) = judge_pace(speaker, Transcriber(threads=2), items, [1.5])
    assert row.speed == 1.5 and 1.03 < row.median_ratio < 1.2, row
