"""Medians (and ranges) per side of scripts/ab_planner.sh's runs: capacity, and for each
mode and concurrency TTFA p90, underruns, viability and audio throughput."""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

FIGURES = ("ttfa_p90_ms", "underruns", "viability", "audio_throughput")


def main(folder: str) -> None:
    table: dict[tuple[str, str], list[float]] = defaultdict(list)
    for path in sorted(Path(folder).glob("*.json")):
        side = path.stem.split("-")[0]
        payload = json.loads(path.read_text())
        if payload.get("capacity") is not None:
            table[(side, "capacity")].append(payload["capacity"])
        for row in payload.get("rows", []):
            if row.get("mode", "").startswith("warmup"):
                continue
            for name in FIGURES:
                if row.get(name) is not None:
                    table[(side, f"{row['mode']} c={row['concurrency']} {name}")].append(row[name])
    keys = sorted({key for _, key in table})
    print(f"{'figure':40s} {'new: median [range]':>28s} {'old: median [range]':>28s}")
    for key in keys:
        cells = []
        for side in ("new", "old"):
            values = table.get((side, key), [])
            cells.append(f"{statistics.median(values):.3g} [{min(values):.3g}-{max(values):.3g}] n={len(values)}"
                         if values else "-")
        print(f"{key:40s} {cells[0]:>28s} {cells[1]:>28s}")


if __name__ == "__main__":
    main(sys.argv[1])
