"""Teacher data: what is stored is what the teacher produced, and reruns resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from polyvox.train.sentences import generate_sentences, held_out
from polyvox.train.teacher_data import (
    TeacherDataConfig,
    generate,
    read_data,
    sentence_generator,
    shard_path,
)


def test_sentences_are_seeded_prefix_stable_and_never_held_out() -> None:
    many = list(generate_sentences(500, seed=3))
    assert list(generate_sentences(50, seed=3)) == many[:50]
    assert list(generate_sentences(50, seed=4)) != many[:50]
    assert not set(many) & held_out()
    assert len(set(many)) > 450
    assert not any(ch.isdigit() for sentence in many for ch in sentence)  # normalized


def test_round_trip_equals_the_teacher(teacher, teacher_data: Path) -> None:
    utterances = read_data(teacher_data)
    texts = list(generate_sentences(3, seed=0))
    assert sorted({u.text for u in utterances}) == sorted(texts)
    scales = teacher.scales(1.0, noise=False)
    index = 0
    for number, text in enumerate(texts):
        generator = sentence_generator(0, number)
        for ids in teacher.sentence_ids(text):
            stored = utterances[index]
            expected = teacher.latents(ids, scales, generator)
            assert stored.ids.tolist() == ids
            assert torch.equal(stored.durations, expected.durations)
            assert int(stored.durations.sum()) == stored.z.shape[0]
            assert stored.z.dtype == torch.float16 and stored.z.shape[1] == 192
            torch.testing.assert_close(stored.z.float(), expected.latents.t(),
                                       atol=2e-2, rtol=1e-3)  # float16 storage
            index += 1
    assert index == len(utterances)


def test_rerun_skips_written_shards_and_refuses_other_settings(teacher,
                                                               teacher_data: Path) -> None:
    first = shard_path(teacher_data, 0)
    before = (first.stat().st_mtime_ns, first.read_bytes())
    generate(teacher_data, TeacherDataConfig(num_sentences=3, shard_size=2), teacher, log=False)
    assert (first.stat().st_mtime_ns, first.read_bytes()) == before
    with pytest.raises(ValueError, match="noise"):
        generate(teacher_data, TeacherDataConfig(num_sentences=3, shard_size=2, noise=True),
                 teacher, log=False)


def test_a_missing_shard_is_rewritten_identically(teacher, teacher_data: Path,
                                                  tmp_path: Path) -> None:
    copy = tmp_path / "data"
    copy.mkdir()
    for path in teacher_data.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    shard_path(copy, 1).unlink()
    generate(copy, TeacherDataConfig(num_sentences=3, shard_size=2), teacher, log=False)
    rewritten, original = read_data(copy), read_data(teacher_data)
    assert len(rewritten) == len(original)
    for a, b in zip(rewritten, original):
        assert torch.equal(a.z, b.z) and torch.equal(a.ids, b.ids)
