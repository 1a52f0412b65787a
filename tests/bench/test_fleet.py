"""The simulated fleet (polyvox/bench/fleet.py): deterministic, and the policies differ as
they must on a small fleet: under overload, power of two choices without a cap makes
listeners late, polyvox's admission refuses instead and keeps every admitted stream in
real time; under light load nobody is refused and nobody is late."""

from __future__ import annotations

from polyvox.bench.fleet import FleetConfig, simulate

SMALL = FleetConfig(replicas=8, capacity=2, seconds=15.0)


def test_the_simulation_is_deterministic() -> None:
    assert simulate(SMALL, "polyvox", "poisson", 1.5).row() == \
        simulate(SMALL, "polyvox", "poisson", 1.5).row()


def test_overload_polyvox_refuses_where_power_of_two_makes_listeners_late() -> None:
    ours = simulate(SMALL, "polyvox", "poisson", 3.0).row()
    theirs = simulate(SMALL, "p2c", "poisson", 3.0).row()
    capped = simulate(SMALL, "p2c-capped", "poisson", 3.0).row()
    assert ours["viable_share"] == 1.0 and ours["rejected_share"] > 0.4
    assert theirs["rejected_share"] == 0 and theirs["viable_share"] < 0.5
    assert ours["goodput"] > 2 * theirs["goodput"]
    # capped at capacity, the peer keeps streams in time but callers wait in its retries
    assert capped["ttfa_p90_ms"] > 5 * ours["ttfa_p90_ms"]
    assert ours["goodput"] > capped["goodput"]


def test_light_load_refuses_nobody_and_nobody_is_late() -> None:
    for policy in ("polyvox", "p2c", "p2c-capped"):
        row = simulate(SMALL, policy, "poisson", 0.5).row()
        assert row["rejected_share"] == 0 and row["viable_share"] == 1.0, row
