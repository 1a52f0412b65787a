"""How long the teacher holds each phoneme id: the run-length counts joe-ar's retiming
reads (`run_counts` in polyvox/models/pocket/joe_ar.yaml; polyvox/models/retime.py).

    python scripts/run_lengths.py [--sentences 2000] [--seed 0] [--student]

Items come from the training generator (polyvox.train.sentences; never the evaluation
sets), split into clauses as the engine splits them; the teacher's stage 1 gives each
id's frames at noise 0 and speed 1, as the pointer student was trained to copy them
(`--student`: the runs of the shipped student's own speed-1 frames, as it speaks them).
Prints the counts per 10,000 runs (runs of 1, 2, ... frames), and what they make of
a few exponents: mean d / mean d^exponent, the retiming's scale at speed 1.
"""

from __future__ import annotations

import argparse
import itertools
from collections import Counter

import torch

from polyvox.models.joe_ar.family import StudentParams, load_student_family
from polyvox.models.layers.attention import ContiguousKV
from polyvox.models.piper.front import Scales, Sentence
from polyvox.models.retime import Retiming, run_starts
from polyvox.text.clauses import split_text
from polyvox.train.sentences import generate_sentences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--student", action="store_true",
                        help="count the student's own runs (slower: it speaks every clause)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    family = load_student_family()
    front = family.front
    assert front is not None
    runs: Counter[int] = Counter()
    generator = torch.Generator().manual_seed(0)  # noise 0: nothing is drawn from it
    for text in generate_sentences(args.sentences, seed=args.seed):
        for clause in split_text(text, family.count_tokens, 350):
            ids = family.phoneme_ids(clause)
            if args.student:
                kv = ContiguousKV(*family.kv_shape, dtype=torch.float32,
                                  device=torch.device("cpu"))
                latents = family.clause_latents(torch.tensor(ids), kv, StudentParams(),
                                                generator)
                starts = run_starts(latents.reshape(-1, family.channels))
                runs.update(b - a for a, b in itertools.pairwise(starts))
                continue
            (stage1,) = front.run_stage1([Sentence(ids, Scales(0.0, 1.0, 0.0), generator)])
            runs.update(int(d) for d in stage1.durations.tolist() if d > 0)
    total = sum(runs.values())
    longest = max(runs)
    counts = [round(10_000 * runs[k] / total, 1) for k in range(1, longest + 1)]
    print(f"{total} runs over {sum(k * n for k, n in runs.items())} frames")
    print(f"run_counts: {counts}")
    for exponent in (0.5, 0.7, 1.0):
        retiming = Retiming.for_speed(1.0, exponent, counts, 1, 1)
        print(f"exponent {exponent}: scale at speed 1 = {retiming.scale:.4f}")


if __name__ == "__main__":
    main()
