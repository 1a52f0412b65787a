"""The report: table, JSON, plots (skipped without matplotlib)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from polyvox.bench.metrics import summarize
from polyvox.bench.records import RequestRecord
from polyvox.bench.report import build_table, plot, print_table, require_matplotlib, write_json


def _records(mode: str, concurrency: int, ttfa: float) -> list[RequestRecord]:
    return [
        RequestRecord(f"{mode}-{concurrency}-{i}", mode, concurrency, sent=0.0,
                      chunk_times=[ttfa + 0.01 * i, ttfa + 0.2], chunk_samples=[4800, 4800],
                      finished=ttfa + 0.3)
        for i in range(5)
    ]


def _run() -> tuple[list[dict], list[RequestRecord]]:
    rows, records = [], []
    for mode, base in (("interleaved", 0.3), ("batched", 0.1)):
        for concurrency in (1, 4):
            group = _records(mode, concurrency, base * concurrency)
            records += group
            rows.append(summarize(group, 2.0, mode, concurrency, ttfa_slo_ms=500))
    return rows, records


def test_table_shows_every_row_and_blanks_missing_values() -> None:
    rows, _ = _run()
    rows[0]["ttfa_p99_ms"] = None
    text = _render(rows)
    assert "p50/p90/p99" in text and "batched" in text and "interleaved" in text
    assert "/-" in text  # the missing p99
    assert build_table(rows).row_count == len(rows)
    assert "ciency" not in text  # no row has an efficiency
    rows[1]["efficiency"] = 0.5
    assert "ciency" in _render(rows)


def _render(rows: list[dict]) -> str:
    console = Console(record=True, width=250)
    print_table(rows, console=console)
    return console.export_text()


def test_write_json(tmp_path: Path) -> None:
    rows, records = _run()
    path = tmp_path / "bench.json"
    write_json(path, {"rows": rows, "records": records[:1], "file": tmp_path})
    payload = json.loads(path.read_text())
    assert payload["rows"] == rows
    assert payload["records"][0]["request_id"] == records[0].request_id


def test_plot_writes_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows, records = _run()
    written = plot(rows, tmp_path / "plots", records)
    names = sorted(path.name for path in written)
    assert names == ["throughput_vs_concurrency.png", "ttfa_cdf_c1.png", "ttfa_cdf_c4.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_matplotlib_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(RuntimeError, match="pip install"):
        require_matplotlib()
