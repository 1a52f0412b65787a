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
@pytest.mark.parametrize("steps, draws", [(3, 1), (1, 2)])  # the SDE / the emitted step
def test_teacher_forcing_gives_the_generation_log_probability(paced, threshold, steps,
                                                              draws) -> None:
    settings = SDESettings(steps=steps, a=0.5, temperature=1.0, draws=draws)
    ids = paced.phoneme_ids("It came back.")
    rollouts = []
    for seed, speed in ((1, 1.0), (2, 1.3)):
        params = dataclasses.replace(paced.make_params(seed=seed, speed=speed),
                                     eos_threshold=threshold)
        rollouts.append(rollout_clause(paced, ids, params, settings,
                                       torch.Generator().manual_seed(seed)))
    assert all(r.ended == (threshold < 0) for r in rollouts)
    assert rollouts[0].paths.shape[1:] == (steps + 1, 768)
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


def test_group_advantages_are_standardized_and_zero_when_the_group_agrees() -> None:
    from polyvox.train.grpo import group_advantages

    advantages = group_advantages(torch.tensor([0.2, 0.4, 0.9, 0.5]))
    assert float(advantages.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(advantages.std()) == pytest.approx(1.0)
    assert int(advantages.argmax()) == 2
    assert not group_advantages(torch.tensor([0.7, 0.7, 0.7])).any()


@pytest.mark.parametrize("per_dimension, steps, draws", [(False, 2, 1), (True, 2, 1),
                                                          (True, 1, 2)])
def test_grpo_steps_raise_the_better_rollouts_probability(paced, per_dimension, steps,
                                                          draws) -> None:
    """At the sampling policy the ratio is 1 and the KL 0; steps on a group make the
    rollout with the higher advantage more likely relative to the lower one (by the
    objective's own measure: per latent dimension when `per_dimension`)."""
    from polyvox.train.grpo import GRPOSettings, group_advantages, grpo_loss, rollout_terms

    sampler = SDESettings(steps=steps, a=0.7, temperature=1.0, draws=draws)
    settings = GRPOSettings(per_dimension=per_dimension)
    ids = paced.phoneme_ids("Go on.")
    rollouts = []
    for seed in range(3):
        params = dataclasses.replace(paced.make_params(seed=seed), eos_threshold=1e9)
        rollouts.append(rollout_clause(paced, ids, params, sampler,
                                       torch.Generator().manual_seed(seed)))
    reference = paced.flow_lm
    policy = copy.deepcopy(reference)
    stats = LatentStats(reference.emb_mean.clone(), reference.emb_std.clone())
    with torch.no_grad():
        old = rollout_terms(reference, rollouts, stats, sampler)
    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.5]))
    first = grpo_loss(policy, reference, rollouts, old, advantages, stats, sampler, settings)
    assert float(first["kl"]) == pytest.approx(0.0, abs=1e-8)
    assert float(first["surrogate"]) == pytest.approx(
        float(sum(a * (t.log_probs.numel() + 1) for a, t in zip(advantages, old)))
        / sum(t.log_probs.numel() + 1 for t in old), abs=1e-5)
    # one small step along the objective's gradient: densities over 768 dimensions are
    # steep (a tiny random student's gradient norm is ~4e4; past a step of ~1e-5 the
    # second-order term wins), so the first-order effect is checked
    out = grpo_loss(policy, reference, rollouts, old, advantages, stats, sampler,
                    dataclasses.replace(settings, kl=0.0))
    out["loss"].backward()
    norm = torch.sqrt(sum((p.grad**2).sum() for p in policy.parameters() if p.grad is not None))
    with torch.no_grad():
        for parameter in policy.parameters():
            if parameter.grad is not None:
                parameter -= 1e-6 * parameter.grad / norm
        scale = 768 if per_dimension else 1
        before = torch.stack([t.log_probs.sum() / scale + t.eos for t in old])
        after = torch.stack([t.log_probs.sum() / scale + t.eos
                             for t in rollout_terms(policy, rollouts, stats, sampler)])
    gain = after - before
    # the advantage-weighted log-probability rose: the better rollouts became likelier
    assert float((advantages * gain).sum()) > 0, gain
    assert float(grpo_loss(policy, reference, rollouts, old, advantages, stats,
                           sampler)["kl"]) > 0


def test_a_grpo_run_scores_steps_resumes_as_if_uninterrupted_and_exports(tiny_config, teacher,
                                                                        tmp_path) -> None:
    """End to end on a tiny paced student (random weights: noise, but real rollouts, real
    whisper, real rewards): every rollout's reward terms and every step's objective are
    logged; a run stopped after its first step and resumed ends with the weights of a run
    that was never stopped; the policy is exported."""
    pytest.importorskip("faster_whisper")
    import json

    from polyvox.asr.transcribe import Transcriber
    from polyvox.models.joe_ar.network import build_student
    from polyvox.models.pocket.weights import random_init
    from polyvox.train.checkpoints import export_student
    from polyvox.train.dpo import RolloutSettings
    from polyvox.train.grpo import GRPOConfig, GRPORun, GRPOSettings

    transcriber = Transcriber(threads=2)
    # a learning rate big enough for the weights to move visibly in two steps
    settings = GRPOConfig(steps=2, prompts_per_step=1, learning_rate=1e-3, checkpoint_every=1,
                          sampler=SDESettings(steps=2, a=0.7, temperature=1.0),
                          objective=GRPOSettings(kl=0.1),
                          rollouts=RolloutSettings(group=3, varied_speed_share=1.0))
    # NOTE: random weights put the EOS logit anywhere, and this machine's float kernels
    # move it; where it is above the threshold from the first allowed step, every rollout
    # ends there, the rewards are equal, no group is used and the weights never move (the
    # resume check below would then hold trivially). So the threshold is raised until a
    # probe step's rollouts end at different times.
    for threshold in [0.25 * i for i in range(13)]:
        config = dataclasses.replace(tiny_config, text_features="teacher_prior",
                                     speed_input=True, default_eos_threshold=threshold)
        student = build_student(config)
        random_init(torch.nn.ModuleDict({"flow_lm": student}), 3)
        weights, _ = export_student(student, config, tmp_path / f"init-{threshold}")
        probe = tmp_path / f"probe-{threshold}"
        GRPORun(weights, probe, dataclasses.replace(settings, steps=1), transcriber,
                log=False).train()
        if json.loads((probe / "log.jsonl").read_text().splitlines()[0])["groups_used"] > 0:
            break
    else:
        pytest.fail("no EOS threshold up to 3 made this random student's rollouts differ")
    straight = GRPORun(weights, tmp_path / "straight", settings, transcriber, log=False)
    straight.train()
    steps = [json.loads(line) for line in (tmp_path / "straight" / "log.jsonl").open()]
    assert [s["step"] for s in steps] == [1, 2]
    assert {"reward_total", "reward_intelligibility", "reward_pace", "reward_bounds",
            "groups_used"} <= set(steps[0])
    rewards = [json.loads(line) for line in (tmp_path / "straight" / "rewards.jsonl").open()]
    assert len(rewards) == sum(s["rollouts"] for s in steps) >= 6
    assert {"intelligibility", "pace", "bounds", "silence", "repetition", "clipping",
            "spectrum", "total", "speed"} <= set(rewards[0])
    assert any(s["groups_used"] > 0 for s in steps), steps
    assert (tmp_path / "straight" / "model.safetensors").exists()

    stopped = GRPORun(weights, tmp_path / "stopped",
                      dataclasses.replace(settings, steps=1), transcriber, log=False)
    stopped.train()
    resumed = GRPORun(weights, tmp_path / "stopped", settings, transcriber, log=False)
    assert resumed.step == 1
    resumed.train()
    initial = GRPORun(weights, tmp_path / "initial", settings, transcriber, log=False).policy
    moved = False
    for name, value in straight.policy.state_dict().items():
        torch.testing.assert_close(resumed.policy.state_dict()[name], value)
        moved |= not torch.equal(initial.state_dict()[name], value)
    assert moved  # the steps changed the policy
