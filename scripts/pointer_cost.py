"""What a pointer student's AR step costs against the sampling student's (issue 25,
docs/distill.md session 28), timed on this machine, the two alternating inside every
round: one request's whole step (backbone over a held context, then the flow head's
averaged draws, or the pointer head and the copy of the teacher's encodings), and what
follows the backbone alone for B rows.

    python scripts/pointer_cost.py --sampling V5 [--pointer W] [--rows 1,4,16] [--repeats 200]

V5: a sampling student's export (its config.yaml beside it), e.g. v5's from git:
`git show 6644b0a:polyvox/models/pocket/joe_ar.safetensors`; W: a pointer student's
(default: the shipped voice).

Each cell is the median of --repeats timed calls (after 10 untimed) with its 10-90%
spread.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from head_draws_cost import timed_row  # scripts/ is on the path when run as a script

from polyvox.models.joe_ar.family import StudentFamily, load_student_family
from polyvox.models.joe_ar.network import pointer_step
from polyvox.models.layers.attention import ContiguousKV
from polyvox.models.pocket.heads import sample


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sampling", required=True, help="a sampling student's export")
    parser.add_argument("--pointer", help="a pointer student's export (default: shipped)")
    parser.add_argument("--rows", default="1,4,16")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--context", type=int, default=120, help="KV positions already held")
    parser.add_argument("--ids", type=int, default=60, help="phoneme ids of each row's clause")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sampling: StudentFamily = load_student_family(weights=args.sampling)
    pointer: StudentFamily = load_student_family(weights=args.pointer)
    assert pointer.pointer_head is not None and sampling.pointer_head is None
    generator = torch.Generator().manual_seed(0)
    layers, heads, head_dim = sampling.kv_shape
    prefix = [torch.randn(layers, args.context, heads, head_dim, generator=generator) * 0.5
              for _ in range(2)]
    channels, dim = sampling.channels, sampling.latent_dim
    print(f"torch {torch.__version__}, {args.threads} thread(s); ms per call")
    print("| call | sampling student (2 head draws) | pointer student |")
    print("|---|---|---|")

    def inputs(rows: int) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        features = torch.randn(rows, args.ids, channels + 1, generator=generator)
        encodings = pointer.flow_lm.normalize_features(features)
        latent = encodings[:, 7].repeat(1, pointer.frames_per_step)  # mid-clause, on id 7
        noise = torch.randn(rows, dim, generator=generator) * 0.45
        return latent, (features, torch.full((rows,), args.ids)), noise

    latent, clauses, noise = inputs(1)

    def whole(family: StudentFamily) -> Callable[[], None]:
        def call() -> None:
            kv = ContiguousKV.from_prefix(*prefix)
            family.step_batch(latent, kv.next_positions(1)[:, 0], kv, noise, 1, clauses)
        return call

    steps = {"sampling": whole(sampling), "pointer": whole(pointer)}
    print(timed_row(f"whole step, 1 request, context {args.context}", list(steps),
                    args.repeats, lambda name: steps[name]()))
    for rows in [int(r) for r in args.rows.split(",")]:
        calls = _after_backbone(sampling, pointer, *inputs(rows))
        print(timed_row(f"after the backbone, {rows} row(s), {args.ids} ids each", list(calls),
                        args.repeats, lambda name, calls=calls: calls[name]()))


def _after_backbone(sampling: StudentFamily, pointer: StudentFamily, latents: torch.Tensor,
                    clauses: tuple[torch.Tensor, torch.Tensor],
                    noises: torch.Tensor) -> dict[str, Callable[[], None]]:
    """What follows the backbone for B rows: the flow head's draws, or the pointer's copy."""
    rows, (features, counts) = len(latents), clauses
    flow_lm, head = sampling.flow_lm, pointer.pointer_head
    assert head is not None
    hidden = torch.randn(rows, flow_lm.d_model, generator=torch.Generator().manual_seed(1))

    def draws() -> None:
        sample(flow_lm.flow_net, flow_lm.sampler_type, hidden, noises, 1, flow_lm.head_draws)

    def copy() -> None:
        encodings = pointer.flow_lm.normalize_features(features)
        pointer_step(head, hidden, latents.reshape(rows, pointer.frames_per_step, -1),
                     encodings, counts)

    return {"sampling": draws, "pointer": copy}


if __name__ == "__main__":
    main()
