"""The benchmark workloads of ../shared/BENCHMARKS.md, for any client: closed loop and open
loop over a `Speak` function (in-process in driver.py, a running server in remote.py).

Torch-free on purpose: a client of a remote server should not pay for importing it.
Times are the event loop's (`loop.time()`, `time.monotonic()` on asyncio's own loops), so
that a simulated clock (the tests') drives a whole run.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from polyvox.bench.records import RequestRecord

Workload = Callable[[int], str]  # request index -> text
# One request, start to end: (text, seed, mode, concurrency, request id) -> its record
Speak = Callable[[str, int, str, int, str], Awaitable[RequestRecord]]


async def run_closed_loop(speak: Speak, texts: Workload, concurrency: int,
                          requests_per_client: int,
                          mode: str) -> tuple[list[RequestRecord], float]:
    """`concurrency` clients, each sending its next request when the previous finished."""
    records: list[RequestRecord] = []

    async def client(index: int) -> None:
        for turn in range(requests_per_client):
            number = turn * concurrency + index
            records.append(await speak(texts(number), number, mode, concurrency,
                                       f"{mode}-c{concurrency}-{number}"))

    clock = asyncio.get_running_loop().time
    started = clock()
    await asyncio.gather(*(client(i) for i in range(concurrency)))
    return records, clock() - started


async def run_open_loop(speak: Speak, texts: Workload, rate: float, duration: float,
                        mode: str, seed: int = 0,
                        burstiness: float = 1.0) -> tuple[list[RequestRecord], float]:
    """Arrivals at `rate` per second for `duration` seconds: exponential gaps (Poisson), or
    gamma gaps with shape 1/burstiness when burstiness != 1."""
    rng = random.Random(seed)
    tasks: list[asyncio.Task[RequestRecord]] = []
    clock = asyncio.get_running_loop().time
    started = clock()
    number = 0
    while clock() - started < duration:
        tasks.append(asyncio.create_task(speak(texts(number), number, mode, 0,
                                               f"{mode}-open-{number}")))
        number += 1
        shape = 1.0 / burstiness
        await asyncio.sleep(rng.gammavariate(shape, 1.0 / (rate * shape)))
    records = list(await asyncio.gather(*tasks))
    return records, clock() - started
