"""In-process benchmark clients of a served model: closed loop and open loop (the
pocket-tts baseline's own loop is in baseline.py).

Every client records, per request, when it sent the request and when each chunk arrived
on the event loop's clock (`loop.time()`, which is `time.monotonic()` on asyncio's loops
and a simulated clock in the tests); polyvox.bench.metrics turns records into figures.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, Protocol

from polyvox.bench.records import RequestRecord
from polyvox.bench.workloads import Workload, run_closed_loop, run_open_loop


class ServedModel(Protocol):
    """What the clients use of a polyvox.serving.Served (and the tests' simulated model):
    `runtime.generate(text, voice, params, request_id=)` yields chunks with `.samples`."""

    runtime: Any

    @property
    def sample_rate(self) -> int: ...

    def params(self, seed: int = 0) -> Any: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


async def _one_request(served: ServedModel, text: str, seed: int, mode: str, concurrency: int,
                       request_id: str) -> RequestRecord:
    clock = asyncio.get_running_loop().time
    record = RequestRecord(request_id, mode, concurrency, sent=clock(),
                           sample_rate=served.sample_rate, text=text)
    try:
        async for chunk in served.runtime.generate(text, "default", served.params(seed=seed),
                                                   request_id=request_id):
            record.add_chunk(clock(), int(chunk.samples.numel()))
        record.finished = clock()
    except Exception as error:  # recorded, counted as an error in the report
        record.error = repr(error)
    return record


async def closed_loop(served: ServedModel, texts: Workload, concurrency: int,
                      requests_per_client: int, mode: str) -> tuple[list[RequestRecord], float]:
    """`concurrency` clients, each sending its next request when the previous finished."""
    return await run_closed_loop(partial(_one_request, served), texts, concurrency,
                                 requests_per_client, mode)


async def open_loop(served: ServedModel, texts: Workload, rate: float, duration: float, mode: str,
                    seed: int = 0, burstiness: float = 1.0) -> tuple[list[RequestRecord], float]:
    """Arrivals at `rate` per second for `duration` seconds (see `run_open_loop`)."""
    return await run_open_loop(partial(_one_request, served), texts, rate, duration, mode,
                               seed, burstiness)
