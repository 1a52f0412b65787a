"""Serving cost of a chaining mode: wall seconds per second of audio, one request at a
time on one thread, over dev paragraphs, the modes alternating (docs/perf.md).

    python scripts/chaining_cost.py [--weights W] [--rounds 3] [--paragraphs 8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from polyvox.eval.sets import load_items
from polyvox.speak import Speaker
from polyvox.train.posteval import PARAGRAPH_SEED, paragraphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="pocket/joe-ar")
    parser.add_argument("--weights")
    parser.add_argument("--modes", default="pocket,audio")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paragraphs", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    texts = [" ".join(item.text for item in group)
             for group in paragraphs(load_items("dev", "read"), args.paragraphs, PARAGRAPH_SEED)]
    speakers = {mode: Speaker.load(args.model, weights=args.weights, chaining=mode)
                for mode in args.modes.split(",")}
    for speaker in speakers.values():
        speaker.speak("Warm up.")
    ratios: dict[str, list[float]] = {mode: [] for mode in speakers}
    for round_ in range(args.rounds):
        for mode, speaker in speakers.items():
            wall = audio = 0.0
            for text in texts:
                started = time.perf_counter()
                samples = speaker.speak(text, seed=round_)
                wall += time.perf_counter() - started
                audio += samples.numel() / speaker.sample_rate
            ratios[mode].append(wall / audio)
            print(f"round {round_}: {mode} {wall / audio:.3f} s per audio second", flush=True)
    for mode, values in ratios.items():
        print(f"{mode}: median {statistics.median(values):.3f} "
              f"[{min(values):.3f}-{max(values):.3f}] s per audio second")


if __name__ == "__main__":
    main()
