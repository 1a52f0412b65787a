"""Real-time capacity (../shared/BENCHMARKS.md): how many callers one box serves.

The rule: the largest concurrency at which every stream is viable (the simulated player
never stalls after its first chunk, none fails, none is refused) and TTFA p90 stays within
3x of single-stream TTFA.

How it is measured, the same in-process and against a server (`--url`):

- A probe is one closed loop of c clients, each sending >= 4 requests in turn.
- c = 1 is probed like any other concurrency: its two probes' requests give the
  single-stream TTFA (their median), and then each must pass the rule against it.
- A concurrency counts only if it passes twice in a row: a second probe runs after a
  first that passed, and both must pass. One lucky run does not make a capacity.
- The search doubles from 1 until a concurrency fails, then bisects between the last pass
  and the first failure: O(log capacity) concurrencies, assuming that passing is monotone
  in the concurrency. It stops at `limit` when everything up to it passes.
- `--capacity-runs N` repeats the whole search, the c = 1 reference included. The
  capacity is the median over runs (the lower middle one for an even N): never the best.

Torch-free: the client of a remote server imports it.
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from polyvox.bench.metrics import percentile, request_metrics, summarize
from polyvox.bench.records import RequestRecord

TTFA_FACTOR = 3.0  # TTFA p90 within 3x single-stream TTFA
MIN_REQUESTS_PER_CLIENT = 4  # per probe: fewer moved the verdict from run to run
PASSES_NEEDED = 2  # consecutive passing probes for a concurrency to count
SEARCH_LIMIT = 256
RULE = (f"largest concurrency at which every stream is viable (no stall after its first "
        f"chunk, no error, none refused) and TTFA p90 <= {TTFA_FACTOR:g} x single-stream "
        f"TTFA (the median TTFA of the c=1 probes' requests); >= {MIN_REQUESTS_PER_CLIENT} "
        f"requests per client per probe; a concurrency counts only if {PASSES_NEEDED} "
        "probes in a row pass; the capacity is the median over runs")

# A closed loop: (concurrency, requests per client) -> (every request's record, wall seconds)
ClosedLoop = Callable[[int, int], Awaitable[tuple[list[RequestRecord], float]]]


@dataclass(frozen=True)
class Probe:
    """One closed-loop run of the search and its verdict (one item of `capacity_probes`)."""

    run: int  # which capacity run (1-based, --capacity-runs)
    concurrency: int
    attempt: int  # 1 or 2: its place in the pair of probes at this concurrency
    passed: bool
    why: str  # the figures the verdict rests on, in words
    requests: int
    ttfa_p90_ms: float | None
    ttfa_limit_ms: float | None  # TTFA_FACTOR x single-stream TTFA
    viability: float | None
    underruns: int
    errors: int
    rejected: int


def verdict(row: dict[str, Any], single_stream_ttfa_ms: float | None,
            factor: float = TTFA_FACTOR) -> tuple[bool, str]:
    """Whether one probe's row (metrics.summarize) meets the rule, and why in words."""
    ttfa_p90, viability = row.get("ttfa_p90_ms"), row.get("viability")
    errors, rejected, underruns = row.get("errors", 0), row.get("rejected", 0), row["underruns"]
    if single_stream_ttfa_ms is None:
        return False, "no single-stream TTFA: no lone request produced audio"
    limit = factor * single_stream_ttfa_ms
    is_fast = ttfa_p90 is not None and ttfa_p90 <= limit
    is_viable = viability == 1.0 and errors == 0 and rejected == 0
    reasons = [
        ("no audio" if ttfa_p90 is None else f"TTFA p90 {ttfa_p90:.0f} ms "
         f"{'<=' if is_fast else '>'} limit {limit:.0f} ms ({factor:g} x "
         f"{single_stream_ttfa_ms:.0f})"),
        f"viable {'-' if viability is None else f'{100 * viability:.0f}%'}",
        f"{underruns} underruns",
    ]
    reasons += [f"{errors} errors"] * bool(errors) + [f"{rejected} refused"] * bool(rejected)
    return is_fast and is_viable, "; ".join(reasons)


async def search_capacity(passes: Callable[[int], Awaitable[bool]],
                          limit: int = SEARCH_LIMIT) -> int:
    """The largest concurrency for which `passes` holds (0 when 1 fails): 1 first, then
    doubling until a failure, then bisecting between the last pass and the first failure.
    Never measures above the first failure; returns `limit` when everything up to it
    passes."""
    if not await passes(1):
        return 0
    good, bad = 1, None
    while bad is None:
        if good >= limit:
            return good
        trial = min(good * 2, limit)
        if await passes(trial):
            good = trial
        else:
            bad = trial
    while bad - good > 1:
        middle = (good + bad) // 2
        if await passes(middle):
            good = middle
        else:
            bad = middle
    return good


def single_stream_ttfa_ms(records: list[RequestRecord]) -> float | None:
    """The median TTFA of the lone requests that finished with audio, in ms."""
    ttfas = [m.ttfa for m in map(request_metrics, records) if m.is_ok and m.ttfa is not None]
    median = percentile(ttfas, 50)
    return None if median is None else median * 1000


@dataclass(frozen=True)
class CapacityRun:
    """One search: its capacity, the single-stream TTFA it used, and its probes."""

    run: int
    capacity: int
    single_stream_ttfa_ms: float | None
    probes: tuple[Probe, ...]


async def capacity_run(loop: ClosedLoop, run: int = 1, requests_per_client: int = 1,
                       ttfa_slo_ms: float = 500.0, limit: int = SEARCH_LIMIT,
                       on_probe: Callable[[Probe], None] | None = None) -> CapacityRun:
    """One search of the real-time capacity over `loop` (see the module docstring)."""
    requests = max(requests_per_client, MIN_REQUESTS_PER_CLIENT)
    probes: list[Probe] = []
    lone = [await loop(1, requests) for _ in range(PASSES_NEEDED)]  # the reference first
    reference = single_stream_ttfa_ms([record for records, _ in lone for record in records])

    async def passes(concurrency: int) -> bool:
        for attempt in range(1, PASSES_NEEDED + 1):
            records, wall = (lone[attempt - 1] if concurrency == 1
                             else await loop(concurrency, requests))
            row = summarize(records, wall, "capacity", concurrency, ttfa_slo_ms)
            passed, why = verdict(row, reference)
            probe = Probe(run, concurrency, attempt, passed, why, row["requests"],
                          row["ttfa_p90_ms"], None if reference is None
                          else TTFA_FACTOR * reference, row["viability"], row["underruns"],
                          row["errors"], row.get("rejected", 0))
            probes.append(probe)
            if on_probe is not None:
                on_probe(probe)
            if not passed:
                return False
        return True

    capacity = await search_capacity(passes, limit)
    return CapacityRun(run, capacity, reference, tuple(probes))


@dataclass(frozen=True)
class CapacityReport:
    """Every run of the search; `capacity` is their median, never the best."""

    runs: tuple[CapacityRun, ...]

    @property
    def capacity(self) -> int:
        return int(statistics.median_low(run.capacity for run in self.runs))

    def to_json(self) -> dict[str, Any]:
        """The JSON's capacity keys: `capacity` (the median), `capacity_runs` (each run's
        capacity and single-stream TTFA), `capacity_probes` (every probe), the rule."""
        return {
            "capacity": self.capacity,
            "capacity_runs": [{"run": run.run, "capacity": run.capacity,
                               "single_stream_ttfa_ms": run.single_stream_ttfa_ms}
                              for run in self.runs],
            "capacity_probes": [asdict(probe) for run in self.runs for probe in run.probes],
            "capacity_rule": RULE,
        }


async def measure_capacity(loop: ClosedLoop, runs: int = 1, requests_per_client: int = 1,
                           ttfa_slo_ms: float = 500.0, limit: int = SEARCH_LIMIT,
                           on_probe: Callable[[Probe], None] | None = None) -> CapacityReport:
    """`runs` independent searches over `loop`, one after the other."""
    if runs < 1:
        raise ValueError(f"--capacity-runs must be >= 1, got {runs}")
    return CapacityReport(tuple([
        await capacity_run(loop, index, requests_per_client, ttfa_slo_ms, limit, on_probe)
        for index in range(1, runs + 1)]))


def describe_probe(probe: Probe) -> str:
    """One line for the terminal."""
    return (f"  capacity run {probe.run}, c={probe.concurrency} probe {probe.attempt}: "
            f"{'pass' if probe.passed else 'FAIL'} ({probe.why})")


def describe(capacity: dict[str, Any], physical_limit: float | None = None) -> str:
    """The capacity keys of the JSON (`CapacityReport.to_json`) in one line: the median
    and each run's capacity."""
    each = ", ".join(str(run["capacity"]) for run in capacity["capacity_runs"])
    limit = f" (physical limit ~{physical_limit:.0f})" if physical_limit else ""
    return (f"real-time capacity: {capacity['capacity']} streams, the median of "
            f"{len(capacity['capacity_runs'])} run(s): {each}{limit}")
