"""Flow-GRPO rollouts: the log-probability recomputed in one teacher-forcing pass equals
the one accumulated while generating (the GRPO ratio is 1 before any update), and it
changes with the policy."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from polyvox.train.batches import LatentStats
from polyvox.train.grpo import SDESettings, rollout_clause, rollout_log_probs


@pytest.fixture(scope="module")
def paced(tiny_config, teacher, tmp_path_factory):
    import yaml

    from polyvox.models.joe_ar.family import load_student_family
    from polyvox.models.joe_ar.network import config_to_dict

    config = dataclasses.replace(tiny_config, text_features="teacher_prior", speed_input=True)
    path = tmp_path_factory.mktemp("grpo") / "paced.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(config)))
    return load_student_family(path, seed=5)


@pytest.mark.parametrize("threshold", [-1e9, 1e9])  # ends at its 7th step / at its cap
def test_teacher_forcing_gives_the_generation_log_probability(paced, threshold) -> None:
    settings = SDESettings(steps=3, a=0.5, temperature=1.0)
    ids = paced.phoneme_ids("It came back.")
    rollouts = []
    for seed, speed in ((1, 1.0), (2, 1.3)):
        params = dataclasses.replace(paced.make_params(seed=seed, speed=speed),
                                     eos_threshold=threshold)
        rollouts.append(rollout_clause(paced, ids, params, settings,
                                       torch.Generator().manual_seed(seed)))
    assert all(r.ended == (threshold < 0) for r in rollouts)
    assert rollouts[0].paths.shape[1:] == (4, 768)
    flow_lm = paced.flow_lm
    stats = LatentStats(flow_lm.emb_mean.clone(), flow_lm.emb_std.clone())
    with torch.no_grad():
        recomputed = rollout_log_probs(flow_lm, rollouts, stats, settings)
    expected = torch.tensor([r.log_prob for r in rollouts])
    # thousands of nats, equal to float32 rounding
    torch.testing.assert_close(recomputed, expected, rtol=1e-5, atol=1e-2)
    other = copy.deepcopy(flow_lm)
    with torch.no_grad():
        for parameter in other.flow_net.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
        assert not torch.allclose(rollout_log_probs(other, rollouts, stats, settings),
                                  recomputed, rtol=1e-3)
