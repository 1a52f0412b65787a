"""`polyvox eval`: whisper tiny.en word error rate of a voice on the evaluation sets.

    polyvox eval --model pocket/joe-ar --teacher              # test split, read + service
    polyvox eval --model piper/joe --kind service --compare-normalize
    polyvox eval --model piper/joe --set dev --limit 10 --json dev.json

Tune on `--set dev`; report `--set test` (the default), which is frozen (docs/voices.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from polyvox.config import PRECISIONS
from polyvox.eval.sets import KINDS, SPLITS, EvalItem, file_digest, load_items


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_eval_parser(commands: Any) -> None:
    from polyvox.models.registry import DEFAULT_MODEL

    parser = commands.add_parser(
        "eval", help="whisper WER of a voice on the dev/test sentence sets (docs/voices.md)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"default {DEFAULT_MODEL}")
    parser.add_argument("--weights", help="the model's checkpoint (models without shipped "
                        "weights)")
    parser.add_argument("--set", dest="split", choices=SPLITS, default="test",
                        help="test: report figures (frozen); dev: tune settings")
    parser.add_argument("--kind", choices=[*KINDS, "all"], default="all",
                        help="read prose, customer-service lines, or both")
    parser.add_argument("--teacher", action="store_true",
                        help="also run the model's teacher (pocket/joe-ar: piper/joe)")
    parser.add_argument("--compare-normalize", action="store_true",
                        help="run the normalizer off, then on, and report the reduction")
    parser.add_argument("--no-normalize", dest="normalize", action="store_false",
                        help="speak the text as written")
    parser.add_argument("--limit", type=_positive_int,
                        help="only the first N sentences of each kind")
    parser.add_argument("--seed", type=int, default=0, help="every request's seed")
    parser.add_argument("--temperature", type=float,
                        help="the model's sampling temperature (default: its own; tune "
                        "on --set dev); the teacher keeps its default")
    parser.add_argument("--head-draws", type=_positive_int,
                        help="a distilled student's noises averaged per step (1 or even; "
                        "default: its config's; tune on --set dev)")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="OpenAI's speed (0.25-4.0) for the model and its teacher: the "
                        "WER of fast or slow speech")
    parser.add_argument("--precision", choices=PRECISIONS,
                        default="float32", help="the model's (and its teacher's) weights, as "
                        "`polyvox serve --precision` keeps them")
    parser.add_argument("--threads", type=_positive_int, default=2,
                        help="torch and whisper CPU threads")
    parser.add_argument("--no-sentences", dest="per_sentence", action="store_false",
                        help="print only the corpus figures")
    parser.add_argument("--json", dest="json_path", type=Path,
                        help="also write every figure here")
    parser.set_defaults(func=run_eval)


def select(split: str, kind: str, limit: int | None) -> tuple[EvalItem, ...]:
    """The items of `split` and `kind`, the first `limit` of each kind."""
    items = load_items(split, kind)
    if limit is None:
        return items
    kinds = KINDS if kind == "all" else (kind,)
    return tuple(item for one in kinds for item in [i for i in items if i.kind == one][:limit])


def run_eval(args: argparse.Namespace) -> int:
    from polyvox.asr.transcribe import TranscriberUnavailable
    from polyvox.eval.evaluate import EvalOptions, evaluate, versions
    from polyvox.eval.report import format_report, run_json

    options = EvalOptions(teacher=args.teacher, compare_normalize=args.compare_normalize,
                          normalize=args.normalize, seed=args.seed, threads=args.threads,
                          weights=args.weights, temperature=args.temperature,
                          head_draws=args.head_draws, speed=args.speed,
                          precision=args.precision)
    items = select(args.split, args.kind, args.limit)
    kinds = KINDS if args.kind == "all" else (args.kind,)
    digests = {kind: file_digest(args.split, kind) for kind in kinds}
    date = datetime.date.today().isoformat()
    try:
        runs = evaluate(args.model, items, options, progress=sys.stderr)
    except TranscriberUnavailable as error:
        raise ValueError(f"{error} (or `pip install 'polyvox[asr]'`)") from None
    settings = "" if args.temperature is None else f", temperature {args.temperature:g}"
    if args.speed != 1.0:
        settings += f", speed {args.speed:g}"
    if args.precision != "float32":
        settings += f", {args.precision}"
    header = (f"polyvox eval --model {args.model}: {args.split} split, {len(items)} sentences"
              f" ({', '.join(f'{k} sha256 {d[:12]}' for k, d in digests.items())}), seed "
              f"{args.seed}{settings}, whisper tiny.en, {date}")
    print(format_report(runs, per_sentence=args.per_sentence, header=header))
    if args.json_path:
        payload = {"split": args.split, "kind": args.kind, "limit": args.limit,
                   "sha256": digests, "date": date, "argv": sys.argv[1:],
                   "versions": versions(), "runs": [run_json(run) for run in runs]}
        args.json_path.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
    return 0
