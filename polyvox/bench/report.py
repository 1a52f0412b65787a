"""The benchmark report: a table on the terminal (rich), a JSON file, and PNG plots.

Rows are the dicts of `metrics.summarize` (plus whatever the driver adds, e.g. `rate`).
Plots need matplotlib, imported only when plotting.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from polyvox.bench import capacity, comparison
from polyvox.bench.metrics import ttfas_ms
from polyvox.bench.records import RequestRecord

Row = dict[str, Any]
SHORT_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _number(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _numbers(row: Row, keys: Sequence[str], digits: int) -> str:
    return "/".join(_number(row.get(key), digits) for key in keys)


def _percent(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _underruns(row: Row) -> str:
    count, seconds = row.get("underruns"), row.get("underrun_seconds")
    if count is None:
        return "-"
    return str(count) if not count or seconds is None else f"{count} ({seconds:.2f} s)"


# (header, cell of a row, the key whose presence in some row shows the column)
COLUMNS: tuple[tuple[str, Callable[[Row], str], str], ...] = (
    ("mode", lambda r: str(r.get("mode", "-")), "mode"),
    ("prec", lambda r: SHORT_PRECISION.get(str(r.get("precision")), "-"), "precision"),
    ("c", lambda r: str(r.get("concurrency", "-")), "concurrency"),
    ("req", lambda r: str(r.get("requests", "-")), "requests"),
    ("err", lambda r: str(r.get("errors", "-")), "errors"),
    ("rej", lambda r: str(r.get("rejected", "-")), "rejected"),  # a server's 429/503
    ("TTFA ms\np50/p90/p99", lambda r: _numbers(r, ("ttfa_p50_ms", "ttfa_p90_ms",
                                                     "ttfa_p99_ms"), 0), "ttfa_p50_ms"),
    ("E2E ms\np50", lambda r: _number(r.get("e2e_p50_ms"), 0), "e2e_p50_ms"),
    ("RTF\np50/p90", lambda r: _numbers(r, ("rtf_p50", "rtf_p90"), 2), "rtf_p50"),
    ("audio\ns/s", lambda r: _number(r.get("audio_throughput"), 2), "audio_throughput"),
    ("req/s", lambda r: _number(r.get("request_throughput"), 2), "request_throughput"),
    ("under-\nruns", _underruns, "underruns"),
    ("viable", lambda r: _percent(r.get("viability")), "viability"),
    ("goodput\nreq/s", lambda r: _number(r.get("goodput"), 2), "goodput"),
    ("model\nGFLOP/s", lambda r: _number(r.get("model_gflops_per_s"), 1), "efficiency"),
    ("effi-\nciency", lambda r: _percent(r.get("efficiency")), "efficiency"),
)


def build_table(rows: Sequence[Row], title: str | None = None) -> Table:
    """A rich Table of the rows; missing values show as "-". Columns whose key no row
    has (e.g. efficiency without a FLOP count) are left out."""
    columns = [c for c in COLUMNS if any(c[2] in row for row in rows)]
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for header, _, key in columns:
        table.add_column(header, justify="left" if key == "mode" else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(cell(row) for _, cell, _ in columns))
    return table


def print_table(rows: Sequence[Row], title: str | None = None,
                console: Console | None = None) -> None:
    """Print the table; when output is not a terminal (logs, pipes) it is not squeezed
    into rich's default 80 columns."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)
    console.print(build_table(rows, title))


def print_figures(payload: dict[str, Any], ceilings: dict[str, float],
                  console: Console) -> None:
    """What the table does not show: how efficiency was computed, the ratios (each with
    both sides), and the capacity."""
    gflop = payload.get("model_gflop_per_audio_second")
    if gflop is not None:
        measured = ", ".join(f"{name} {value:.0f}" for name, value in ceilings.items())
        console.print(f"efficiency = model GFLOP/s ({gflop:.2f} GFLOP per audio second) / "
                      f"the matmul ceiling in the row's precision, measured in this run "
                      f"(GFLOP/s: {measured})")
    for name, ratio in payload.get("ratios", {}).items():
        marker = "headline " if name == payload.get("headline_ratio") else ""
        console.print(marker + comparison.describe_ratio(name, ratio))
    if payload.get("headline_note"):
        console.print(payload["headline_note"])
    if payload.get("capacity") is not None:
        console.print(capacity.describe(payload, payload.get("physical_stream_limit")))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def write_json(path: str | Path, payload: Any) -> None:
    """Write `payload` (dicts, lists, numbers, dataclasses such as records) as JSON."""
    text = json.dumps(payload, indent=2, default=_plain, allow_nan=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


# --- plots ---------------------------------------------------------------------------

def require_matplotlib() -> None:
    """Fail early (before a long run) when plots are asked for but cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "--plot needs matplotlib, which is not installed: pip install 'polyvox[bench]' "
            "(or pip install matplotlib), or run without --plot"
        ) from None


def _new_figure() -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend

    return Figure(figsize=(7, 4.5), layout="constrained")


def plot_ttfa_cdf(records: Sequence[RequestRecord], directory: Path) -> list[Path]:
    """One PNG per concurrency: the TTFA CDF of each mode."""
    by_load: dict[int, dict[str, list[RequestRecord]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        by_load[record.concurrency][record.mode].append(record)
    written = []
    for concurrency, by_mode in sorted(by_load.items()):
        figure = _new_figure()
        axes = figure.add_subplot()
        for mode, group in sorted(by_mode.items()):
            values = sorted(ttfas_ms(group))
            if values:
                fractions = [(i + 1) / len(values) for i in range(len(values))]
                axes.step(values, fractions, where="post", label=f"{mode} (n={len(values)})")
        load = f"concurrency {concurrency}" if concurrency else "open loop"
        axes.set(xlabel="TTFA (ms)", ylabel="fraction of requests", ylim=(0, 1.02),
                 title=f"Time to first audio, {load}")
        axes.grid(alpha=0.3)
        axes.legend()
        path = directory / f"ttfa_cdf_c{concurrency}.png"
        figure.savefig(path, dpi=120)
        written.append(path)
    return written


def plot_throughput(rows: Sequence[Row], directory: Path) -> Path | None:
    """Audio throughput vs concurrency, a line per mode (closed-loop rows only)."""
    by_mode: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        if row.get("concurrency", 0) > 0 and row.get("audio_throughput") is not None:
            by_mode[row["mode"]].append(row)
    if not by_mode:
        return None
    figure = _new_figure()
    axes = figure.add_subplot()
    for mode, group in sorted(by_mode.items()):
        group = sorted(group, key=lambda row: row["concurrency"])
        axes.plot([r["concurrency"] for r in group], [r["audio_throughput"] for r in group],
                  marker="o", label=mode)
    axes.set_xscale("log", base=2)
    axes.set(xlabel="concurrent streams", ylabel="audio seconds per wall second",
             title="Audio throughput vs concurrency")
    axes.grid(alpha=0.3)
    axes.legend()
    path = directory / "throughput_vs_concurrency.png"
    figure.savefig(path, dpi=120)
    return path


def plot(rows: Sequence[Row], directory: str | Path,
         records: Sequence[RequestRecord] = ()) -> list[Path]:
    """Write the PNGs of BENCHMARKS.md into `directory` (created if needed): TTFA CDFs
    per mode (from `records`) and audio throughput vs concurrency (from `rows`).
    Returns the files written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = plot_ttfa_cdf(records, out) if records else []
    throughput = plot_throughput(rows, out)
    return written + ([throughput] if throughput is not None else [])
