"""What averaged head draws cost per AR step (issue 25), timed on this machine with the
shipped student: one request's whole step (backbone over a held context + head), and the
head alone for B rows, at each number of draws.

    python scripts/head_draws_cost.py [--rows 1,4,16] [--draws 1,2,4,8] [--repeats 200]

Each cell is the median of --repeats timed calls (after 10 untimed) with its 10-90%
spread; the draws alternate inside every round, so a noisy neighbour hits them alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from polyvox.models.joe_ar.family import load_student_family
from polyvox.models.layers.attention import ContiguousKV
from polyvox.models.pocket.heads import sample


def timed_row(label: str, keys: Sequence[Hashable], repeats: int,
              call: Callable[[Any], None]) -> str:
    """One table row: `call(key)` for each key, alternating inside every round, timed
    `repeats` times after 10 untimed rounds; each cell the median ms (10-90%)."""
    times: dict[Hashable, list[float]] = {key: [] for key in keys}
    for repeat in range(repeats + 10):
        for key in keys:
            start = time.perf_counter()
            call(key)
            if repeat >= 10:
                times[key].append((time.perf_counter() - start) * 1e3)
    cells = []
    for key in keys:
        deciles = statistics.quantiles(times[key], n=10)
        cells.append(f"{statistics.median(times[key]):.2f} ({deciles[0]:.2f}-{deciles[-1]:.2f})")
    return f"| {label} | " + " | ".join(cells) + " |"


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,4,16")
    parser.add_argument("--draws", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--context", type=int, default=120, help="KV positions already held")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    family = load_student_family()
    flow_lm, dim = family.flow_lm, family.latent_dim
    draws_list = [int(d) for d in args.draws.split(",")]
    generator = torch.Generator().manual_seed(0)
    layers, heads, head_dim = family.kv_shape
    prefix = [torch.randn(layers, args.context, heads, head_dim, generator=generator) * 0.5
              for _ in range(2)]
    latent = torch.randn(1, dim, generator=generator)
    noise = torch.randn(1, dim, generator=generator) * 0.45

    def step(draws: int) -> None:
        flow_lm.head_draws = draws
        kv = ContiguousKV.from_prefix(*prefix)
        flow_lm.step(latent, kv.next_positions(1)[:, 0], kv, noise, 1)

    print(f"torch {torch.__version__}, {args.threads} thread(s); ms per call")
    print("| call | " + " | ".join(f"{d} draw(s)" for d in draws_list) + " |")
    print("|---|" + "---|" * len(draws_list))
    print(timed_row(f"whole step, 1 request, context {args.context}", draws_list, args.repeats,
                    step))
    for rows in [int(r) for r in args.rows.split(",")]:
        cond = torch.randn(rows, flow_lm.d_model, generator=generator)
        noises = torch.randn(rows, dim, generator=generator) * 0.45

        def head(draws: int, cond: torch.Tensor = cond, noises: torch.Tensor = noises) -> None:
            sample(flow_lm.flow_net, flow_lm.sampler_type, cond, noises, 1, draws)

        print(timed_row(f"head alone, {rows} row(s)", draws_list, args.repeats, head))


if __name__ == "__main__":
    main()
