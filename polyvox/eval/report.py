"""What `polyvox eval` prints (Markdown tables, pasteable into docs) and writes (--json).

Every run in one report covers the same items in the same order: a model beside its
teacher, or one model with the normalizer on and off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from polyvox.asr.wer import CorpusErrors, UtteranceErrors
from polyvox.eval.judge import VoiceRun
from polyvox.eval.score import relative_reduction
from polyvox.eval.sets import KINDS


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "(nothing)"


def _counts(errors: UtteranceErrors) -> str:
    return f"{errors.substitutions}/{errors.deletions}/{errors.insertions}"


def _kinds(run: VoiceRun) -> list[str]:
    present = [kind for kind in KINDS if any(h.item.kind == kind for h in run.heard)]
    return present + ["all"] if len(present) > 1 else present


def _num_sentences(run: VoiceRun, kind: str) -> int:
    return sum(kind in ("all", h.item.kind) for h in run.heard)


def sentence_table(runs: Sequence[VoiceRun]) -> str:
    """One row per sentence: the written text, then per run what was heard and its edits
    (S/D/I = substitutions / deletions / insertions)."""
    header = "| kind | # | sentence |" + "".join(f" {r.label}: heard | S/D/I |" for r in runs)
    lines = [header, "|---|---|---|" + "---|---|" * len(runs)]
    for row in zip(*(run.heard for run in runs)):
        item = row[0].item
        cells = "".join(f" {_cell(h.transcript)} | {_counts(h.errors)} |" for h in row)
        lines.append(f"| {item.kind} | {item.number} | {_cell(item.text)} |{cells}")
    return "\n".join(lines)


def _wer_cell(errors: CorpusErrors) -> str:
    return f"{errors.num_edits} / {errors.num_reference_words} | {errors.wer:.4f}"


def summary_table(runs: Sequence[VoiceRun]) -> str:
    """Corpus WER per run and kind."""
    lines = ["| voice | kind | sentences | edits / reference words | corpus WER |",
             "|---|---|---|---|---|"]
    for run in runs:
        for kind in _kinds(run):
            lines.append(f"| {run.label} | {kind} | {_num_sentences(run, kind)} | "
                         f"{_wer_cell(run.corpus(kind))} |")
    return "\n".join(lines)


def category_table(runs: Sequence[VoiceRun]) -> str:
    """Corpus WER per service category (a line can be in several), per run."""
    names = sorted({c for h in runs[0].heard for c in h.item.categories})
    if not names:
        return ""
    lines = ["| category | sentences |" + "".join(f" {r.label} |" for r in runs),
             "|---|---|" + "---|" * len(runs)]
    for name in names:
        count = sum(name in h.item.categories for h in runs[0].heard)
        wers = "".join(f" {run.category(name).wer:.3f} |" for run in runs)
        lines.append(f"| {name} | {count} |{wers}")
    return "\n".join(lines)


def reduction_lines(off: VoiceRun, on: VoiceRun) -> list[str]:
    """The normalizer's effect: relative WER reduction per kind, off -> on."""
    lines = []
    for kind in _kinds(on):
        wer_off, wer_on = off.corpus(kind).wer, on.corpus(kind).wer
        lines.append(f"{kind}: WER {wer_off:.4f} off -> {wer_on:.4f} on: "
                     f"{relative_reduction(wer_off, wer_on):.1%} lower with the normalizer")
    return lines


def timing_line(run: VoiceRun) -> str:
    return (f"{run.label}: {len(run.heard)} sentences, loading {run.load_seconds:.1f} s, "
            f"synthesis {run.synthesis_seconds:.1f} s, transcription "
            f"{run.transcription_seconds:.1f} s, {run.audio_seconds:.0f} s of audio")


def format_report(runs: Sequence[VoiceRun], *, per_sentence: bool = True,
                  header: str = "") -> str:
    parts = [header] if header else []
    if per_sentence:
        parts.append(sentence_table(runs))
    parts.append(summary_table(runs))
    is_normalizer_comparison = (len(runs) == 2 and runs[0].model == runs[1].model
                                and not runs[0].normalize and runs[1].normalize)
    if is_normalizer_comparison:
        parts.append("\n".join(reduction_lines(runs[0], runs[1])))
    categories = category_table(runs)
    if categories:
        parts.append(categories)
    parts.append("\n".join(timing_line(run) for run in runs))
    return "\n\n".join(parts)


def _errors_json(errors: CorpusErrors, num_sentences: int) -> dict[str, Any]:
    return {"sentences": num_sentences, "edits": errors.num_edits,
            "reference_words": errors.num_reference_words, "wer": errors.wer}


def run_json(run: VoiceRun) -> dict[str, Any]:
    """Every figure of one run, per sentence and pooled."""
    return {
        "label": run.label, "model": run.model, "normalize": run.normalize, "seed": run.seed,
        "corpus": {kind: _errors_json(run.corpus(kind), _num_sentences(run, kind))
                   for kind in _kinds(run)},
        "seconds": {"load": run.load_seconds, "synthesis": run.synthesis_seconds,
                    "transcription": run.transcription_seconds, "audio": run.audio_seconds},
        "sentences": [
            {"kind": h.item.kind, "number": h.item.number, "text": h.item.text,
             "reference": h.item.reference, "categories": list(h.item.categories),
             "transcript": h.transcript, "substitutions": h.errors.substitutions,
             "deletions": h.errors.deletions, "insertions": h.errors.insertions,
             "reference_words": h.errors.num_reference_words,
             "audio_seconds": h.audio_seconds, "synthesis_seconds": h.synthesis_seconds,
             "transcription_seconds": h.transcription_seconds}
            for h in run.heard
        ],
    }
