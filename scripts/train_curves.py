"""Training curves as a PNG (issue 25: the curves in docs/distill.md and posttrain.md).

    python scripts/train_curves.py runs/joe-ar-v2/log.jsonl --fields total val_total \
        --title "joe-ar v2 distillation" --out docs/img/distill-v2.png

Reads a run's log.jsonl (distill, dpo or grpo: one JSON record per step) and plots each
field against the step: the raw values faint, a running median over --window steps on
top (fields logged only now and then, such as val_*, are drawn as points joined by a line).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def running_median(values: list[float], window: int) -> list[float]:
    half = window // 2
    return [statistics.median(values[max(0, i - half): i + half + 1])
            for i in range(len(values))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--fields", nargs="+", required=True)
    parser.add_argument("--window", type=int, default=51)
    parser.add_argument("--title", default="")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in args.log.open(encoding="utf-8") if line.strip()]
    figure, axes = plt.subplots(len(args.fields), 1, figsize=(7, 2.2 * len(args.fields)),
                                sharex=True, squeeze=False)
    for axis, field in zip(axes[:, 0], args.fields):
        points = [(r["step"], float(r[field])) for r in records if field in r]
        if not points:
            raise SystemExit(f"no record has {field!r}")
        steps, values = zip(*points)
        sparse = len(points) < len(records) / 10
        if sparse:
            axis.plot(steps, values, "o-", markersize=3)
        else:
            axis.plot(steps, values, alpha=0.25, linewidth=0.6)
            axis.plot(steps, running_median(list(values), args.window), linewidth=1.4)
        axis.set_ylabel(field)
        axis.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    if args.title:
        axes[0, 0].set_title(args.title)
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({len(records)} records)")


if __name__ == "__main__":
    main()
