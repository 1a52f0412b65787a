"""Teacher-forcing batches: the layout the engine's KV has, and the training forward
equals the inference path (prefill, then one step at a time)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch

from polyvox.models.layers.attention import ContiguousKV
from polyvox.models.joe_ar.network import build_student, id_features, ungroup_frames
from polyvox.train.batches import (
    Example,
    LatentStats,
    group_frames,
    make_batch,
    plan_batches,
    step_bands,
)
from polyvox.train.student import teacher_forcing


def _example(num_ids: int, durations: list[int], channels: int = 192,
             group: int = 4) -> Example:
    z = torch.randn(sum(durations), channels).half()
    latents = group_frames(z, group)
    low, high = step_bands(torch.tensor(durations), group, latents.shape[0])
    features = id_features(z, torch.tensor(durations))
    return Example(torch.randint(0, 151, (num_ids,)), latents, low, high, features)


def test_group_then_ungroup_keeps_frames_and_repeats_the_last() -> None:
    z = torch.randn(10, 3)
    grouped = group_frames(z, 4)
    assert grouped.shape == (3, 12)
    frames = ungroup_frames(grouped, 3)
    assert torch.equal(frames[:10], z) and torch.equal(frames[10:], z[-1:].expand(2, 3))


def test_bands_cover_the_ids_spoken_in_each_step() -> None:
    durations = torch.tensor([2, 0, 3, 1, 4, 2])  # 12 frames, 3 steps of 4
    low, high = step_bands(durations, 4, 3)
    # frames 0-3: ids 0-2; 4-7: ids 2-4; 8-11: ids 4-5; EOS: the last id (5) to the end;
    # each widened by 2 ids and clamped to the text
    assert low.tolist() == [0, 0, 2, 3] and high.tolist() == [4, 5, 5, 5]


def test_batch_layout_matches_the_engine_kv() -> None:
    stats = LatentStats(torch.zeros(768), torch.ones(768))
    main, prefix = _example(7, [3, 2, 4, 1, 3, 2, 1]), _example(5, [4, 4, 1, 2, 3])
    batch = make_batch([main, main], stats, random.Random(0), [None, (prefix, 6)])
    steps = main.latents.shape[0]
    plain = slice(0, main.length)
    assert batch.is_text[0, plain].tolist() == [True] * 7 + [False] * (steps + 1)
    assert torch.isnan(batch.latents_in[0, 7]).all()  # BOS
    torch.testing.assert_close(batch.latents_in[0, 8: 8 + steps], main.latents.float())
    torch.testing.assert_close(batch.targets[0, 7: 7 + steps], main.latents.float())
    assert batch.has_target[0].sum() == steps and batch.has_eos[0].sum() == steps + 1
    assert batch.eos_targets[0, main.length - 1] == 1 and batch.eos_targets[0].sum() == 1
    # the chained row: 6 prefix positions, then the same clause, trained the same way
    assert torch.equal(batch.has_target[1, 6: 6 + main.length], batch.has_target[0, plain])
    assert not batch.has_target[1, :6].any() and not batch.has_eos[1, :6].any()
    assert torch.equal(batch.band_low[1, 6 + 7:6 + main.length],
                       batch.band_low[0, 7:main.length] + 6)
    assert (batch.positions[:, 1:] - batch.positions[:, :-1] == 1).all()


def test_id_features_are_each_ids_first_frame() -> None:
    values = torch.randn(4, 3)
    durations = torch.tensor([2, 1, 3, 2])
    frames = values.repeat_interleave(durations, dim=0)  # piecewise constant, as m_p
    assert torch.equal(id_features(frames, durations), values)


@pytest.mark.parametrize("features", [None, "teacher_prior", "teacher_prior+speed"])
def test_teacher_forcing_equals_prefill_then_steps(tiny_config, features) -> None:
    torch.manual_seed(0)
    features, _, speed = (features or "").partition("+")
    config = dataclasses.replace(tiny_config, text_features=features or None,
                                 speed_input=bool(speed))
    model = build_student(config).eval()
    for projection in (model.prior_proj, model.speed_proj):
        if projection is not None:  # zero at init: make the features count
            torch.nn.init.normal_(projection.weight, std=0.1)
    stats = LatentStats(torch.zeros(768), torch.full((768,), 2.0))
    example = _example(9, [2, 3, 1, 4, 2, 2, 3, 1, 2])._replace(speed=1.5 if speed else 1.0)
    batch = make_batch([example], stats, random.Random(1))
    batch = batch._replace(positions=batch.positions - batch.positions[:, :1])  # a fresh context
    read = example.features
    if speed:  # the engine's features: the prior mean, then the clause's log speed
        read = torch.cat([read.float(), torch.full((9, 1), math.log(1.5))], 1)
    with torch.no_grad():
        _, eos_train = teacher_forcing(model, batch)
        kv = ContiguousKV(3, 4, 16, torch.float32, torch.device("cpu"))
        embedded = model.embed_text(example.tokens, read if features else None)
        model.prefill(embedded[None], kv.next_positions(9), kv)
        kv.commit()
        eos_steps = []
        for row in range(9, example.length):
            latent = batch.latents_in[0, row][None]
            _, logit = model.step(latent, kv.next_positions(1)[:, 0], kv,
                                  torch.zeros(1, 768), 1)
            kv.commit()
            eos_steps.append(logit)
    torch.testing.assert_close(torch.cat(eos_steps), eos_train[0, 9:], atol=1e-5, rtol=1e-5)
    if features:  # the features reach the output
        changed = batch._replace(features=batch.features * 0)
        with torch.no_grad():
            assert not torch.allclose(teacher_forcing(model, changed)[1], eos_train)
    if speed:  # and so does the speed
        slower = batch._replace(log_speed=batch.log_speed * 0 + math.log(0.7))
        with torch.no_grad():
            assert not torch.allclose(teacher_forcing(model, slower)[1], eos_train)
        with pytest.raises(ValueError, match="features per token"):
            model.embed_text(example.tokens, example.features)  # the speed column missing


def test_batches_respect_the_position_budget() -> None:
    lengths = [random.Random(i).randint(50, 300) for i in range(200)]
    batches = plan_batches(lengths, 1000, random.Random(0))
    assert sorted(i for batch in batches for i in batch) == list(range(200))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 1000
