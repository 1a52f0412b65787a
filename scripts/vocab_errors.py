"""Where a voice's word errors fall: on words its training text contained, or not.

    python scripts/vocab_errors.py runs/eval/v5-dev-read-s0.json runs/eval/teacher-dev-read-s0.json \
        --text 2:0:24000 --text 2:11:2560:1.0

Each --text VERSION:SEED:COUNT[:EXCHANGE_SHARE] is one run of polyvox.train.sentences'
generator (what `polyvox train teacher-data` spoke); the vocabulary is every word of them,
read as the judge reads (polyvox.asr.wer.normalize_for_wer). Each eval JSON (from
`polyvox eval --json`) is aligned word by word, reference against transcript; a reference
word substituted or deleted is an error on that word (insertions belong to no reference
word and are counted apart). Prints, per file, the error rate on words inside and outside
the vocabulary.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from polyvox.asr.wer import normalize_for_wer
from polyvox.train.sentences import generate_sentences


def wrong_words(reference: Sequence[str], hypothesis: Sequence[str]) -> tuple[list[bool], int]:
    """Per reference word, whether a minimal alignment substitutes or deletes it; and the
    number of insertions."""
    rows, cols = len(reference), len(hypothesis)
    cost = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows + 1):
        cost[i][0] = i
    for j in range(cols + 1):
        cost[0][j] = j
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            cost[i][j] = min(cost[i - 1][j] + 1, cost[i][j - 1] + 1,
                             cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]))
    wrong, insertions = [False] * rows, 0
    i, j = rows, cols
    while i or j:
        if i and j and cost[i][j] == cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]):
            wrong[i - 1] = reference[i - 1] != hypothesis[j - 1]
            i, j = i - 1, j - 1
        elif i and cost[i][j] == cost[i - 1][j] + 1:
            wrong[i - 1] = True
            i -= 1
        else:
            insertions += 1
            j -= 1
    return wrong, insertions


def vocabulary(texts: Sequence[str]) -> set[str]:
    words: set[str] = set()
    for spec in texts:
        version, seed, count, *share = spec.split(":")
        for text in generate_sentences(int(count), int(seed), version=int(version),
                                       exchange_share=float(share[0]) if share else 0.0):
            words.update(normalize_for_wer(text))
    return words


def tally(sentences: Sequence[dict], known: set[str]) -> tuple[list[int], list[int], int]:
    """[errors, words] inside the vocabulary, the same outside it, and the insertions."""
    inside, outside, inserted = [0, 0], [0, 0], 0
    for sentence in sentences:
        reference = normalize_for_wer(sentence["reference"])
        wrong, insertions = wrong_words(reference, normalize_for_wer(sentence["transcript"]))
        inserted += insertions
        for word, bad in zip(reference, wrong):
            cell = inside if word in known else outside
            cell[0] += bad
            cell[1] += 1
    return inside, outside, inserted


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="polyvox eval --json files")
    parser.add_argument("--text", action="append", required=True,
                        metavar="VERSION:SEED:COUNT[:EXCHANGE_SHARE]")
    args = parser.parse_args(argv)
    known = vocabulary(args.text)
    print(f"vocabulary: {len(known):,} words")
    for path in args.results:
        with open(path) as handle:
            runs = json.load(handle)["runs"]
        for run in runs:
            for kind in sorted({sentence["kind"] for sentence in run["sentences"]}):
                inside, outside, inserted = tally(
                    [sentence for sentence in run["sentences"] if sentence["kind"] == kind], known)
                cells = [f"{where} {errors}/{words} ({errors / max(words, 1):.3f})"
                         for where, (errors, words) in (("inside", inside), ("outside", outside))]
                print(f"{path} [{run['label']}, {kind}]: " + ", ".join(cells)
                      + f", insertions {inserted}")


if __name__ == "__main__":
    main()
