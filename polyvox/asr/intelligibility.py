"""Transcribe clips and report per-sentence WER (the speaking is `polyvox.eval.judge`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from polyvox.asr.transcribe import Transcriber
from polyvox.asr.wer import CorpusErrors


def transcribe_all(
    transcriber: Transcriber,
    clips: Sequence[np.ndarray | torch.Tensor],
    sample_rate: int,
) -> list[str]:
    """One transcript per clip, each decoded on its own."""
    return [transcriber.transcribe(clip, sample_rate) for clip in clips]


def format_report(
    sentences: Sequence[str], transcripts: Sequence[str], errors: CorpusErrors
) -> str:
    """A Markdown table: sentence, transcript, edits, WER; then the corpus line."""
    lines = ["| # | sentence | transcript | S/D/I | WER |", "|---|---|---|---|---|"]
    for index, (text, heard, utterance) in enumerate(
        zip(sentences, transcripts, errors.utterances), start=1
    ):
        counts = f"{utterance.substitutions}/{utterance.deletions}/{utterance.insertions}"
        lines.append(f"| {index} | {text} | {heard} | {counts} | {utterance.wer:.3f} |")
    lines.append(
        f"\ncorpus WER = {errors.num_edits} / {errors.num_reference_words} = {errors.wer:.4f}"
    )
    return "\n".join(lines)
