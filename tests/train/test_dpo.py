"""Flow-DPO: equal models prefer nothing; a few steps on fixed pairs make the policy
prefer the winners; pairs are the best and worst candidates; a generated clause is laid
out as training data."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from polyvox.models.joe_ar.network import build_student
from polyvox.train.batches import LatentStats
from polyvox.train.dpo import DPOSettings, Pair, dpo_loss, generated_example, make_pairs, \
    pair_batch


@pytest.fixture
def models(tiny_config):
    torch.manual_seed(0)
    config = dataclasses.replace(tiny_config, text_features="teacher_prior", speed_input=True)
    policy = build_student(config)
    return policy, copy.deepcopy(policy).eval()


def _clause(policy, seed: int, steps: int, speed: float = 1.0):
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 151, (7,), generator=generator)
    features = torch.randn(7, 193, generator=generator)
    latents = torch.randn(steps, 768, generator=generator)
    return generated_example(tokens, latents, features, policy, speed)


def _stats(policy) -> LatentStats:
    return LatentStats(policy.emb_mean.clone(), policy.emb_std.clone())


def test_a_generated_clause_is_laid_out_as_it_was_generated(models) -> None:
    policy, _ = models
    with torch.no_grad():
        policy.emb_mean.normal_()
        policy.emb_std.uniform_(0.5, 2)
    generator = torch.Generator().manual_seed(3)
    latents = torch.randn(5, 768, generator=generator)
    example = generated_example(torch.arange(7), latents, None, policy, speed=1.3)
    batch = pair_batch([Pair(example, example, 1.0)], _stats(policy))
    targets = batch.targets[0][batch.has_target[0]]
    torch.testing.assert_close(targets, latents, atol=2e-2, rtol=1e-2)  # float16 storage
    assert batch.log_speed[0, 0] == pytest.approx(math.log(1.3))
    assert batch.band_high.max() == -1  # no attention guide


def test_equal_models_prefer_nothing(models) -> None:
    policy, reference = models
    pairs = [Pair(_clause(policy, 1, 6), _clause(policy, 2, 9), 0.5)]
    out = dpo_loss(policy.eval(), reference, pairs, _stats(policy), DPOSettings(),
                   torch.Generator().manual_seed(0))
    assert float(out["margin"]) == pytest.approx(0.0, abs=1e-6)
    assert float(out["loss"]) == pytest.approx(math.log(2), abs=1e-6)


def test_steps_on_fixed_pairs_make_the_policy_prefer_the_winners(models) -> None:
    policy, reference = models
    pairs = [Pair(_clause(policy, 2 * i, 6 + i), _clause(policy, 2 * i + 1, 8 - i, 1.2), 0.3)
             for i in range(3)]
    stats, settings = _stats(policy), DPOSettings(beta=50.0)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    first = None
    for step in range(15):
        policy.train()
        out = dpo_loss(policy, reference, pairs, stats, settings,
                       torch.Generator().manual_seed(step))
        first = first if first is not None else float(out["loss"])
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
    final = dpo_loss(policy.eval(), reference, pairs, stats, settings,
                     torch.Generator().manual_seed(99))
    assert float(final["loss"]) < 0.5 * first
    assert float(final["accuracy"]) == 1.0
    for parameter in reference.parameters():  # the reference never moves
        assert parameter.grad is None


def test_pairs_are_the_best_and_the_worst_if_they_differ_enough(models) -> None:
    policy, _ = models
    clauses = [_clause(policy, i, 6) for i in range(4)]
    pair = make_pairs(list(zip(clauses, [0.4, 0.9, 0.1, 0.5])))
    assert pair is not None and pair.winner is clauses[1] and pair.loser is clauses[2]
    assert pair.margin == pytest.approx(0.8)
    assert make_pairs(list(zip(clauses, [0.5, 0.515, 0.51, 0.5]))) is None
    assert make_pairs([(clauses[0], 1.0)]) is None


def test_a_dpo_run_collects_pairs_trains_resumes_and_exports(tiny_config, teacher,
                                                            tmp_path) -> None:
    """End to end on a tiny paced student (random weights: noise, but real rollouts,
    real whisper, real rewards): pairs written per file with every clause's reward terms,
    steps logged, a resumed run keeps the pairs and goes on from its step."""
    pytest.importorskip("faster_whisper")
    import json

    import yaml

    from polyvox.asr.transcribe import Transcriber
    from polyvox.models.pocket.weights import random_init
    from polyvox.train.checkpoints import export_student
    from polyvox.train.dpo import DPOConfig, DPORun, RolloutSettings

    config = dataclasses.replace(tiny_config, text_features="teacher_prior", speed_input=True)
    student = build_student(config)
    random_init(torch.nn.ModuleDict({"flow_lm": student}), 3)
    weights, _ = export_student(student, config, tmp_path / "init")
    assert yaml.safe_load((tmp_path / "init" / "config.yaml").read_text())["speed_input"]
    transcriber = Transcriber(threads=2)
    settings = DPOConfig(steps=2, prompts=2, prompts_per_file=1, batch_pairs=2,
                         rollouts=RolloutSettings(group=2, min_margin=0.0))
    run = DPORun(weights, tmp_path / "dpo", settings, transcriber, log=False)
    run.train()
    files = sorted((tmp_path / "dpo").glob("pairs-*.pt"))
    assert len(files) == 2
    rewards = [json.loads(line) for line in (tmp_path / "dpo" / "rewards.jsonl").open()]
    assert rewards and {"intelligibility", "pace", "bounds", "total", "speed"} <= set(rewards[0])
    steps = [json.loads(line) for line in (tmp_path / "dpo" / "log.jsonl").open()]
    assert [s["step"] for s in steps] == [1, 2] and "margin" in steps[0]
    assert (tmp_path / "dpo" / "model.safetensors").exists()
    before = [f.stat().st_mtime_ns for f in files]
    resumed = DPORun(weights, tmp_path / "dpo", dataclasses.replace(settings, steps=3),
                     transcriber, log=False)
    assert resumed.step == 2
    resumed.train()
    assert [f.stat().st_mtime_ns for f in files] == before  # the pairs are kept
    steps = [json.loads(line) for line in (tmp_path / "dpo" / "log.jsonl").open()]
    assert [s["step"] for s in steps] == [1, 2, 3]


def _trained(policy, reference, pairs, settings: DPOSettings, steps: int = 15):
    policy = copy.deepcopy(policy)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    for step in range(steps):
        policy.train()
        out = dpo_loss(policy, reference, pairs, _stats(reference), settings,
                       torch.Generator().manual_seed(step))
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
    return policy.eval()


def test_the_winner_term_keeps_the_winners_likely(models) -> None:
    policy, reference = models
    pairs = [Pair(_clause(policy, 2 * i, 6 + i), _clause(policy, 2 * i + 1, 8 - i), 0.3)
             for i in range(3)]
    plain, anchored = DPOSettings(beta=50.0), DPOSettings(beta=50.0, winner_weight=50.0)
    stats = _stats(policy)

    def judged(model, settings):
        return dpo_loss(model, reference, pairs, stats, settings,
                        torch.Generator().manual_seed(99))

    without = judged(_trained(policy, reference, pairs, plain), plain)
    with_term = judged(_trained(policy, reference, pairs, anchored), anchored)
    assert float(with_term["winner_flow"]) < float(without["winner_flow"])
    assert float(with_term["margin"]) > 0  # the winners are still preferred
