"""Scoring, pooling and reporting, with a fake voice and a fake listener (no model, no
whisper): what `polyvox eval` computes from what it heard."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
import torch

from polyvox.eval.judge import judge
from polyvox.eval.report import format_report, run_json, summary_table
from polyvox.eval.score import corpus, item_errors, relative_reduction
from polyvox.eval.sets import EvalItem

READ = EvalItem("read", 1, "Twenty geese flew over the barn.", "Twenty geese flew over the barn.")
SERVICE = EvalItem("service", 1, "Your total is $12.50.",
                   "your total is twelve dollars and fifty cents", ("money",))


def test_read_sentences_score_like_polyvox_asr() -> None:
    assert item_errors(READ, "20 geese flew over the barn").num_edits == 0
    errors = item_errors(READ, "Twenty geese flew over the bar.")
    assert (errors.substitutions, errors.deletions, errors.insertions) == (1, 0, 0)
    assert errors.num_reference_words == 6


def test_service_lines_score_against_the_spoken_reference() -> None:
    assert item_errors(SERVICE, "Your total is $12.50.").num_edits == 0
    assert item_errors(SERVICE, "Your total is twelve dollars fifty cents.").num_edits == 0
    assert item_errors(SERVICE, "Your total is $12.15.").num_edits == 1


def test_corpus_wer_is_total_edits_over_total_words_not_a_mean() -> None:
    short = item_errors(EvalItem("read", 1, "Stop right there.", "Stop right there."),
                        "Stop right here.")  # 1 edit / 3 words
    long = item_errors(READ, "Twenty geese flew over the barn.")  # 0 / 6
    pooled = corpus([short, long])
    assert (pooled.num_edits, pooled.num_reference_words) == (1, 9)
    assert pooled.wer == pytest.approx(1 / 9)  # the mean of the rates would be 1/6


def test_relative_reduction() -> None:
    assert relative_reduction(0.10, 0.06) == pytest.approx(0.4)
    assert relative_reduction(0.0, 0.0) == 0.0


@dataclass
class FakeSpeaker:
    """Says each text as 0.5 s of silence at 16 kHz; records what it was asked."""

    calls: list[tuple[str, int, bool]]
    served = SimpleNamespace(name="fake/voice")
    sample_rate = 16_000
    temperatures: list[float | None] = field(default_factory=list)
    speeds: list[float] = field(default_factory=list)

    def speak(self, text: str, seed: int = 0, normalize: bool = True,
              temperature: float | None = None, speed: float = 1.0) -> torch.Tensor:
        self.calls.append((text, seed, normalize))
        self.temperatures.append(temperature)
        self.speeds.append(speed)
        return torch.zeros(8_000)


class FakeListener:
    def __init__(self, heard: dict[int, str]) -> None:
        self.heard, self.index = heard, 0

    def transcribe(self, audio: torch.Tensor, sample_rate: int) -> str:
        assert sample_rate == 16_000 and audio.numel() == 8_000
        self.index += 1
        return self.heard[self.index]


def _run(normalize: bool = True, heard: tuple[str, str] = ("20 geese flew over the bar.",
                                                           "Your total is $12.50."),
         temperature: float | None = None, speed: float = 1.0):
    speaker = FakeSpeaker([])
    run = judge(speaker, [READ, SERVICE], FakeListener(dict(enumerate(heard, 1))),  # type: ignore[arg-type]
                seed=7, normalize=normalize, temperature=temperature, speed=speed,
                progress=None)
    return speaker, run


def test_judge_speaks_each_item_through_the_speaker_and_pools_by_kind() -> None:
    speaker, run = _run()
    assert speaker.calls == [(READ.text, 7, True), (SERVICE.text, 7, True)]
    assert run.label == "fake/voice" and run.model == "fake/voice"
    assert [h.transcript for h in run.heard] == ["20 geese flew over the bar.",
                                                "Your total is $12.50."]
    assert (run.corpus("read").num_edits, run.corpus("read").num_reference_words) == (1, 6)
    assert (run.corpus("service").num_edits, run.corpus("service").num_reference_words) == \
        (0, 7)  # "dollars and fifty cents": the "and" is optional, not counted
    assert run.corpus().wer == pytest.approx(1 / 13)
    assert run.category("money").num_reference_words == 7
    assert run.audio_seconds == pytest.approx(1.0)
    _, off = _run(normalize=False)
    assert off.label == "fake/voice, normalizer off"
    assert speaker.temperatures == [None, None]  # the model's own default
    assert speaker.speeds == [1.0, 1.0]
    warm, _ = _run(temperature=0.35)
    assert warm.temperatures == [0.35, 0.35]
    fast, _ = _run(speed=1.5)
    assert fast.speeds == [1.5, 1.5]


def test_report_and_json_carry_every_figure() -> None:
    _, off = _run(normalize=False, heard=("Twenty geese flew over the barn.",
                                          "Your total is $12.15."))
    _, on = _run()
    table = summary_table([on])
    assert "| fake/voice | read | 1 | 1 / 6 | 0.1667 |" in table
    assert "| fake/voice | all | 2 | 1 / 13 | 0.0769 |" in table
    report = format_report([off, on])
    assert "service: WER 0.1429 off -> 0.0000 on: 100.0% lower" in report
    assert "| money | 1 |" in report
    payload = json.loads(json.dumps(run_json(on)))
    assert payload["corpus"]["all"] == {"sentences": 2, "edits": 1, "reference_words": 13,
                                        "wer": pytest.approx(1 / 13)}
    assert payload["sentences"][1]["reference"] == SERVICE.reference
