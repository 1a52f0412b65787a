"""How far the autoregressive families' word timings (a clause's audio spread over its
words by length, polyvox/server/word_timings.py) are from where words are really spoken.

Piper knows where: its duration predictor gives each word its frames. So each sentence of
the dev split is spoken by `piper/joe` through the engine, and its word starts are taken
twice from the same audio: from Piper's durations (the reference) and by the estimate the
AR families get. Piper's pace stands in for joe-ar's (distilled from it). Prints the
median, p90 and largest error of word starts, in milliseconds.

    python scripts/word_timing_accuracy.py [--limit N]
"""

from __future__ import annotations

import argparse
import statistics

from polyvox.eval.sets import load_items
from polyvox.server.word_timings import WordTimeline
from polyvox.serving import DEFAULT_VOICE, load_served


def word_starts(served, text: str, use_durations: bool) -> list[float]:
    engine = served.engine
    timeline = WordTimeline(engine.text_pipeline(), served.sample_rate,
                            served.family.audio.samples_per_frame)
    timeline.add_text(text)
    timeline.end_text()
    engine.add_request(text, DEFAULT_VOICE, served.params(seed=0))
    events = []
    while engine.has_work():
        for chunk in engine.step():
            frames = chunk.word_frames if use_durations else None
            events += timeline.add_audio(chunk.samples.numel(), chunk.ends_clause, frames)
    events += timeline.finish()
    return [word["start"] for event in events for word in event["words"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="sentences per kind")
    args = parser.parse_args()
    served = load_served("piper/joe")
    errors_ms: list[float] = []
    for kind in ("read", "service"):
        items = load_items("dev", kind)[: args.limit]
        for item in items:
            truth = word_starts(served, item.text, use_durations=True)
            estimate = word_starts(served, item.text, use_durations=False)
            assert len(truth) == len(estimate), item.text
            errors_ms += [1000 * abs(a - b) for a, b in zip(truth, estimate, strict=True)]
    errors_ms.sort()
    p90 = errors_ms[int(0.9 * (len(errors_ms) - 1))]
    print(f"{len(errors_ms)} words: word start error median {statistics.median(errors_ms):.0f} "
          f"ms, p90 {p90:.0f} ms, max {errors_ms[-1]:.0f} ms")


if __name__ == "__main__":
    main()
