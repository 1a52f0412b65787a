"""The SDE sampler keeps the flow's marginals (checked where the exact velocity is known:
Gaussian data), its transitions' log-probabilities are those of the Gaussians it samples,
and a = 0 is the plain Euler sampler."""

from __future__ import annotations

import math

import pytest
import torch

from polyvox.train.sde import log_prob, sample, transition

MEAN, STD = 1.5, 0.5  # the data: x1 ~ N(MEAN, STD^2), one dimension per column


def exact_velocity(x: torch.Tensor, t: float) -> torch.Tensor:
    """E[x1 - eps | x_t = x] for x_t = t x1 + (1 - t) eps, Gaussian data and noise."""
    variance = t**2 * STD**2 + (1 - t) ** 2
    x1 = MEAN + t * STD**2 / variance * (x - t * MEAN)
    eps = (1 - t) / variance * (x - t * MEAN)
    return x1 - eps


@pytest.mark.parametrize("a", [0.0, 0.3, 0.8])
def test_the_sde_ends_at_the_data_distribution(a: float) -> None:
    generator = torch.Generator().manual_seed(0)
    x0 = torch.randn(20000, 2, generator=generator)
    final = sample(exact_velocity, x0, steps=40, a=a, generator=generator)[-1]
    assert float(final.mean()) == pytest.approx(MEAN, abs=0.03)
    assert float(final.std()) == pytest.approx(STD, abs=0.04)


def test_a_zero_is_the_euler_ode() -> None:
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    states = sample(exact_velocity, x, steps=4, a=0.0)
    for k in range(4):
        expected = states[k] + 0.25 * exact_velocity(states[k], k * 0.25)
        torch.testing.assert_close(states[k + 1], expected)


def test_log_prob_is_the_gaussian_transitions_density() -> None:
    generator = torch.Generator().manual_seed(2)
    states = sample(exact_velocity, torch.randn(3, 2, generator=generator), steps=5, a=0.5,
                    generator=generator)
    expected = torch.zeros(3)
    for k in range(5):
        mean, std = transition(exact_velocity, states[k], k / 5, 1 / 5, 0.5)
        normal = torch.distributions.Normal(mean, std)
        expected += normal.log_prob(states[k + 1]).sum(dim=-1)
    torch.testing.assert_close(log_prob(exact_velocity, states, 0.5), expected)
    # a velocity that disagrees with the trajectory finds it less likely
    shifted = log_prob(lambda x, t: exact_velocity(x, t) + 1.0, states, 0.5)
    assert bool((shifted < expected).all())
    assert not math.isnan(float(expected.sum()))


@torch.no_grad()
@pytest.mark.parametrize("draws", [2, 4])
def test_averaged_draws_at_a_zero_are_what_generation_emits(draws: int) -> None:
    """One step averaged over the noise's draws is heads.sample with head draws: a policy
    for GRPO whose mean is the shipped sampler."""
    from polyvox.models.pocket.heads import SamplerHead
    from polyvox.models.pocket.heads import sample as head_sample

    torch.manual_seed(3)
    head = SamplerHead(12, 32, 8, 2, 1).eval()
    generator = torch.Generator().manual_seed(4)
    cond = torch.randn(3, 8, generator=generator)
    noise = torch.randn(3, 12, generator=generator) * 0.45

    def velocity(x: torch.Tensor, t: float) -> torch.Tensor:
        rows = cond.repeat_interleave(x.shape[0] // cond.shape[0], dim=0)
        return head(rows, torch.full((x.shape[0], 1), t), x)

    emitted = head_sample(head, "flow_matching", cond, noise, 1, draws=draws)
    torch.testing.assert_close(sample(velocity, noise, 1, 0.0, draws=draws)[-1], emitted)
    # with a > 0, Gaussian exploration of std a around that mean, and its density
    states = sample(velocity, noise, 1, 0.3, torch.Generator().manual_seed(5), draws=draws)
    normal = torch.distributions.Normal(emitted, 0.3)
    torch.testing.assert_close(log_prob(velocity, states, 0.3, draws),
                               normal.log_prob(states[-1]).sum(dim=-1))
    assert not torch.allclose(log_prob(velocity, states, 0.3), log_prob(velocity, states, 0.3,
                                                                         draws))


@pytest.mark.parametrize(("steps", "draws"), [(4, 2), (1, 3), (1, 0)])
def test_draws_need_one_step_and_the_heads_counts(steps: int, draws: int) -> None:
    with pytest.raises(ValueError, match="draws"):
        sample(exact_velocity, torch.zeros(1, 2), steps, 0.5, draws=draws)
