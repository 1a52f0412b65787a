"""The training loop: it learns, it resumes exactly, and its export loads strictly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import safetensors.torch
import torch

from polyvox.models.joe_ar.network import build_student, load_student
from polyvox.models.pocket.weights import WeightsError, load_strict
from polyvox.train.checkpoints import WEIGHTS, export_student
from polyvox.train.distill import Distiller, TrainConfig
from polyvox.train.student import LossWeights, teacher_forcing
from polyvox.train.teacher_data import read_data


def _config(steps: int, **changes) -> TrainConfig:
    settings = {"steps": steps, "learning_rate": 3e-3, "warmup_steps": 1,
                "batch_positions": 4000, "chain_probability": 0.0, "checkpoint_every": 1000,
                "validation_size": 0, "losses": LossWeights(flow_samples=2)}
    settings.update(changes)
    return TrainConfig(**settings)


def test_overfitting_two_sentences_halves_the_loss(tiny_config, teacher_data: Path,
                                                   tmp_path: Path) -> None:
    distiller = Distiller(tiny_config, _config(30, learning_rate=1e-2), teacher_data, tmp_path,
                          log=False)
    assert len(distiller.training) == 2  # one of the three utterances is held out
    first = distiller.train_step()["total"]
    for _ in range(28):
        distiller.train_step()
    last = distiller.train_step()["total"]
    assert last < 0.5 * first, (first, last)  # measured: 4.05 -> 1.42


def test_resume_takes_exactly_the_uninterrupted_steps(tiny_config, teacher_data: Path,
                                                      tmp_path: Path) -> None:
    config = _config(4, chain_probability=0.5, checkpoint_every=2)
    straight = Distiller(tiny_config, config, teacher_data, tmp_path / "straight", log=False)
    straight.train()
    interrupted = Distiller(tiny_config, _config(2, chain_probability=0.5, checkpoint_every=2),
                            teacher_data, tmp_path / "resumed", log=False)
    interrupted.train()
    resumed = Distiller(tiny_config, config, teacher_data, tmp_path / "resumed", log=False)
    assert resumed.step == 2
    resumed.train()
    assert resumed.step == straight.step == 4
    for name, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name
    moments = [torch.equal(a["exp_avg"], b["exp_avg"]) for a, b in zip(
        straight.optimizer.state_dict()["state"].values(),
        resumed.optimizer.state_dict()["state"].values())]
    assert all(moments)


def test_resume_refuses_another_student(tiny_config, teacher_data: Path, tmp_path: Path) -> None:
    Distiller(tiny_config, _config(1), teacher_data, tmp_path, log=False).train()
    other = tiny_config.__class__(**{**tiny_config.__dict__, "frames_per_step": 7})
    with pytest.raises(ValueError, match="another student config"):
        Distiller(other, _config(2), teacher_data, tmp_path, log=False)


def test_data_of_another_teacher_latent_is_refused(tiny_config, data_copy: Path,
                                                   tmp_path: Path) -> None:
    import json

    copy = data_copy
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps(manifest | {"target": "z"}))
    with pytest.raises(ValueError, match="--target prior"):
        Distiller(tiny_config, _config(1), copy, tmp_path / "run", log=False)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_export_loads_strictly(tiny_config, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = build_student(tiny_config)
    model.emb_std.fill_(3.0)
    weights, config_path = export_student(model, tiny_config, tmp_path)
    tensors = safetensors.torch.load_file(str(weights))
    assert all(name.startswith("flow_lm.") for name in tensors)
    config, loaded = load_student(config_path)
    assert config == tiny_config.__class__(**{**tiny_config.__dict__, "weights_path": WEIGHTS})
    for name, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name
    fresh = build_student(tiny_config)
    unprefixed = {k.removeprefix("flow_lm."): v for k, v in tensors.items()}
    load_strict(fresh, unprefixed, "export")
    del unprefixed["out_eos.bias"]
    with pytest.raises(WeightsError, match="out_eos.bias"):
        load_strict(build_student(tiny_config), unprefixed, "export")


def test_half_export_halves_the_matrices_and_loads_back_close(tiny_config, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = build_student(tiny_config)
    model.emb_std.fill_(3.0)
    full, _ = export_student(model, tiny_config, tmp_path / "full")
    half, config_path = export_student(model, tiny_config, tmp_path / "half",
                                       matrices=torch.float16)
    assert half.stat().st_size < 0.6 * full.stat().st_size
    stored = safetensors.torch.load_file(str(half))
    assert stored["flow_lm.emb_std"].dtype == torch.float32  # vectors stay exact
    assert stored["flow_lm.out_eos.weight"].dtype == torch.float16
    _, loaded = load_student(config_path)
    for name, value in model.state_dict().items():
        got = loaded.state_dict()[name]
        assert got.dtype == value.dtype, name
        torch.testing.assert_close(got, value, atol=1e-3, rtol=1e-3)


def test_init_starts_from_an_export_and_trains_on(tiny_config, teacher_data: Path,
                                                  tmp_path: Path) -> None:
    first = Distiller(tiny_config, _config(3), teacher_data, tmp_path / "a", log=False)
    first.train()
    weights = tmp_path / "a" / WEIGHTS
    second = Distiller(tiny_config, _config(2), teacher_data, tmp_path / "b", log=False,
                       init=weights)
    for name, value in first.model.state_dict().items():
        assert torch.equal(second.model.state_dict()[name], value), name
    assert second.step == 0
    second.train()
    assert second.step == 2


def test_distilling_from_a_pointer_export_trains_a_student_without_the_head(
        tiny_config, teacher_data: Path, tmp_path: Path) -> None:
    """The shipped voice has a pointer head (`polyvox train pointer`), which distillation
    does not train: the student leaves it out, whatever its config says, and reads
    every other tensor of the export."""
    pointer = dataclasses.replace(tiny_config, text_features="teacher_prior",
                                  pointer_width=16)
    torch.manual_seed(0)
    exported = build_student(pointer)
    weights, _ = export_student(exported, pointer, tmp_path / "export")
    student = Distiller(pointer, _config(1), teacher_data, tmp_path / "run", log=False,
                        init=weights)
    assert student.student.pointer_width == 0 and student.model.pointer_head is None
    for name, value in student.model.state_dict().items():
        assert torch.equal(exported.state_dict()[name], value), name
    student.train()
    assert load_student(tmp_path / "run" / "config.yaml")[1].pointer_head is None


def test_init_of_a_student_that_reads_features_from_one_that_did_not(
        tiny_config, teacher_data: Path, tmp_path: Path) -> None:
    """An id-only export starts a student with the teacher's text encoding: every shared
    weight is loaded, the new projection starts at zero, so the two compute the same."""
    old = Distiller(tiny_config, _config(2), teacher_data, tmp_path / "a", log=False)
    old.train()
    reading = dataclasses.replace(tiny_config, text_features="teacher_prior")
    new = Distiller(reading, _config(2), teacher_data, tmp_path / "b", log=False,
                    init=tmp_path / "a" / WEIGHTS)
    for name, value in old.model.state_dict().items():
        assert torch.equal(new.model.state_dict()[name], value), name
    assert new.model.prior_proj is not None and not new.model.prior_proj.weight.any()
    batch = new.batch(0)
    with torch.no_grad():
        torch.testing.assert_close(teacher_forcing(new.model.eval(), batch)[1],
                                   teacher_forcing(old.model.eval(), batch)[1])
    new.train()  # and it learns to use them
    assert new.model.prior_proj.weight.any()


@pytest.fixture(scope="module")
def paragraph_data(teacher, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A paragraph of three sentences at speed 1.5, then a sentence at 0.8."""
    from polyvox.train.teacher_data import (
        MANIFEST,
        TeacherDataConfig,
        sentence_generator,
        shard_path,
        teacher_utterances,
        write_shard,
    )

    out = tmp_path_factory.mktemp("paragraphs")
    texts = ["The kite flew over the hill. It came back slowly. Then it rained.",
             "Please call us back tomorrow."]
    groups = [teacher_utterances(teacher, text, False, sentence_generator(0, index),
                                 speed=speed)
              for index, (text, speed) in enumerate(zip(texts, (1.5, 0.8)))]
    write_shard(shard_path(out, 0), texts, groups)
    config = TeacherDataConfig(num_sentences=2, varied_speed_share=1.0)
    (out / MANIFEST).write_text(json.dumps(dataclasses.asdict(config)))
    return out


def test_a_paragraphs_sentences_are_chained_after_the_one_before(
        tiny_config, paragraph_data: Path, tmp_path: Path) -> None:
    config = dataclasses.replace(tiny_config, text_features="teacher_prior", speed_input=True)
    distiller = Distiller(config, _config(2, paragraph_chain_probability=1.0), paragraph_data,
                          tmp_path, log=False)
    assert [e.previous for e in distiller.examples] == [-1, 0, 1, -1]
    speeds = [e.speed for e in distiller.examples]  # effective: the pace heard
    assert all(1.25 < speed < 1.5 for speed in speeds[:3]) and 0.8 < speeds[3] < 0.95
    items = [item for batch in distiller._epoch_plan(0) for item in batch]
    prefixes = {item.clause: item.prefix for item in items}
    # utterance 1 is held out (one in VALIDATION_EVERY); 2 follows it, 0 and 3 start texts
    assert sorted(prefixes) == [0, 2, 3] and prefixes[2] == 1
    assert prefixes[0] == -1 and prefixes[3] == -1
    distiller.train()  # the speed column reaches the model
    assert distiller.model.speed_proj is not None and distiller.model.speed_proj.weight.any()


def test_fast_clauses_are_repeated_in_each_epoch(tiny_config, paragraph_data: Path,
                                                 tmp_path: Path) -> None:
    config = dataclasses.replace(tiny_config, text_features="teacher_prior", speed_input=True)
    counts = {}
    for repeats in (1, 3):
        distiller = Distiller(config, _config(2, fast_repeats=repeats), paragraph_data,
                              tmp_path / str(repeats), log=False)
        items = [item.clause for batch in distiller._epoch_plan(0) for item in batch]
        counts[repeats] = {clause: items.count(clause) for clause in set(items)}
    # clauses 0 and 2 were spoken at 1.25-1.5, clause 3 slower (1 is held out)
    assert counts[1] == {0: 1, 2: 1, 3: 1}
    assert counts[3] == {0: 3, 2: 3, 3: 1}
    with pytest.raises(ValueError, match="fast_repeats"):
        _config(2, fast_repeats=0)


def test_speech_at_several_speeds_needs_a_pace_input(tiny_config, paragraph_data: Path,
                                                      tmp_path: Path) -> None:
    reading = dataclasses.replace(tiny_config, text_features="teacher_prior")
    with pytest.raises(ValueError, match="speed-input"):
        Distiller(reading, _config(1), paragraph_data, tmp_path, log=False)


def test_init_of_a_paced_student_from_one_without_pace(tiny_config, teacher_data: Path,
                                                       tmp_path: Path) -> None:
    """The shipped joe-ar has no pace input: a paced student starts from it computing
    exactly what it computed at speed 1 (the projection starts at zero)."""
    reading = dataclasses.replace(tiny_config, text_features="teacher_prior")
    old = Distiller(reading, _config(2), teacher_data, tmp_path / "a", log=False)
    old.train()
    paced = dataclasses.replace(reading, speed_input=True)
    new = Distiller(paced, _config(2), teacher_data, tmp_path / "b", log=False,
                    init=tmp_path / "a" / WEIGHTS)
    assert new.model.speed_proj is not None and not new.model.speed_proj.weight.any()
    batch = new.batch(0)
    with torch.no_grad():
        torch.testing.assert_close(teacher_forcing(new.model.eval(), batch)[1],
                                   teacher_forcing(old.model.eval(), batch)[1])


def test_a_deeper_student_starts_from_an_export_computing_what_it_did(
        tiny_config, teacher_data: Path, tmp_path: Path) -> None:
    """`--layers` above the export's: its layers are loaded, the new ones pass their input
    through (same outputs as the export), then train like the rest; fewer is refused."""
    from polyvox.train.distill import with_layers

    old = Distiller(tiny_config, _config(2), teacher_data, tmp_path / "a", log=False)
    old.train()
    layers = tiny_config.flow_lm.transformer.num_layers
    deeper = with_layers(tiny_config, layers + 2)
    new = Distiller(deeper, _config(2), teacher_data, tmp_path / "b", log=False,
                    init=tmp_path / "a" / WEIGHTS)
    assert len(new.model.transformer.layers) == layers + 2
    for name, value in old.model.state_dict().items():
        assert torch.equal(new.model.state_dict()[name], value), name
    batch = new.batch(0)
    with torch.no_grad():
        for got, want in zip(teacher_forcing(new.model.eval(), batch),
                             teacher_forcing(old.model.eval(), batch)):
            torch.testing.assert_close(got, want)
    added = new.model.transformer.layers[layers]
    assert not added.linear2.weight.any() and added.linear1.weight.any()
    new.model.train()
    new.train()
    assert added.linear2.weight.any() and added.self_attn.out_proj.weight.any()
    # the export of the deeper run serves with its own config, all layers loaded
    _, loaded = load_student(tmp_path / "b" / "config.yaml")
    assert len(loaded.transformer.layers) == layers + 2
    with pytest.raises(ValueError, match="only be deepened"):
        Distiller(with_layers(tiny_config, layers - 1), _config(1), teacher_data,
                  tmp_path / "c", log=False, init=tmp_path / "a" / WEIGHTS)


def test_an_exported_run_serves_with_its_own_config(tiny_config, paragraph_data: Path,
                                                    tmp_path: Path) -> None:
    """`polyvox train export` of a paced student; loading its weights picks the config
    beside them, so the pace input is there and speed reaches the model."""
    from polyvox.models.joe_ar.family import load_student_family
    from polyvox.train.export import export_run

    config = dataclasses.replace(tiny_config, text_features="teacher_prior", speed_input=True)
    Distiller(config, _config(1), paragraph_data, tmp_path / "run", log=False).train()
    weights, step = export_run(tmp_path / "run", tmp_path / "export", half=True)
    assert step == 1
    family = load_student_family(weights=weights)
    assert family.student.speed_input and family.student.name == "tiny"
    plan = family.plan_clause("It came back.", family.make_params(speed=1.25))
    assert plan.features is not None and plan.features.shape[1] == 193


def test_a_bf16_step_follows_the_float32_gradient(tiny_config, teacher_data: Path,
                                                  tmp_path: Path) -> None:
    """--bf16 runs the step's products in bfloat16: its gradient points where float32's
    does (the same batch and draws), and its weights stay float32."""
    grads = {}
    for bf16 in (False, True):
        distiller = Distiller(tiny_config, _config(1, bf16=bf16), teacher_data,
                              tmp_path / str(bf16), log=False)
        distiller.optimizer.step = lambda *args, **kwargs: None  # keep the weights
        distiller.train_step()
        grads[bf16] = torch.cat([p.grad.flatten() for p in distiller.model.parameters()
                                 if p.grad is not None])
        assert all(p.dtype == torch.float32 for p in distiller.model.parameters())
    cosine = torch.nn.functional.cosine_similarity(grads[False], grads[True], dim=0)
    assert float(cosine) > 0.99, float(cosine)
    assert not torch.equal(grads[False], grads[True])  # bfloat16 really ran


def test_the_emitted_step_loss_is_measured_without_moving_the_other_draws(
        tiny_config, teacher_data: Path, tmp_path: Path) -> None:
    """Validation reports the error of what generation emits (the mean of the head over
    its draws at the inference temperature); measuring it changes no other loss, and
    weighting it adds it to the total and to the gradient."""
    from polyvox.models.pocket.heads import sample
    from polyvox.train.student import student_losses

    distiller = Distiller(tiny_config, _config(1), teacher_data, tmp_path, log=False)
    batch = distiller.batch(0)

    def losses(weights: LossWeights, measure: bool) -> dict[str, torch.Tensor]:
        return student_losses(distiller.model, batch, weights, torch.Generator().manual_seed(3),
                              torch.Generator().manual_seed(4) if measure else None)

    quiet = LossWeights(input_noise=0.0)  # the fed-back latents as the batch has them
    plain, measured = losses(quiet, False), losses(quiet, True)
    assert "emitted" not in plain and "emitted" in measured
    for name in ("flow", "eos", "total"):
        assert torch.equal(plain[name], measured[name]), name
    # the reference: the same noise through the plain sampler, by hand
    with torch.no_grad():
        hidden, _ = teacher_forcing(distiller.model, batch)
        cond, target = hidden[batch.has_target], batch.targets[batch.has_target]
        noise = torch.randn(target.shape, generator=torch.Generator().manual_seed(4)) * 0.2**0.5
        head = distiller.model.flow_net
        mean = (sample(head, "flow_matching", cond, noise, 1)
                + sample(head, "flow_matching", cond, -noise, 1)) / 2
        torch.testing.assert_close(measured["emitted"], ((mean - target) ** 2).mean())
    weighted = losses(dataclasses.replace(quiet, emitted=2.0), False)
    torch.testing.assert_close(weighted["total"] - plain["total"], 2.0 * weighted["emitted"])
    gradients = []
    for total in (plain["total"], weighted["total"]):
        distiller.model.zero_grad()
        total.backward()
        gradients.append(distiller.model.out_norm.weight.grad.clone())  # the backbone's
    assert (gradients[0] - gradients[1]).abs().max() > 1e-6


def test_a_checkpoint_from_before_a_new_config_field_resumes(tiny_config, teacher_data: Path,
                                                            tmp_path: Path) -> None:
    Distiller(tiny_config, _config(1), teacher_data, tmp_path, log=False).train()
    from polyvox.train.checkpoints import load_checkpoint, save_checkpoint

    state = load_checkpoint(tmp_path)
    del state["student"]["head_draws"]  # as written before the field existed
    save_checkpoint(tmp_path, state)
    assert Distiller(tiny_config, _config(2), teacher_data, tmp_path, log=False).step == 1
    drawn = dataclasses.replace(tiny_config, head_draws=4)  # a real change is still refused
    state["student"]["head_draws"] = 2
    save_checkpoint(tmp_path, state)
    with pytest.raises(ValueError, match="another student config"):
        Distiller(drawn, _config(2), teacher_data, tmp_path, log=False)


def test_several_data_directories_train_together_each_repeated_its_count(
        tiny_config, paragraph_data: Path, teacher_data: Path, tmp_path: Path) -> None:
    config = dataclasses.replace(tiny_config, text_features="teacher_prior", speed_input=True)
    alone = Distiller(config, _config(2), paragraph_data, tmp_path / "alone", log=False)
    both = Distiller(config, _config(2), [paragraph_data, teacher_data], tmp_path / "both",
                     log=False, data_repeats=[1, 3])
    first = len(alone.examples)
    assert len(both.examples) == first + len(read_data(teacher_data))
    # a paragraph's links stay inside its directory: the second one starts afresh
    assert [e.previous for e in both.examples[:first]] == [e.previous for e in alone.examples]
    assert both.examples[first].previous == -1
    items = [item.clause for batch in both._epoch_plan(0) for item in batch]
    counts = {clause: items.count(clause) for clause in set(items)}
    assert all(counts[clause] == 1 for clause in alone.training)
    assert all(counts[clause] == 3 for clause in both.training if clause >= first)
    both.train()
    for repeats in ([1], [1, 0]):
        with pytest.raises(ValueError, match="repeat"):
            Distiller(config, _config(2), [paragraph_data, teacher_data], tmp_path / "bad",
                      log=False, data_repeats=repeats)


def test_a_chained_row_may_be_kept_to_the_earlier_clauses_steps_and_last_ids(
        tiny_config, paragraph_data: Path, tmp_path: Path) -> None:
    """--prefix-ids N: the kept tail of the clause before reaches at most N of its ids
    (the engine's audio context); by default any tail, its ids included, is kept."""
    config = dataclasses.replace(tiny_config, text_features="teacher_prior", speed_input=True)
    reaches = {}
    for ids in (None, 0, 3):
        distiller = Distiller(config, _config(2, chain_probability=1.0,
                                              paragraph_chain_probability=1.0,
                                              prefix_ids=ids),
                              paragraph_data, tmp_path / str(ids), log=False)
        reached = []
        for epoch in range(40):
            for item in (i for batch in distiller._epoch_plan(epoch) for i in batch):
                prefix = distiller.examples[item.prefix]
                reached.append(item.keep - (prefix.length - len(prefix.tokens)))
        reaches[ids] = max(reached)  # ids of the earlier clause kept, at most
    assert reaches[0] <= 0 and reaches[3] == 3
    assert reaches[None] > 10  # a whole earlier clause, ids and all, is sometimes kept
    with pytest.raises(ValueError, match="prefix_ids"):
        _config(2, prefix_ids=-1)
