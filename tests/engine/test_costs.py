"""The cost model: a fixed part per call plus a part per unit, learned from timings."""

from __future__ import annotations

import pytest

from polyvox.engine.costs import LinearCost, StageCosts


def test_the_cold_first_run_is_forgotten_and_the_figure_follows_measurements() -> None:
    cost = LinearCost(0.01, 0.001, 4)
    prior = cost(4)
    cost.observe(5.0, 1, 4)  # the first, cold run: kernels chosen, buffers allocated
    assert cost(4) == prior
    for _ in range(40):
        cost.observe(0.05, 1, 4)
    assert cost(4) == pytest.approx(0.05, rel=0.05)


@pytest.mark.parametrize("per_call, per_unit", [(0.010, 0.00055), (0.0, 0.002), (0.03, 0.0)])
def test_a_call_and_its_units_are_priced_apart(per_call: float, per_unit: float) -> None:
    """Calls of 10, 40 and 320 tokens (a packed prefill): the fit finds both parts, so a
    small call is not priced as if each of its tokens cost what a lone call's did."""
    cost = LinearCost(0.008, 0.0005, 32)
    for _ in range(60):
        for units in (10, 40, 320):
            cost.observe(per_call + per_unit * units, 1, units)
    for units in (1, 10, 320, 1000):
        assert cost(units) == pytest.approx(per_call + per_unit * units, rel=0.05, abs=1e-4)
    assert cost.per_call >= 0 and cost.per_unit >= 0


def test_several_calls_in_one_timing_price_each_call() -> None:
    """Decoder calls: a step's timing covers `calls` calls and all their frames."""
    cost = LinearCost(0.01, 0.0005, 16)
    for _ in range(60):
        for calls, frames in ((1, 4), (3, 12), (2, 64), (1, 32)):
            cost.observe(0.02 * calls + 0.001 * frames, calls, frames)
    assert cost.per_call == pytest.approx(0.02, rel=0.05)
    assert cost.per_unit == pytest.approx(0.001, rel=0.05)


def test_calls_of_one_size_keep_the_priors_split() -> None:
    """Every call the same size: the fixed part cannot be told from the per-unit part; the
    measured total is kept, split as the prior splits it."""
    cost = LinearCost(0.01, 0.001, 10)
    for _ in range(40):
        cost.observe(0.04, 1, 10)
    assert cost(10) == pytest.approx(0.04, rel=0.02)
    assert cost.per_call / cost.per_unit == pytest.approx(10.0, rel=0.05)


def test_the_engine_step_average_skips_the_cold_step() -> None:
    costs = StageCosts()
    prior = costs.engine_step
    costs.observe_engine_step(9.0)
    assert costs.engine_step == prior
    costs.observe_engine_step(0.03)
    assert prior > costs.engine_step > 0.03
