"""The student-beside-teacher report: one row per sentence, both corpus WERs."""

from __future__ import annotations

import numpy as np

from polyvox.train.evaluate import format_comparison, judge


class _Echo:
    """A stand-in judge that 'hears' what the clip's length encodes (test double for
    whisper: the report's arithmetic, not ASR, is under test here)."""

    def __init__(self, sentences: list[str]) -> None:
        self.sentences = sentences

    def transcribe(self, clip: np.ndarray, sample_rate: int) -> str:
        index = len(clip) // sample_rate - 1
        return self.sentences[index]


def test_comparison_rows_and_corpus_lines() -> None:
    sentences = ["the cat sat", "a dog ran home"]
    echo = _Echo(sentences)
    teacher = judge(lambda text: np.zeros((sentences.index(text) + 1) * 100), 100, echo,
                    sentences)
    # the student says the other sentence for the first one: 3 substitutions/insertion
    student = judge(lambda text: np.zeros(200), 100, echo, sentences)
    report = format_comparison(sentences, teacher, student)
    lines = report.splitlines()
    assert lines[2].startswith("| 1 | the cat sat | the cat sat | 0.000 | a dog ran home |")
    assert lines[3].startswith("| 2 | a dog ran home | a dog ran home | 0.000 | a dog ran home"
                               " | 0.000 | 2.0/2.0 |")
    assert "teacher corpus WER = 0 / 7 = 0.0000" in report
    assert student.errors.wer == student.errors.num_edits / 7 > 0
    assert f"student corpus WER = {student.errors.num_edits} / 7" in report
