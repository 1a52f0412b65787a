"""`python -m polyvox.asr [MODEL | voice.onnx]`: the intelligibility report of a voice on
`SENTENCES` (piper/joe by default).

Speaks each sentence through `polyvox.speak.Speaker` (the engine's path, seed 0),
transcribes it with whisper tiny.en and prints the per-sentence table and corpus WER.
`SENTENCES` shaped earlier settings, so these are dev figures; the test split is
`polyvox eval` (docs/voices.md).
"""

from __future__ import annotations

import sys

from polyvox.asr.intelligibility import format_report
from polyvox.asr.sentences import SENTENCES


def main(argv: list[str]) -> None:
    from polyvox.eval.evaluate import evaluate
    from polyvox.eval.report import timing_line
    from polyvox.eval.sets import EvalItem

    model = argv[0] if argv else "piper/joe"
    model = f"piper:{model}" if model.endswith(".onnx") else model
    items = [EvalItem("read", number, text, text) for number, text in enumerate(SENTENCES, 1)]
    (run,) = evaluate(model, items, progress=None)
    print(format_report(SENTENCES, [h.transcript for h in run.heard], run.corpus()))
    print(timing_line(run))


if __name__ == "__main__":
    main(sys.argv[1:])
