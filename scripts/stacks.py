"""Summarize py-spy's raw (collapsed) stacks: samples per thread, and per thread the
functions with the most samples inclusive of what they call (polyvox's own frames and
the library entry points), so a profile reads without a flamegraph viewer.

    python scripts/stacks.py server.txt [--top 25] [--match polyvox/]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict

FRAME = re.compile(r"^(?P<name>.+?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", default="", help="only frames whose file contains this")
    args = parser.parse_args()
    per_thread: Counter[str] = Counter()
    inclusive: dict[str, Counter[str]] = defaultdict(Counter)
    leaf: dict[str, Counter[str]] = defaultdict(Counter)
    for line in open(args.path, encoding="utf-8", errors="replace"):
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        thread, *frames = stack.split(";")
        thread = re.sub(r"\(\d+\)", "", thread).strip()
        per_thread[thread] += count
        names = []
        for frame in frames:
            match = FRAME.match(frame)
            name = f"{match['name']} ({match['file']})" if match else frame
            if args.match in name:
                names.append(name)
        for name in set(names):
            inclusive[thread][name] += count
        if frames:
            leaf[thread][frames[-1]] += count
    total = sum(per_thread.values())
    for thread, samples in per_thread.most_common():
        print(f"\n## {thread}: {samples} samples ({100 * samples / total:.0f}%)")
        print("  inclusive:")
        for name, count in inclusive[thread].most_common(args.top):
            print(f"    {100 * count / samples:5.1f}%  {name}")
        print("  leaves:")
        for name, count in leaf[thread].most_common(10):
            print(f"    {100 * count / samples:5.1f}%  {name}")


if __name__ == "__main__":
    main()
