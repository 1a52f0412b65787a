"""The pointer student: its step against a plain one-row reference, its training targets,
and `polyvox train pointer` (it learns, resumes exactly, and exports a servable student)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch

from polyvox.models.joe_ar.network import (
    PointerHead,
    build_student,
    id_features,
    load_student,
    pointer_context,
    pointer_step,
    step_patterns,
    teacher_pointers,
)
from polyvox.train import pointer as pointer_training
from polyvox.train.checkpoints import export_student
from polyvox.train.teacher_data import read_data


class FixedHead(PointerHead):
    """A pointer head whose logits are given per row (and which records its context)."""

    def __init__(self, logits: torch.Tensor, channels: int = 0) -> None:
        super().__init__(4, 4, 8, channels)
        self.logits = logits
        self.seen: torch.Tensor | None = None

    def forward(self, hidden: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        self.seen = context
        return self.logits


def _reference_step(logits: torch.Tensor, last_step: torch.Tensor,
                    encodings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One row, plainly: find the id the last frame copied and how many of the step's
    frames sat on it, walk the best allowed pattern. Returns (frames, the context)."""
    group = int(logits.numel()).bit_length() - 1
    last = last_step[-1]
    if torch.isnan(last).any():
        pointer, dwell = -1, 0
        allowed = [p for p in range(2 ** group) if p & 1]
    else:
        pointer = max(i for i in range(len(encodings)) if torch.equal(encodings[i], last))
        dwell = 0
        for frame in reversed(last_step):
            if not torch.equal(frame, last):
                break
            dwell += 1
        allowed = list(range(2 ** group))
    ahead = [encodings[min(pointer + k, len(encodings) - 1)] for k in (1, 2)]
    context = torch.cat([*ahead, torch.eye(group + 1)[dwell]])
    best = max(allowed, key=lambda p: float(logits[p]))
    frames = []
    for g in range(group):
        pointer = min(pointer + ((best >> g) & 1), len(encodings) - 1)
        frames.append(encodings[pointer])
    return torch.stack(frames), context


def test_the_batched_pointer_step_equals_a_plain_reference() -> None:
    generator = torch.Generator().manual_seed(0)
    counts = torch.tensor([5, 9, 3, 7])
    encodings = torch.randn(4, 9, 6, generator=generator)
    encodings[0, 5:] = 0.0  # padding rows past each count
    logits = torch.randn(4, 16, generator=generator)
    last_step = torch.stack([
        torch.full((4, 6), float("nan")),  # the clause's first step
        encodings[1, [3, 4, 4, 4]],  # three frames on id 4
        encodings[2, [0, 1, 1, 2]],  # one frame on id 2, its last
        encodings[3, [6, 6, 6, 6]],  # the whole step on id 6, the last
    ])
    head = FixedHead(logits, channels=6)
    frames = pointer_step(head, torch.zeros(4, 4), last_step, encodings, counts)
    for row in range(4):
        expected, context = _reference_step(logits[row], last_step[row],
                                            encodings[row, : counts[row]])
        torch.testing.assert_close(frames[row], expected, rtol=0, atol=0)
        assert head.seen is not None
        torch.testing.assert_close(head.seen[row], context, rtol=0, atol=0)
    # a clause's first frame is its first id, whatever the head prefers
    assert torch.equal(frames[0, 0], encodings[0, 0])
    # no pointer passes its clause's last id
    worst = torch.full((4, 16), -10.0)
    worst[:, 15] = 10.0  # every frame starts a new id
    frames = pointer_step(FixedHead(worst), torch.zeros(4, 4), last_step, encodings, counts)
    assert torch.equal(frames[2, -1], encodings[2, 2]) and torch.equal(frames[3, -1],
                                                                      encodings[3, 6])


def test_a_tie_between_equal_encodings_never_moves_a_pointer_back() -> None:
    encodings = torch.tensor([[[1.0, 0.0], [2.0, 0.0], [1.0, 0.0], [3.0, 0.0]]])
    last_step = encodings[:, [2, 2, 2, 2]]
    stay = torch.full((1, 16), -10.0)
    stay[0, 0] = 10.0  # no frame starts an id
    frames = pointer_step(FixedHead(stay), torch.zeros(1, 4), last_step, encodings,
                          torch.tensor([4]))
    assert torch.equal(frames[0], encodings[0, 2].expand(4, 2))
    one = stay.clone()
    one[0, 0], one[0, 1] = -10.0, 10.0  # the first frame starts the next id
    frames = pointer_step(FixedHead(one), torch.zeros(1, 4), last_step, encodings,
                          torch.tensor([4]))
    assert torch.equal(frames[0, 0], encodings[0, 3])


def test_teacher_pointers_are_what_a_step_finds_from_the_teachers_frames() -> None:
    durations = torch.tensor([2, 1, 3, 1, 2])  # frames' ids: 0 0 1 2 2 2 3 4 4
    pointer, dwell = teacher_pointers(durations, 3, 4)  # the last step padded with id 4
    assert pointer.tolist() == [-1, 2, 4] and dwell.tolist() == [0, 1, 1]
    encodings = torch.randn(5, 3)
    frames = encodings[torch.tensor([0, 0, 1, 2, 2, 2, 3, 4, 4, 4, 4, 4])].view(3, 4, 3)
    for step in (1, 2):
        head = FixedHead(torch.zeros(1, 16), channels=3)
        pointer_step(head, torch.zeros(1, 4), frames[step - 1: step], encodings[None],
                     torch.tensor([5]))
        assert head.seen is not None
        expected = pointer_context(pointer[step: step + 1], dwell[step: step + 1],
                                   encodings[None], torch.tensor([5]), 4)
        torch.testing.assert_close(head.seen, expected, rtol=0, atol=0)


def test_step_patterns_mark_where_each_id_starts() -> None:
    durations = torch.tensor([2, 1, 3, 1, 2])  # ids start at frames 0, 2, 3, 6, 7
    patterns = step_patterns(durations, 3, 4)  # 9 frames in 3 steps of 4 (3 of padding)
    starts = [(int(p) >> g) & 1 for p in patterns for g in range(4)]
    assert starts == [1, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0]


@pytest.fixture
def feature_export(tiny_config, tmp_path: Path) -> Path:
    """A tiny student that reads the teacher's text encoding (random weights), exported
    with half-precision matrices, as the shipped voice is (and the pointer export)."""
    config = dataclasses.replace(tiny_config, text_features="teacher_prior")
    torch.manual_seed(0)
    weights, _ = export_student(build_student(config), config, tmp_path / "student",
                                torch.float16)
    return weights


def _config(data: Path, init: Path, epochs: int) -> pointer_training.PointerConfig:
    return pointer_training.PointerConfig((str(data),), str(init), utterances=3,
                                          epochs=epochs, width=32, lr=1e-2, batch=8)


@pytest.mark.parametrize("context", [False, True])
def test_training_learns_the_patterns_and_exports_a_pointer_student(
        teacher_data: Path, feature_export: Path, tmp_path: Path, context: bool) -> None:
    config = dataclasses.replace(_config(teacher_data, feature_export, 8), context=context)
    weights = pointer_training.train(tmp_path / "run", config)
    lines = [json.loads(line) for line in (tmp_path / "run/log.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == list(range(1, 9))
    assert lines[-1]["loss"] < 0.7 * lines[0]["loss"], lines  # measured: 2.7 -> 1.6
    config, flow_lm = load_student(weights.parent / "config.yaml", weights)
    assert config.pointer_width == 32 and flow_lm.pointer_head is not None
    assert config.pointer_context == context
    assert (flow_lm.pointer_head.context_width > 0) == context
    # the backbone and flow head are the init's; only the head is new
    _, before = load_student(feature_export.parent / "config.yaml", feature_export)
    after = flow_lm.state_dict()
    for name, tensor in before.state_dict().items():
        torch.testing.assert_close(after[name], tensor, rtol=0, atol=0)


def test_an_interrupted_run_resumes_to_what_an_uninterrupted_one_trains(
        teacher_data: Path, feature_export: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(teacher_data, feature_export, 3)
    whole = pointer_training.train(tmp_path / "whole", config)
    saved = pointer_training.save_checkpoint
    calls = []

    def stop_after_one(out: Path, state: dict) -> Path:
        path = saved(out, state)
        calls.append(state["epoch"])
        if len(calls) == 1:
            raise KeyboardInterrupt
        return path

    monkeypatch.setattr(pointer_training, "save_checkpoint", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        pointer_training.train(tmp_path / "cut", config)
    resumed = pointer_training.train(tmp_path / "cut", config)
    assert calls == [1, 2, 3]  # the second start went on from epoch 1
    first, second = (load_student(w.parent / "config.yaml", w)[1].pointer_head.state_dict()
                     for w in (whole, resumed))
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=0, atol=0)
    with pytest.raises(ValueError, match="other settings"):
        pointer_training.train(tmp_path / "cut", dataclasses.replace(config, width=16))


def test_states_are_the_student_forced_through_each_utterance(
        teacher_data: Path, feature_export: Path) -> None:
    config, flow_lm = load_student(feature_export.parent / "config.yaml", feature_export)
    utterances = read_data(teacher_data)
    states, patterns, contexts = pointer_training.collect(flow_lm, utterances,
                                                          config.frames_per_step)
    steps = sum(-(-len(u.latents) // config.frames_per_step) for u in utterances)
    assert states.shape == (steps, flow_lm.d_model) and patterns.shape == (steps,)
    assert contexts.shape == (steps, 2 * config.latent_channels + config.frames_per_step + 1)
    # the first step of every utterance starts its first id
    first = 0
    for utterance in utterances:
        assert int(patterns[first]) & 1
        first += -(-len(utterance.latents) // config.frames_per_step)


def _forced_after_tail(flow_lm, config, before, utterance, keep: int) -> torch.Tensor:
    """Plainly, as the engine's `audio` chaining holds a context: `before` spoken (its
    ids prefilled, its teacher frames read back) into a KV store, all but its last `keep`
    positions dropped, then `utterance` prefilled and forced step by step. Its states."""
    from polyvox.models.layers.attention import ContiguousKV
    from polyvox.train.batches import group_frames

    backbone = config.flow_lm.transformer
    kv = ContiguousKV(backbone.num_layers, backbone.kv_heads, backbone.head_dim,
                      torch.float32, torch.device("cpu"), capacity=1024)
    group = config.frames_per_step
    states = []
    for index, clause in enumerate((before, utterance)):
        features = id_features(clause.latents, clause.durations).float()
        ids = clause.ids
        flow_lm.prefill(flow_lm.embed_text(ids, features)[None], kv.next_positions(len(ids)), kv)
        kv.commit()
        steps = (group_frames(clause.latents, group).float() - flow_lm.emb_mean) / flow_lm.emb_std
        inputs = torch.cat([torch.full((1, steps.shape[1]), float("nan")), steps])
        if index == 1:
            inputs = inputs[:-1]  # the last step's input predicts only the end
        for latent in inputs:
            hidden, _ = flow_lm.step_hidden(latent[None], kv.next_positions(1)[:, 0], kv)
            kv.commit()
            states.append(hidden[0])
        if index == 0:
            kv.drop_before(kv.start + kv.length - keep)  # its text and head dropped
            states.clear()
    return torch.stack(states)


def test_chained_states_are_the_students_after_another_clauses_audio_tail(
        teacher_data: Path, feature_export: Path) -> None:
    config, flow_lm = load_student(feature_export.parent / "config.yaml", feature_export)
    before, utterance = read_data(teacher_data)[:2]
    group = config.frames_per_step
    keep = 5
    with torch.no_grad():
        chained, patterns, _ = pointer_training.collect(
            flow_lm, [utterance, before], group, prefixes=[(before, keep), None])
        fresh, fresh_patterns, _ = pointer_training.collect(flow_lm, [utterance, before], group)
        reference = _forced_after_tail(flow_lm, config, before, utterance, keep)
    torch.testing.assert_close(patterns, fresh_patterns, rtol=0, atol=0)
    steps = len(reference)
    torch.testing.assert_close(chained[:steps].float(), reference, rtol=0, atol=2e-2)
    # the tail changed the states it was meant to; the unchained row is as fresh
    assert (chained[:steps].float() - fresh[:steps].float()).abs().max() > 0.1
    torch.testing.assert_close(chained[steps:], fresh[steps:], rtol=0, atol=2e-3)


def test_chained_prefixes_keep_only_audio_and_prefer_the_sentence_before() -> None:
    from polyvox.train.teacher_data import Utterance

    def utterance(frames: int, part: int) -> Utterance:
        return Utterance(torch.zeros(5, dtype=torch.long), torch.tensor([frames, 0, 0, 0, 0]),
                         torch.zeros(frames, 2), "text", part=part)

    everything = [utterance(40, 0), utterance(36, 1), utterance(8, 0), utterance(600, 0)]
    order = [1, 2, 0, 3] * 50
    prefixes = pointer_training.chained_prefixes(everything, order, 0.5, 128, 4,
                                                 random.Random(0))
    chained = [(index, prefix) for index, prefix in zip(order, prefixes) if prefix]
    assert 0.35 < len(chained) / len(order) < 0.65
    for index, (clause, keep) in chained:
        if index == 1:
            assert clause is everything[0]  # the paragraph's sentence before it
        steps = -(-len(clause.latents) // 4) + 1
        assert 1 <= keep <= min(steps, 128)  # never the clause's text
    assert max(keep for _, (clause, keep) in chained if clause is everything[3]) > 64
    assert pointer_training.chained_prefixes(everything, order, 0.0, 128, 4,
                                             random.Random(0)) == [None] * len(order)


def test_a_pointer_student_speaks_the_teachers_encodings_in_order(
        tiny_config, teacher, tmp_path: Path) -> None:
    """Every frame it generates is the teacher's encoding of one of the clause's ids, the
    first frame the first id, and each frame the same id as the one before or the next."""
    import yaml

    from polyvox.models.joe_ar.family import StudentParams, load_student_family
    from polyvox.models.joe_ar.network import config_to_dict
    from polyvox.models.layers.attention import ContiguousKV

    config = dataclasses.replace(tiny_config, text_features="teacher_prior", pointer_width=32)
    path = tmp_path / "pointer.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(config)))
    family = load_student_family(path, seed=3)
    ids = family.phoneme_ids("The kite flew over the hill.")
    kv = ContiguousKV(*family.kv_shape, dtype=torch.float32, device=torch.device("cpu"))
    params = StudentParams(eos_threshold=1e9)  # random weights: run to the length cap
    latents = family.clause_latents(torch.tensor(ids), kv, params, torch.Generator())
    frames = latents.reshape(-1, family.channels)
    encodings = family.flow_lm.normalize_features(family.text_features(ids))
    distance = (frames[:, None] - encodings[None]).square().sum(-1)
    assert float(distance.min(1).values.max()) == 0.0  # each frame is an exact copy
    pointed = distance.argmin(1)
    assert int(pointed[0]) == 0
    steps = pointed.diff()
    assert bool(((steps == 0) | (steps == 1)).all())
    assert len(set(steps.tolist())) == 2  # it moves, and it stays


@pytest.mark.parametrize("method", ["grpo", "dpo"])
def test_post_training_refuses_a_pointer_student(tiny_config, teacher, tmp_path: Path,
                                                 method: str) -> None:
    """DPO and GRPO move the flow head's samples, which a pointer student never speaks."""
    from polyvox.train.dpo import DPOConfig, DPORun
    from polyvox.train.grpo import GRPOConfig, GRPORun

    config = dataclasses.replace(tiny_config, text_features="teacher_prior", pointer_width=16)
    weights, _ = export_student(build_student(config), config, tmp_path / "pointer")
    run = (GRPORun, GRPOConfig) if method == "grpo" else (DPORun, DPOConfig)
    with pytest.raises(ValueError, match="pointer student"):
        run[0](weights, tmp_path / "run", run[1](steps=1), log=False)
