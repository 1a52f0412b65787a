"""What joe-ar's flow costs a decoder window: onnxruntime over the whole window (what the
decoder did before session 39), the torch flow over the same window, and the torch flow as
a stream (polyvox/models/piper/flow.py), float32 and bfloat16.

    python scripts/flow_probe.py [--threads 1] [--runs 20] [--chunk 32]

At joe-ar's usual chunk of 8 steps (32 frames) a window's prior is 44 frames of history,
32 new and 44 of lookahead: 120 frames for 32 new. The streamed flow runs each coupling
over the new frames and 2 x its reach.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from polyvox.models.piper.flow import FlowWindow, PiperFlow
from polyvox.models.piper.front import PiperFront
from polyvox.models.piper.onnx_graph import load_vits_graph
from polyvox.models.piper.voice_files import voice_files

SIDE = 44  # joe-ar's decoder history and lookahead, in frames


def median_ms(fn: Callable[[], object], runs: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=32, help="new frames per window")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    vits = load_vits_graph(str(voice_files(None).onnx_path))
    front = PiperFront(vits, num_threads=args.threads)
    plain = PiperFlow.from_vits(vits).eval()
    low = PiperFlow.from_vits(vits).eval()
    low.lower_precision(torch.bfloat16)
    generator = torch.Generator().manual_seed(0)
    for rows in (1, 3, 8):
        window = torch.randn(rows, 192, 2 * SIDE + args.chunk, generator=generator) * 0.5
        prior = window[:, :, SIDE + SIDE - 2 * plain.reach:]  # what a later window reads
        caches = [torch.randn(rows, 192, 2 * plain.reach, generator=generator) * 0.5
                  for _ in plain.couplings[1:]]

        def streamed(flow: PiperFlow, prior: torch.Tensor = prior,
                     caches: list[torch.Tensor] = caches) -> object:
            return flow.stream(prior, caches, FlowWindow(first=False, last=False))

        with torch.no_grad():
            figures = {
                "onnxruntime, window": median_ms(lambda w=window: front.flow_from_prior(w),
                                                 args.runs),
                "torch, window": median_ms(lambda w=window: plain(w), args.runs),
                "torch, streamed": median_ms(lambda: streamed(plain), args.runs),
                "torch bf16, streamed": median_ms(lambda: streamed(low), args.runs),
            }
        print(f"{rows} row(s), {args.chunk} new frames: " +
              ", ".join(f"{name} {ms:.1f} ms" for name, ms in figures.items()))


if __name__ == "__main__":
    main()
