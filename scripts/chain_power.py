"""Chained against fresh contexts with more paragraphs than one grouping gives (issue 25):
is a chained paragraph's WER really different from its clauses spoken apart?

    python scripts/chain_power.py [--set dev] [--groupings 5] [--mode audio]
        [--threads 1] [--json F]

posteval groups a split's read sentences once (27 dev paragraphs), so its chained and
fresh totals differ by a few edits either way. Here the read sentences are shuffled
`--groupings` times (grouping 0 is posteval's own order), each order cut into paragraphs
of 3-5 as posteval cuts them; every paragraph is spoken fresh ("pocket") and with
`--mode` chaining and judged by whisper tiny.en. Per paragraph the two edit counts are
paired: the report gives the totals, how many paragraphs each mode wins, a two-sided
sign test, and a bootstrap 90% interval of the total difference (chained - fresh) over
paragraphs. Run it once per mode to split the work over cores (`--only pocket` /
`--only audio`), then `--merge A B`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

from polyvox.asr.wer import utterance_errors
from polyvox.eval.sets import load_items
from polyvox.train.posteval import PARAGRAPH_SEED, heard_twice, paragraphs

FRESH = "pocket"


def groupings(split: str, count: int) -> list[list[str]]:
    """Paragraph texts (each a list of sentences) over `count` orders of the split."""
    read = list(load_items(split, "read"))
    texts = []
    for grouping in range(count):
        order = list(read)
        if grouping:
            random.Random(grouping).shuffle(order)
        texts += [[item.text for item in group]
                  for group in paragraphs(order, len(order), PARAGRAPH_SEED)]
    return texts


def speak_all(mode: str, texts: list[list[str]], threads: int) -> list[dict]:
    import torch

    from polyvox.asr.transcribe import Transcriber
    from polyvox.speak import Speaker

    torch.set_num_threads(threads)
    transcriber = Transcriber(threads=threads)
    speaker = Speaker.load("pocket/joe-ar", repeatable=True, chaining=mode)
    rows = []
    for number, sentences in enumerate(texts):
        text = " ".join(sentences)
        heard = transcriber.transcribe(speaker.speak(text, seed=0), speaker.sample_rate)
        errors = utterance_errors(text, heard)
        rows.append({"paragraph": number, "edits": errors.num_edits,
                     "words": len(errors.reference), "twice": heard_twice(sentences, heard),
                     "heard": heard})
        print(f"{mode} {number}: {errors.num_edits} edits", file=sys.stderr, flush=True)
    return rows


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test (ties dropped)."""
    n = wins + losses
    if not n:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def compare(fresh: list[dict], chained: list[dict], mode: str) -> str:
    pairs = [(f["edits"], c["edits"]) for f, c in zip(fresh, chained, strict=True)]
    words = sum(f["words"] for f in fresh)
    diffs = [c - f for f, c in pairs]
    better = sum(d < 0 for d in diffs)
    worse = sum(d > 0 for d in diffs)
    rng = random.Random(0)
    totals = sorted(sum(rng.choice(diffs) for _ in diffs) for _ in range(10_000))
    low, high = totals[500], totals[9_499]
    fresh_total = sum(f for f, _ in pairs)
    chained_total = sum(c for _, c in pairs)
    return (f"{len(pairs)} paragraphs, {words} words: fresh {fresh_total} edits "
            f"({fresh_total / words:.4f}), {mode} {chained_total} ({chained_total / words:.4f}); "
            f"{mode} better on {better}, worse on {worse}, even on {len(pairs) - better - worse} "
            f"(sign test p = {sign_test(better, worse):.3f}); total difference "
            f"{chained_total - fresh_total:+d}, bootstrap 90% [{low:+d}, {high:+d}]; clauses "
            f"heard twice: fresh {sum(f['twice'] for f in fresh)}, "
            f"{mode} {sum(c['twice'] for c in chained)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="dev", choices=["dev", "test"])
    parser.add_argument("--groupings", type=int, default=5)
    parser.add_argument("--mode", default="audio", help="the chaining compared with fresh")
    parser.add_argument("--only", help="speak in this mode only (and write --json)")
    parser.add_argument("--merge", nargs=2, type=Path, metavar=("FRESH", "CHAINED"),
                        help="compare two --only runs' JSON files")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.merge:
        fresh, chained = (json.loads(path.read_text()) for path in args.merge)
        print(compare(fresh["rows"], chained["rows"], chained["mode"]))
        return
    texts = groupings(args.set, args.groupings)
    modes = [args.only] if args.only else [FRESH, args.mode]
    results = {mode: speak_all(mode, texts, args.threads) for mode in modes}
    if args.json:
        for mode, rows in results.items():
            path = args.json if args.only else args.json.with_suffix(f".{mode}.json")
            path.write_text(json.dumps({"set": args.set, "groupings": args.groupings,
                                        "mode": mode, "rows": rows}, indent=1) + "\n")
    if not args.only:
        print(compare(results[FRESH], results[args.mode], args.mode))


if __name__ == "__main__":
    main()
