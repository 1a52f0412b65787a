"""Scoring a transcript against an evaluation item, and corpus WER over many.

    corpus WER = (substitutions + deletions + insertions) / reference words,
                 summed over the sentences (not the mean of per-sentence rates)

Read sentences are scored as polyvox.asr scores its sentences (`utterance_errors`:
`normalize_for_wer` on both sides); service lines against their hand-written spoken
reference (`spoken_errors`, which accepts whisper's "$1,249.50" for "one thousand two
hundred forty nine dollars and fifty cents").
"""

from __future__ import annotations

from collections.abc import Sequence

from polyvox.asr.spoken import spoken_errors
from polyvox.asr.wer import CorpusErrors, UtteranceErrors, utterance_errors
from polyvox.eval.sets import EvalItem


def item_errors(item: EvalItem, transcript: str) -> UtteranceErrors:
    """Word edits between what was heard and what should have been."""
    if item.kind == "service":
        return spoken_errors(item.reference, transcript)
    return utterance_errors(item.reference, transcript)


def corpus(errors: Sequence[UtteranceErrors]) -> CorpusErrors:
    """Sentences pooled: `.wer` is total edits / total reference words."""
    return CorpusErrors(tuple(errors))


def relative_reduction(wer_before: float, wer_after: float) -> float:
    """0.4 means the WER is 40% lower after; 0 when there was nothing to reduce."""
    return (wer_before - wer_after) / wer_before if wer_before else 0.0
