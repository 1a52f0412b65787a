"""The post-training judge: its paragraphs and repeat counter, and its pace rows on the
teacher, which follows `speed` exactly (so the judge must say so)."""

from __future__ import annotations

import pytest

from polyvox.eval.sets import load_items
from polyvox.train.posteval import (
    PROBE_TEMPLATES,
    UNSEEN_TEMPLATES,
    heard_twice,
    judge_pace,
    judge_probe,
    paragraphs,
    spelled_probe,
)


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


def test_the_spelled_probe_is_questions_then_a_spelled_name_off_the_eval_sets() -> None:
    pairs = spelled_probe(30)
    assert len(pairs) == 30 and spelled_probe(30) == pairs and spelled_probe(5) == pairs[:5]
    assert len({spelled for _, spelled in pairs}) == 30
    assert all(q.endswith("?") and 4 <= len(q.split()) <= 12 for q, _ in pairs)
    assert pairs[0][1] == "Is it K-O-W-A-L-S-K-I?"
    assert all(s.startswith("Is it ") and s.endswith("?") for _, s in pairs)
    evaluated = {item.text for split in ("dev", "test") for item in load_items(split)}
    assert not any(question in text for question, _ in pairs for text in evaluated)
    with pytest.raises(ValueError, match="1-30"):
        spelled_probe(31)


def test_the_unseen_templates_ask_the_same_questions_about_the_same_names() -> None:
    seen, unseen = spelled_probe(6), spelled_probe(6, UNSEEN_TEMPLATES)
    assert [q for q, _ in unseen] == [q for q, _ in seen]
    assert [s for _, s in unseen[:3]] == ["Did you say K-O-W-A-L-S-K-I?",
                                          "You said N-G-U-Y-E-N, correct?",
                                          "Spelled O-K-A-F-O-R, right?"]
    assert unseen[3][1] == "Did you say L-I-N-D-Q-V-I-S-T?"
    from polyvox.train.sentences import generate_sentences

    exchanges = " ".join(generate_sentences(400, seed=3, exchange_share=1.0))
    assert PROBE_TEMPLATES[0].split("{}")[0] in exchanges  # seen in the exchange data...
    for template in UNSEEN_TEMPLATES:  # ...the unseen ones never are
        assert template.split("{}")[0] not in exchanges


class _Listener:
    """Hears the last text spoken, or (a repeating voice) the question twice in place of
    the spelled clause."""

    def __init__(self) -> None:
        self.text, self.repeat = "", False

    def transcribe(self, audio, sample_rate: int) -> str:
        question = self.text.split("?")[0] + "?"
        return f"{question} {question}" if self.repeat else self.text


class _Echo:
    sample_rate = 100

    def __init__(self, listener: _Listener, repeat: bool) -> None:
        self.listener, self.repeat = listener, repeat

    def speak(self, text: str, seed: int = 0):
        import torch

        self.listener.text, self.listener.repeat = text, self.repeat
        return torch.zeros(10)


def test_the_probe_counts_questions_heard_twice() -> None:
    pairs = spelled_probe(4)
    listener = _Listener()
    speakers = {"pocket": _Echo(listener, repeat=False), "chained": _Echo(listener, repeat=True)}
    rows = judge_probe(speakers, listener, pairs)
    assert [(r.chaining, r.repeated_clauses, r.paragraphs) for r in rows] == [
        ("pocket", 0, 4), ("chained", 4, 4)]
    assert rows[0].wer == 0.0 and rows[1].wer > 0.3


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


def test_an_unknown_chaining_is_refused_before_any_model_loads(capsys) -> None:
    from polyvox.train.posteval import main

    with pytest.raises(SystemExit):
        main(["--chainings", "chained,bogus"])
    assert "--chainings takes modes of" in capsys.readouterr().err


def test_the_report_gives_each_probe_template_set_its_own_table() -> None:
    from polyvox.train.posteval import ChainRow, Report, format_report

    report = Report("pocket/joe-ar", None, "dev", probes=[ChainRow("audio", 0.1, 0, 30)],
                    unseen_probes=[ChainRow("audio", 0.2, 3, 30)])
    text = format_report(report)
    assert "spelled clause (Is it)" in text and "spelled clause (other)" in text
    assert "| audio | 0.100 | 0 | 30 |" in text and "| audio | 0.200 | 3 | 30 |" in text
