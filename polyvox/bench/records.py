"""What a benchmark client records for one request, and its JSON form.

A record holds raw observations only (times of `time.monotonic()`, sample counts); every
figure is derived from it in `metrics.py`, so a saved run can be re-analysed later.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECORDS_FORMAT = "polyvox-bench-records/1"
REJECTED_STATUSES = (429, 503)  # the server's admission said "not now": nothing was generated


@dataclass
class RequestRecord:
    """One request as the client saw it.

    Filled by the client: `sent` before the request is handed to the engine, one entry
    in `chunk_times` / `chunk_samples` per chunk received (in arrival order, empty chunks
    included), `finished` when the stream ended, `error` if it ended with an error.
    Clients of a running server (bench/remote.py) also fill `status`, the HTTP status of
    the answer (for a WebSocket, the status a speech request would have had), and
    `retry_after`, the seconds the server asked a refused client to wait.
    """

    request_id: str
    mode: str  # scheduling mode or baseline name, e.g. "batched", "pocket-tts"
    concurrency: int  # closed loop: number of clients; open loop: 0
    sent: float  # time.monotonic() seconds
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk
    chunk_samples: list[int] = field(default_factory=list)  # samples in each chunk
    sample_rate: int = 24000
    finished: float | None = None  # end of the stream; None if it never ended
    error: str | None = None
    text: str = ""
    status: int | None = None  # None in-process (there is no server to answer)
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if len(self.chunk_times) != len(self.chunk_samples):
            raise ValueError(
                f"record {self.request_id}: {len(self.chunk_times)} chunk times but "
                f"{len(self.chunk_samples)} chunk sample counts"
            )
        if self.sample_rate <= 0:
            raise ValueError(f"record {self.request_id}: sample_rate must be > 0")

    def add_chunk(self, arrived: float, num_samples: int) -> None:
        """Record one received chunk."""
        self.chunk_times.append(arrived)
        self.chunk_samples.append(num_samples)

    @property
    def is_rejected(self) -> bool:
        """Refused by the server's admission (429 or 503): not a failed stream, since no
        stream was started."""
        return self.status in REJECTED_STATUSES

    @property
    def is_ok(self) -> bool:
        """Finished without an error (a refused request is not ok: it has no audio)."""
        return self.error is None and self.finished is not None and not self.is_rejected

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(
            request_id=str(data["request_id"]),
            mode=str(data["mode"]),
            concurrency=int(data["concurrency"]),
            sent=float(data["sent"]),
            chunk_times=[float(t) for t in data.get("chunk_times", [])],
            chunk_samples=[int(n) for n in data.get("chunk_samples", [])],
            sample_rate=int(data.get("sample_rate", 24000)),
            finished=None if data.get("finished") is None else float(data["finished"]),
            error=data.get("error"),
            text=str(data.get("text", "")),
            status=None if data.get("status") is None else int(data["status"]),
            retry_after=(None if data.get("retry_after") is None
                         else float(data["retry_after"])),
        )


def records_to_json(records: Iterable[RequestRecord]) -> str:
    """Records -> a JSON document (with a format tag, so readers can check it)."""
    payload = {"format": RECORDS_FORMAT, "records": [r.to_dict() for r in records]}
    return json.dumps(payload, indent=1)


def records_from_json(text: str) -> list[RequestRecord]:
    """The inverse of `records_to_json`."""
    payload = json.loads(text)
    if not isinstance(payload, dict) or payload.get("format") != RECORDS_FORMAT:
        raise ValueError(f"not a polyvox bench records document (expected {RECORDS_FORMAT!r})")
    return [RequestRecord.from_dict(item) for item in payload["records"]]


def save_records(path: str | Path, records: Sequence[RequestRecord]) -> None:
    Path(path).write_text(records_to_json(records), encoding="utf-8")


def load_records(path: str | Path) -> list[RequestRecord]:
    return records_from_json(Path(path).read_text(encoding="utf-8"))
