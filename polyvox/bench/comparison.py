"""Ratios of audio throughput measured in one run, each naming what it divides by what.

../shared/BENCHMARKS.md, "Comparing like with like":

- Against pocket-tts the headline is at equal precision (float32 both: pocket-tts runs
  its own float32 modules), polyvox at its best audio throughput over the run's closed
  loops against pocket-tts at **its** best (not at the concurrency where its threads
  thrash). A polyvox bfloat16 over pocket-tts float32 figure is a separate ratio,
  labelled as not at equal precision; it is never the headline.
- Between polyvox's own modes: batched against each other mode at equal concurrency and
  precision.

Each ratio is {"value", "equal_precision", "numerator", "denominator"}, each side naming
its mode, precision, concurrency and audio throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Row = dict[str, Any]
BASELINE = "pocket-tts"
BASELINE_PRECISION = "float32"  # pocket-tts' own modules run in float32
OTHER_MODES = ("sequential", "interleaved")


def _side(row: Row) -> dict[str, Any]:
    return {key: row.get(key) for key in ("mode", "precision", "concurrency",
                                          "audio_throughput")}


def _ratio(numerator: Row, denominator: Row) -> dict[str, Any]:
    return {
        "value": numerator["audio_throughput"] / denominator["audio_throughput"],
        "equal_precision": numerator.get("precision") == denominator.get("precision"),
        "numerator": _side(numerator),
        "denominator": _side(denominator),
    }


def best_row(rows: Sequence[Row], keep: Callable[[Row], bool]) -> Row | None:
    """The closed-loop row with the highest audio throughput among those `keep` keeps."""
    closed = [row for row in rows if keep(row) and row.get("concurrency", 0) > 0
              and row.get("audio_throughput")]
    return max(closed, key=lambda row: row["audio_throughput"], default=None)


def _is_polyvox(row: Row) -> bool:
    return row["mode"] != BASELINE


def mode_ratios(rows: Sequence[Row]) -> dict[str, dict[str, Any]]:
    """batched / each other mode, at equal concurrency and precision."""
    by = {(row["mode"], row.get("precision"), row["concurrency"]): row for row in rows
          if _is_polyvox(row)}
    ratios = {}
    for (mode, precision, concurrency), row in by.items():
        if mode != "batched" or concurrency == 0:
            continue
        for other in OTHER_MODES:
            base = by.get((other, precision, concurrency))
            if base and base["audio_throughput"]:
                name = f"batched/{other} audio throughput at c={concurrency}"
                ratios[name + (f" ({precision})" if precision else "")] = _ratio(row, base)
    return ratios


def baseline_ratios(rows: Sequence[Row], precision: str,
                    ) -> tuple[dict[str, dict[str, Any]], str | None, str | None]:
    """Polyvox against pocket-tts: (ratios by name, the headline's name or None, a note
    saying why there is no headline or None). `precision` is the run's polyvox
    precision (--precision)."""
    baseline = best_row(rows, lambda row: row["mode"] == BASELINE)
    if baseline is None:
        return {}, None, None
    ratios: dict[str, dict[str, Any]] = {}
    headline, note = None, None
    equal = best_row(rows, lambda row: _is_polyvox(row)
                     and row.get("precision") == BASELINE_PRECISION)
    if equal is not None:
        headline = (f"polyvox/pocket-tts audio throughput ({BASELINE_PRECISION} both, each "
                    "at its best concurrency)")
        ratios[headline] = _ratio(equal, baseline)
    else:
        note = (f"no equal-precision ratio in this run: polyvox ran {precision} only and "
                f"pocket-tts runs {BASELINE_PRECISION} (run with --equal-precision for one)")
    if precision != BASELINE_PRECISION:
        lowered = best_row(rows, lambda row: _is_polyvox(row)
                           and row.get("precision") == precision)
        if lowered is not None:
            name = (f"polyvox {precision}/pocket-tts {BASELINE_PRECISION} audio throughput "
                    "(NOT equal precision, each at its best concurrency)")
            ratios[name] = _ratio(lowered, baseline)
    return ratios, headline, note


def describe_ratio(name: str, ratio: dict[str, Any]) -> str:
    """One line: the value and both sides."""

    def side(part: dict[str, Any]) -> str:
        precision = f"{part['precision']}, " if part["precision"] else ""
        return (f"{part['mode']} ({precision}c={part['concurrency']}, "
                f"{part['audio_throughput']:.2f} audio s/s)")

    return (f"{name}: {ratio['value']:.2f} = {side(ratio['numerator'])} / "
            f"{side(ratio['denominator'])}")
