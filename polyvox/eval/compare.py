"""Two `polyvox eval --json` files compared sentence by sentence (a paired sign test).

    python -m polyvox.eval.compare BEFORE.json AFTER.json [--before-run I] [--after-run J]

Pooled WER hides how a change moved: a small weight change flips a quarter of the
sentences, some for the better and some for the worse. Per kind this counts the
sentences AFTER heard with fewer edits than BEFORE and those with more, and the two-sided
sign test's p-value for that split (ties left out). A split of 14 against 14 is no
evidence of a change, whatever the pooled WER says (docs/posttrain.md, session 21).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple


class PairedCounts(NamedTuple):
    kind: str
    sentences: int
    better: int  # sentences with fewer edits after than before
    worse: int
    edits_before: int
    edits_after: int

    @property
    def p_value(self) -> float:
        return sign_test(self.better, self.worse)


def sign_test(better: int, worse: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven when each
    untied sentence is equally likely to move either way."""
    n = better + worse
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(better, worse) + 1)) / 2**n
    return min(1.0, 2 * tail)


def _edits(sentence: dict[str, Any]) -> int:
    return int(sentence["substitutions"] + sentence["deletions"] + sentence["insertions"])


def _sentences(document: dict[str, Any], path: Path, run: int | None
               ) -> dict[tuple[str, int], dict[str, Any]]:
    runs = document.get("runs") or []
    if run is None and len(runs) != 1:
        raise ValueError(f"{path} holds {len(runs)} runs: pick one by its index")
    index = 0 if run is None else run
    if not 0 <= index < len(runs):
        raise ValueError(f"{path} has no run {index} (it holds {len(runs)})")
    sentences = runs[index].get("sentences") or []
    if not sentences:
        raise ValueError(f"{path}: no per-sentence results")
    return {(s["kind"], int(s["number"])): s for s in sentences}


def compare(before: dict[str, Any], after: dict[str, Any], names: tuple[Path, Path] = (
        Path("before"), Path("after")), runs: tuple[int | None, int | None] = (None, None)
            ) -> list[PairedCounts]:
    """Per kind (then all), the paired counts of two eval documents over the same
    sentences (`runs`: which run of a document that holds several, such as one written
    with --teacher); ValueError if they were not run on the same sentences."""
    first = _sentences(before, names[0], runs[0])
    second = _sentences(after, names[1], runs[1])
    if first.keys() != second.keys() or any(
            first[key]["text"] != second[key]["text"] for key in first):
        raise ValueError(f"{names[0]} and {names[1]} were not run on the same sentences")
    kinds = sorted({kind for kind, _ in first})
    rows = []
    for kind in [*kinds, "all"]:
        keys = [key for key in first if kind in ("all", key[0])]
        deltas = [_edits(second[key]) - _edits(first[key]) for key in keys]
        rows.append(PairedCounts(kind, len(keys), sum(d < 0 for d in deltas),
                                 sum(d > 0 for d in deltas),
                                 sum(_edits(first[key]) for key in keys),
                                 sum(_edits(second[key]) for key in keys)))
    return rows


def format_rows(rows: Sequence[PairedCounts]) -> str:
    lines = ["| kind | sentences | better | worse | edits before -> after | sign test p |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.kind} | {r.sentences} | {r.better} | {r.worse} | "
              f"{r.edits_before} -> {r.edits_after} | {r.p_value:.3f} |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--before-run", type=int,
                        help="the run's index in BEFORE, if it holds several (--teacher)")
    parser.add_argument("--after-run", type=int, help="the same for AFTER")
    args = parser.parse_args(argv)
    documents = [json.loads(path.read_text(encoding="utf-8"))
                 for path in (args.before, args.after)]
    try:
        rows = compare(*documents, names=(args.before, args.after),
                       runs=(args.before_run, args.after_run))
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    print(format_rows(rows))


if __name__ == "__main__":
    main()
