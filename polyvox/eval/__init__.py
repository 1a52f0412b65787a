"""Evaluation sets nothing is tuned on, and the judge that scores a voice on them.

    polyvox/eval/
      sets/{dev,test}/{read,service}.txt   the sentences (test: frozen, SHA-256 checked)
      sets.py       load_items(split, kind) -> EvalItem(kind, number, text, reference, ...)
      score.py      item_errors (read: normalize_for_wer; service: spoken-form scorer),
                    corpus WER
      judge.py      judge(speaker, items, transcriber) -> VoiceRun: speak through
                    polyvox.speak.Speaker, transcribe with whisper tiny.en, score
      evaluate.py   evaluate(model, items, EvalOptions(teacher=..., compare_normalize=...))
      report.py     Markdown tables and the --json payload
      cli.py        `polyvox eval`

Figures and commands: docs/voices.md.
"""

from polyvox.eval.sets import KINDS, SPLITS, EvalItem, file_digest, load_items

__all__ = ["KINDS", "SPLITS", "EvalItem", "file_digest", "load_items"]
