"""Judge a voice: synthesize sentences, transcribe them, score the word error rate."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from polyvox.asr.sentences import SENTENCES
from polyvox.asr.transcribe import Transcriber
from polyvox.asr.wer import CorpusErrors, corpus_errors

Synthesize = Callable[[str], np.ndarray | torch.Tensor]  # text -> mono samples [N]


def transcribe_all(
    transcriber: Transcriber,
    clips: Sequence[np.ndarray | torch.Tensor],
    sample_rate: int,
) -> list[str]:
    """One transcript per clip, each decoded on its own."""
    return [transcriber.transcribe(clip, sample_rate) for clip in clips]


def intelligibility(
    synthesize: Synthesize,
    sample_rate: int,
    transcriber: Transcriber,
    sentences: Sequence[str] = SENTENCES,
) -> tuple[CorpusErrors, list[str]]:
    """Synthesize each sentence, transcribe it, and score it against its text.

    Returns the per-sentence errors (corpus WER in `.wer`) and the raw transcripts.
    """
    transcripts = transcribe_all(transcriber, [synthesize(text) for text in sentences], sample_rate)
    return corpus_errors(sentences, transcripts), transcripts


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
