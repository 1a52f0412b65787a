"""What a speed costs a caller of joe-ar: first audio and compute per audio second, one
stream on an idle engine, at speeds 1 / 0.75 / 1.25 / 1.5 (faster speech is retimed from
speed-1 frames: more AR steps per second of audio, and the retimer holds the current id).

    python scripts/speed_ttfa.py [--runs 5] [--threads 2] [--weights W ...]

Each run speaks the same two-sentence reply through the engine (the machine's clock),
interleaving the speeds (and the `--weights` given, each an export with its config
beside it, e.g. the shipped weights under a config with faster_in_z; "shipped": the
shipped voice); prints per build and speed the median and range of the time to the first
chunk, and of wall seconds per audio second (RTF).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from polyvox.speak import Speaker

TEXT = ("Thanks for waiting, I found your order. It left our warehouse this morning and "
        "should reach you by Thursday.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weights", nargs="+", default=["shipped"])
    parser.add_argument("--speeds", default="1,0.75,1.25,1.5")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    speakers = {w: Speaker.load("pocket/joe-ar", weights=None if w == "shipped" else w)
                for w in args.weights}
    speeds = tuple(float(s) for s in args.speeds.split(","))
    keys = [(w, s) for w in args.weights for s in speeds]
    first: dict[tuple[str, float], list[float]] = {k: [] for k in keys}
    rtf: dict[tuple[str, float], list[float]] = {k: [] for k in keys}
    for run in range(args.runs + 1):  # the first round warms up and is not counted
        for key in keys:
            weights, speed = key
            engine, served = speakers[weights].served.engine, speakers[weights].served
            rate = served.sample_rate
            params = served.params(speed=speed)
            started = time.perf_counter()
            engine.add_request(TEXT, "default", params, request_id=f"r{run}-{speed}")
            first_at, samples = None, 0
            while engine.requests:
                for chunk in engine.step():
                    samples += chunk.samples.numel()
                    if first_at is None and chunk.samples.numel():
                        first_at = time.perf_counter() - started
            if run and first_at is not None:
                first[key].append(1000 * first_at)
                rtf[key].append((time.perf_counter() - started) / (samples / rate))
    print("| weights | speed | first audio, ms: median (range) | RTF: median (range) |")
    print("|---|---|---|---|")
    for key in keys:
        f, r = first[key], rtf[key]
        print(f"| {key[0]} | {key[1]} | {statistics.median(f):.0f} ({min(f):.0f}-{max(f):.0f}) | "
              f"{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f}) |")


if __name__ == "__main__":
    main()
