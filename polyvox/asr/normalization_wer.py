"""Does text normalization make a voice say customer-service text right? Measure it.

    python -m polyvox.asr.normalization_wer [MODEL | voice.onnx] [--json results.json] [--seed 0]

Runs the 52 sentences of `CUSTOMER_SERVICE` through `polyvox eval`'s path with the
normalizer off, then on (`polyvox.speak.Speaker`, piper/joe by default), and scores both
with the spoken-form scorer (`polyvox.asr.spoken`, re-exported here).

NOTE: the normalizer's rules were edited against these 52 sentences, so their figures are
dev figures. The reported gain is measured on the test split instead:
`polyvox eval --model piper/joe --kind service --compare-normalize` (docs/voices.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from polyvox.asr.customer_service import CUSTOMER_SERVICE
from polyvox.asr.spoken import (
    align_slots,
    reference_words,
    rewrite,
    spoken_corpus_errors,
    spoken_errors,
    spoken_slots,
)
from polyvox.eval.score import relative_reduction as reduction

__all__ = ["align_slots", "reduction", "reference_words", "rewrite", "spoken_corpus_errors",
           "spoken_errors", "spoken_slots"]


def main(argv: Sequence[str]) -> None:
    from polyvox.eval.evaluate import EvalOptions, evaluate
    from polyvox.eval.report import format_report, run_json
    from polyvox.eval.sets import EvalItem

    parser = argparse.ArgumentParser(prog="python -m polyvox.asr.normalization_wer")
    parser.add_argument("model", nargs="?", default="piper/joe",
                        help="a model name, or a Piper voice.onnx (default: piper/joe)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--threads", type=int, default=2, help="torch and whisper threads")
    parser.add_argument("--seed", type=int, default=0, help="every request's seed")
    args = parser.parse_args(argv)
    model = f"piper:{args.model}" if args.model.endswith(".onnx") else args.model
    items = [EvalItem("service", number, s.text, s.spoken, s.categories)
             for number, s in enumerate(CUSTOMER_SERVICE, start=1)]
    options = EvalOptions(compare_normalize=True, seed=args.seed, threads=args.threads)
    runs = evaluate(model, items, options, progress=sys.stderr)
    print(format_report(runs, header="CUSTOMER_SERVICE (a dev set: the normalizer was "
                                     "tuned on it)"))
    if args.json:
        payload = {"runs": [run_json(run) for run in runs]}
        args.json.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
