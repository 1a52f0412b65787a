"""The server's TTFA read from its Prometheus histogram (polyvox.bench.server_view),
checked against the exact percentiles of the same observations."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from polyvox.bench.metrics import percentile
from polyvox.bench.server_view import histogram_percentile, ttfa_buckets
from polyvox.server.metrics import TTFA_BUCKETS


def _exposition(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def _bucket_width_at(seconds: float) -> float:
    bounds = (0.0, *TTFA_BUCKETS)
    for lower, upper in pairwise(bounds):
        if seconds <= upper:
            return upper - lower
    return float("inf")


def test_a_runs_percentiles_come_from_the_observations_between_two_readings() -> None:
    registry = CollectorRegistry()
    ttfa = Histogram("polyvox_ttfa_seconds", "first audio", ["endpoint"],
                     buckets=TTFA_BUCKETS, registry=registry)
    rng = random.Random(3)
    for _ in range(300):  # an earlier run, slower: must not count
        ttfa.labels("speech").observe(rng.uniform(0.3, 0.9))
    ttfa.labels("websocket").observe(0.015)  # another endpoint: must not count either
    before = ttfa_buckets(_exposition(registry), "speech")
    run = [rng.lognormvariate(-2.5, 0.4) for _ in range(2000)]  # ~80 ms, a long tail
    for seconds in run:
        ttfa.labels("speech").observe(seconds)
    after = ttfa_buckets(_exposition(registry), "speech")
    for q in (10, 50, 90, 99):
        exact = percentile(run, q)
        assert exact is not None
        estimate = histogram_percentile(before, after, q)
        assert estimate is not None
        assert abs(estimate - exact) <= _bucket_width_at(exact), (q, estimate, exact)
    # the earlier, slower run left alone would read far slower
    assert histogram_percentile({}, after, 90) > histogram_percentile(before, after, 90) + 0.1


def test_nothing_observed_is_none_and_the_edges_stay_inside_the_buckets() -> None:
    buckets = {0.05: 0.0, 0.1: 4.0, 0.2: 4.0, float("inf"): 4.0}
    assert histogram_percentile(buckets, buckets, 90) is None
    assert histogram_percentile({}, {}, 50) is None
    assert histogram_percentile({}, buckets, 100) == pytest.approx(0.1)
    assert histogram_percentile({}, buckets, 0) == pytest.approx(0.05)
    assert histogram_percentile({}, buckets, 50) == pytest.approx(0.075)
    beyond = {0.05: 0.0, 0.1: 1.0, float("inf"): 4.0}  # most past the last finite bound
    assert histogram_percentile({}, beyond, 90) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="between 0 and 100"):
        histogram_percentile({}, buckets, 101)


def test_a_server_without_the_histogram_gives_no_buckets() -> None:
    registry = CollectorRegistry()
    Histogram("other_seconds", "not ours", buckets=TTFA_BUCKETS, registry=registry).observe(1)
    assert ttfa_buckets(_exposition(registry), "speech") == {}
