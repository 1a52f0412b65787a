"""How intelligible can joe's fast speech be? The noise-free Piper teacher's dev read
sentences, sped up in several ways, judged by whisper tiny.en like `polyvox eval`
(docs/posttrain.md, "Fast speech: what this voice and judge allow").

    python scripts/fast_speech_ceiling.py --speeds 1,1.25,1.5 \
        --ways uniform,piper,wsola [--limit N] [--json F]

Ways of speaking a sentence at `speed` (the others start from its speed-1 durations):
- uniform: every phoneme id's frames divided by the speed (largest-remainder rounding to
  exactly 1/speed of the frames): what joe-ar's data teaches at an effective speed;
- powA: frames in proportion to duration**A (A < 1 squeezes long ids more than short);
- pauseK: pause ids (space, punctuation) squeezed K times as hard as the phones;
- piper: Piper's own length scale 1/speed (its frames are rounded up per id, so it is
  slower than asked: about 1.39x at 1.5);
- wsola: the speed-1 audio time-compressed by overlap-add of pitch-preserving windows
  (WSOLA), no model involved: a rough ceiling for a voice that keeps its speed-1
  articulation.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from polyvox.asr.transcribe import Transcriber
from polyvox.eval.score import corpus, item_errors
from polyvox.eval.sets import load_items
from polyvox.models.piper.front import Sentence
from polyvox.models.piper.model import PiperModel
from polyvox.text.normalize import make_normalizer

PAUSE_SYMBOLS = " ,.;:!?-"


def allocate(weights: list[float], total: int) -> list[int]:
    """Non-negative integers summing to `total`, in proportion to `weights`."""
    scale = total / sum(weights)
    raw = [weight * scale for weight in weights]
    counts = [int(value) for value in raw]
    by_remainder = sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)
    for index in by_remainder[: total - sum(counts)]:
        counts[index] += 1
    return counts


def reshaped(durations: list[int], pauses: list[bool], speed: float, way: str) -> list[int]:
    """A sentence's speed-1 frames per id -> frames at `speed` (1/speed of them in all)."""
    total = max(1, round(sum(durations) / speed))
    if way == "uniform":
        return allocate([float(d) for d in durations], total)
    if way.startswith("pow"):
        return allocate([float(d) ** float(way[3:]) for d in durations], total)
    if way.startswith("pause"):
        ratio = float(way[5:])
        return allocate([d / ratio if pause else float(d) for d, pause in zip(durations, pauses)],
                        total)
    raise ValueError(f"unknown way {way!r}")


def wsola(audio: torch.Tensor, speed: float, window: int = 1024, tolerance: int = 256
          ) -> torch.Tensor:
    """Time compression by `speed`, pitch kept: Hann windows overlap-added at half a window
    apart, each read `speed` x further on in the input, shifted by up to `tolerance`
    samples to best continue the previous window's natural continuation."""
    hop = window // 2
    hann = np.hanning(window + 1)[:window]
    pad = window + tolerance
    x = np.concatenate([np.zeros(pad), audio.numpy().astype(np.float64), np.zeros(pad + window)])
    count = int((len(x) - 2 * pad) / (hop * speed))
    out = np.zeros(count * hop + window)
    previous = pad
    for k in range(count):
        start = int(pad + k * hop * speed)
        if k:
            natural = x[previous + hop: previous + hop + window]
            search = x[start - tolerance: start + tolerance + window]
            start += int(np.argmax(np.correlate(search, natural, mode="valid"))) - tolerance
        out[k * hop: k * hop + window] += hann * x[start: start + window]
        previous = start
    return torch.from_numpy(out[hop:].astype(np.float32))


class Teacher:
    def __init__(self) -> None:
        self.piper = PiperModel.load(num_threads=1, verify=False)
        id_map = self.piper.config.phoneme_id_map
        self.pause_ids = {i for symbol in PAUSE_SYMBOLS for i in id_map.get(symbol, [])}
        self.normalizer = make_normalizer("en")  # as the engine normalizes a whole text

    def speak(self, text: str, speed: float, way: str) -> torch.Tensor:
        if way == "wsola":
            return wsola(self.speak(text, 1.0, "uniform"), speed)
        pieces = []
        for ids in self.piper.sentence_ids(self.normalizer.normalize(text)):
            length = speed if way == "piper" else 1.0
            (stage1,) = self.piper.front.run_stage1(
                [Sentence(ids, self.piper.scales(length, noise=False),
                          torch.Generator().manual_seed(0))])
            prior = self.piper.front.prior_mean(stage1)  # [C, T]: one vector per id, repeated
            if way != "piper" and speed != 1.0:
                durations = stage1.durations.tolist()
                starts = np.cumsum([0, *durations[:-1]]).tolist()
                kept = [(i, d, s) for i, d, s in zip(ids, durations, starts) if d > 0]
                frames = reshaped([d for _, d, _ in kept], [i in self.pause_ids for i, _, _ in kept],
                                  speed, way)
                prior = torch.cat([prior[:, s: s + 1].expand(-1, n)
                                   for (_, _, s), n in zip(kept, frames) if n > 0], dim=1)
            pieces.append(self.piper.decode(self.piper.front.flow_from_prior(prior)))
        return torch.cat(pieces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speeds", default="1,1.25,1.5")
    parser.add_argument("--ways", default="uniform,piper,wsola")
    parser.add_argument("--limit", type=int, help="the first N dev read sentences only")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    teacher, judge = Teacher(), Transcriber(threads=1)
    items = load_items("dev", "read")[: args.limit]
    results = {}
    for speed in [float(value) for value in args.speeds.split(",")]:
        for way in args.ways.split(",") if speed != 1.0 else ["uniform"]:
            started, errors, samples = time.perf_counter(), [], 0
            for item in items:
                audio = teacher.speak(item.text, speed, way)
                errors.append(item_errors(item, judge.transcribe(audio,
                                                                 teacher.piper.sample_rate)))
                samples += audio.numel()
            pooled = corpus(errors)
            row = {"edits": pooled.num_edits, "words": pooled.num_reference_words,
                   "wer": round(pooled.wer, 4),
                   "audio_s": round(samples / teacher.piper.sample_rate, 1)}
            results[f"{speed}/{way}"] = row
            print(f"speed {speed} {way}: {row} ({time.perf_counter() - started:.0f} s)",
                  flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
