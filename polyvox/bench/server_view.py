"""The server's own view of a run: its time to first audio, read from GET /metrics.

`polyvox serve` counts each stream's first audio from the request's arrival in its handler
(queueing included) to the first chunk there, in the histogram `polyvox_ttfa_seconds`
(per endpoint). Read before and after a run, the difference is that run's requests as
the server saw them; set beside the client's TTFA it splits a caller's wait into the
server's part and what lies outside it (the network, the client's own work and, where
client and server share a machine, the client's CPU).
"""

from __future__ import annotations

import math

TTFA_METRIC = "polyvox_ttfa_seconds"

Buckets = dict[float, float]  # a bucket's upper bound (seconds) -> observations up to it


def ttfa_buckets(metrics_text: str, endpoint: str) -> Buckets:
    """The cumulative TTFA buckets of one endpoint ("speech", "websocket") in a
    Prometheus text exposition; empty when the server exports none."""
    from prometheus_client.parser import text_string_to_metric_families

    buckets: Buckets = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != TTFA_METRIC:
            continue
        for sample in family.samples:
            if sample.name == f"{TTFA_METRIC}_bucket" and sample.labels.get("endpoint") == endpoint:
                buckets[float(sample.labels["le"])] = sample.value
    return buckets


def histogram_percentile(before: Buckets, after: Buckets, q: float) -> float | None:
    """The q-th percentile (seconds) of what a cumulative histogram observed between two
    readings, interpolated linearly inside its bucket (the first bucket from 0, as
    Prometheus' histogram_quantile); the last finite bound for a rank beyond it. None
    when nothing was observed in between."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be between 0 and 100, got {q}")
    bounds = sorted(after)
    counts = [after[bound] - before.get(bound, 0.0) for bound in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = q / 100 * counts[-1]
    lower, below = 0.0, 0.0
    # NOTE: the first bucket that reaches the rank holds more than the one before it, so
    # the loop returns by the last (+Inf) bucket at the latest.
    for bound, count in zip(bounds, counts):
        if count >= rank and count > below:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    raise AssertionError("a cumulative histogram ends with its total")
