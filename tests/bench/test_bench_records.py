"""RequestRecord: validation and the JSON round trip a saved run relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyvox.bench.records import (
    RequestRecord,
    load_records,
    records_from_json,
    records_to_json,
    save_records,
)


def _records() -> list[RequestRecord]:
    done = RequestRecord("r0", "batched", 4, sent=10.0, chunk_times=[10.2, 10.5],
                         chunk_samples=[0, 1920], sample_rate=24000, finished=10.6,
                         text="Hello there.")
    failed = RequestRecord("r1", "interleaved", 4, sent=11.0, error="aborted", text="Bye.")
    return [done, failed]


def test_json_round_trip(tmp_path: Path) -> None:
    records = _records()
    assert records_from_json(records_to_json(records)) == records
    path = tmp_path / "records.json"
    save_records(path, records)
    assert load_records(path) == records


def test_add_chunk_and_is_ok() -> None:
    record = RequestRecord("r", "sequential", 1, sent=0.0)
    record.add_chunk(0.3, 960)
    assert (record.chunk_times, record.chunk_samples) == ([0.3], [960])
    assert not record.is_ok  # not finished yet
    record.finished = 0.4
    assert record.is_ok


def test_mismatched_chunk_lists_are_rejected() -> None:
    with pytest.raises(ValueError, match="chunk"):
        RequestRecord("r", "batched", 1, sent=0.0, chunk_times=[1.0], chunk_samples=[])


def test_other_json_is_rejected() -> None:
    with pytest.raises(ValueError, match="records"):
        records_from_json('{"rows": []}')
