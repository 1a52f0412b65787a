"""Teacher data: what is stored is what the teacher produced, and reruns resume."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
import torch

from polyvox.asr.wer import normalize_for_wer
from polyvox.train.sentences import generate_sentences, held_out
from polyvox.train.teacher_data import (
    TEACHER_SPEEDS,
    TeacherDataConfig,
    generate,
    main,
    read_data,
    read_shard,
    sentence_generator,
    sentence_speed,
    shard_path,
    teacher_utterances,
    write_shard,
)


def test_sentences_are_seeded_prefix_stable_and_never_held_out() -> None:
    many = list(generate_sentences(500, seed=3))
    assert list(generate_sentences(50, seed=3)) == many[:50]
    assert list(generate_sentences(50, seed=4)) != many[:50]
    assert not set(many) & held_out()
    assert len(set(many)) > 450
    assert not any(ch.isdigit() for sentence in many for ch in sentence)  # normalized


def test_round_trip_equals_the_teacher(teacher, teacher_data: Path) -> None:
    from polyvox.models.piper.front import Sentence

    utterances = read_data(teacher_data)
    texts = list(generate_sentences(3, seed=0))
    assert sorted({u.text for u in utterances}) == sorted(texts)
    scales = teacher.scales(1.0, noise=False)
    index = 0
    for number, text in enumerate(texts):
        generator = sentence_generator(0, number)
        for ids in teacher.sentence_ids(text):
            stored = utterances[index]
            (stage1,) = teacher.front.run_stage1([Sentence(ids, scales, generator)])
            assert stored.ids.tolist() == ids
            assert torch.equal(stored.durations, stage1.durations)
            assert int(stored.durations.sum()) == stored.latents.shape[0]
            assert stored.latents.dtype == torch.float16 and stored.latents.shape[1] == 192
            torch.testing.assert_close(stored.latents.float(), teacher.front.prior_mean(stage1).t(),
                                       atol=2e-2, rtol=1e-3)  # float16 storage
            index += 1
    assert index == len(utterances)


def test_the_prior_is_one_vector_per_id_and_the_flow_maps_it_to_the_teachers_z(
        teacher, teacher_data: Path) -> None:
    scales = teacher.scales(1.0, noise=False)
    text = next(iter(generate_sentences(1, seed=0)))
    ids = teacher.sentence_ids(text)[0]
    stored = read_data(teacher_data)[0]
    assert stored.ids.tolist() == ids
    # piecewise constant: frames of one id are equal, neighbouring ids differ
    frames = stored.latents.float()
    starts = torch.cumsum(stored.durations, 0) - stored.durations
    for start, length in zip(starts.tolist(), stored.durations.tolist()):
        assert torch.equal(frames[start: start + length],
                           frames[start].expand(length, -1))
    changes = (frames[1:] != frames[:-1]).any(dim=1).sum()
    assert changes == (stored.durations > 0).sum() - 1
    # the noise-free flow over the (float32) prior gives the teacher's z exactly
    teacher_z = teacher.latents(ids, scales, sentence_generator(0, 0)).latents
    from polyvox.models.piper.front import Sentence

    (stage1,) = teacher.front.run_stage1([Sentence(ids, scales, sentence_generator(0, 0))])
    z = teacher.front.flow_from_prior(teacher.front.prior_mean(stage1))
    torch.testing.assert_close(z, teacher_z, atol=1e-5, rtol=0)
    # and over the float16 prior, to float16 rounding
    z16 = teacher.front.flow_from_prior(frames.t())
    assert (z16 - teacher_z).abs().mean() < 2e-2 * teacher_z.abs().mean()
    # a window equals the sentence's z once FLOW_CONTEXT frames in from a cut edge
    from polyvox.models.piper.front import FLOW_CONTEXT

    prior = teacher.front.prior_mean(stage1)
    cut = teacher.front.flow_from_prior(prior[:, 10:])
    torch.testing.assert_close(cut[:, FLOW_CONTEXT:], teacher_z[:, 10 + FLOW_CONTEXT:],
                               atol=1e-4, rtol=0)
    assert (cut[:, :4] - teacher_z[:, 10:14]).abs().max() > 1e-2


def test_z_target_stores_the_flow_output(teacher, tmp_path: Path) -> None:
    generate(tmp_path, TeacherDataConfig(num_sentences=1, target="z"), teacher, log=False)
    stored = read_data(tmp_path)[0]
    text = next(iter(generate_sentences(1, seed=0)))
    ids = teacher.sentence_ids(text)[0]
    expected = teacher.latents(ids, teacher.scales(1.0, noise=False), sentence_generator(0, 0))
    torch.testing.assert_close(stored.latents.float(), expected.latents.t(), atol=2e-2, rtol=1e-3)
    with pytest.raises(ValueError, match="target"):
        generate(tmp_path, TeacherDataConfig(num_sentences=1), teacher, log=False)
    with pytest.raises(ValueError, match="target"):
        TeacherDataConfig(num_sentences=1, target="mel")


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
                                                  data_copy: Path) -> None:
    copy = data_copy
    shard_path(copy, 1).unlink()
    generate(copy, TeacherDataConfig(num_sentences=3, shard_size=2), teacher, log=False)
    rewritten, original = read_data(copy), read_data(teacher_data)
    assert len(rewritten) == len(original)
    for a, b in zip(rewritten, original):
        assert torch.equal(a.latents, b.latents) and torch.equal(a.ids, b.ids)


def test_the_service_grammar_and_paragraphs_are_in_version_2_only() -> None:
    two = list(generate_sentences(400, seed=0))
    one = list(generate_sentences(400, seed=0, version=1))
    spoken = " ".join(two)
    assert "dollars" in spoken and " at " in spoken and " dot " in spoken  # money, email/url
    paragraphs = [text for text in two if text.count(". ") + text.count("? ") >= 2]
    assert 0.05 < len(paragraphs) / len(two) < 0.25
    assert not any(text.count(". ") >= 2 for text in one)  # version 1 made no paragraphs
    assert not any(ch.isdigit() for sentence in two for ch in sentence)  # normalized
    with pytest.raises(ValueError, match="version"):
        next(generate_sentences(1, version=4))


def _vocabulary(texts) -> set[str]:
    return {word for text in texts for word in normalize_for_wer(text)}


def test_version_3_speaks_a_wide_vocabulary_and_leaves_version_2_as_it_was() -> None:
    """Grammar 3 is grammar 2 with half its prose words drawn from the wide lists: its
    vocabulary is several times larger, it covers much more of the eval sets' read prose
    than version 2 does, and asking for it does not change what version 2 makes."""
    from polyvox.eval.sets import load_items
    from polyvox.train.wide_vocab import load_wide_vocab

    two_before = list(generate_sentences(2000, seed=8))
    three = list(generate_sentences(2000, seed=8, version=3))
    two = list(generate_sentences(2000, seed=8))
    assert two == two_before
    assert three != two and list(generate_sentences(50, seed=8, version=3)) == three[:50]
    wide = load_wide_vocab()
    assert len(wide.nouns) > 5000 and len(wide.verbs) > 800 and len(wide.first_names) > 1500
    assert ("stir", "stirred", "stirs", "stirring") in wide.verbs
    assert "applied" not in {verb.base for verb in wide.verbs}
    v2, v3 = _vocabulary(two), _vocabulary(three)
    assert len(v3) > 2 * len(v2)
    read = [word for item in load_items("dev") if item.kind == "read"
            for word in normalize_for_wer(item.text)]
    missed = [word for word in read if word not in v2]
    covered = [word for word in missed if word in v3]
    assert len(covered) > 0.15 * len(missed), (len(covered), len(missed))
    spoken = " ".join(three)
    assert "dollars" in spoken and " dot " in spoken  # the service lines are still there


def test_a_wide_name_after_a_connective_keeps_its_capital() -> None:
    import random

    from polyvox.train.sentences import _Grammar
    from polyvox.train.wide_vocab import load_wide_vocab

    wide = _Grammar(random.Random(0), load_wide_vocab())
    plain = _Grammar(random.Random(0))
    assert "Mary" in load_wide_vocab().first_names
    assert wide.lower_first("Mary fixed the lamp") == "Mary fixed the lamp"
    assert plain.lower_first("Mary fixed the lamp") == "mary fixed the lamp"  # as version 2 did
    assert wide.lower_first("The lamp broke") == "the lamp broke"
    assert wide.lower_first("I waited") == "I waited"


def test_exchanges_are_a_question_then_a_short_spelled_or_confirming_clause(
        teacher_data: Path) -> None:
    from polyvox.train.posteval import SURNAMES

    assert list(generate_sentences(300, seed=4, exchange_share=0.0)) == \
        list(generate_sentences(300, seed=4))  # share 0 leaves the data as it was
    items = list(generate_sentences(2000, seed=4, exchange_share=0.5))
    exchanges = [text for text in items if text.split("? ", 1)[0].count(". ") == 0
                 and "? " in text and len(text.split("? ", 1)[1].split()) <= 14]
    assert 0.4 < len(exchanges) / len(items) < 0.7
    spelled = [text for text in exchanges if re.search(r"\b[A-Z] [A-Z]\b", text)]
    assert len(spelled) > 0.4 * len(exchanges)  # letters, one by one, after the question
    # the chained-clause probe's surnames stay unseen in training
    runs = {re.sub("[ -]", "", run) for text in items
            for run in re.findall(r"\b[A-Z](?:[ -][A-Z]\b)+", text)}
    assert len(runs) > 100 and not runs & {name.upper() for name in SURNAMES}
    assert not any(ch.isdigit() for text in items for ch in text)  # normalized
    with pytest.raises(ValueError, match="exchange_share"):
        next(generate_sentences(1, exchange_share=1.5))
    with pytest.raises(ValueError, match="exchange_share"):
        generate(teacher_data, TeacherDataConfig(num_sentences=3, shard_size=2,
                                                 exchange_share=0.5), log=False)


def test_speeds_are_seeded_per_sentence_and_span_the_range() -> None:
    varied = TeacherDataConfig(num_sentences=1, varied_speed_share=0.5)
    speeds = [sentence_speed(varied, index) for index in range(400)]
    assert speeds == [sentence_speed(varied, index) for index in range(400)]
    changed = [speed for speed in speeds if speed != 1.0]
    assert 0.4 < len(changed) / len(speeds) < 0.6
    low, high = TEACHER_SPEEDS  # the teacher's argument: wider than the effective range
    assert all(low <= speed <= high for speed in changed)
    assert min(changed) < low * 1.2 and max(changed) > high / 1.2
    plain = TeacherDataConfig(num_sentences=1)
    assert {sentence_speed(plain, index) for index in range(100)} == {1.0}


def test_a_fast_only_range_is_drawn_from_and_reaches_the_data(tmp_path: Path) -> None:
    fast = TeacherDataConfig(num_sentences=1, varied_speed_share=1.0, teacher_speeds=(1.3, 2.5))
    speeds = [sentence_speed(fast, index) for index in range(200)]
    assert all(1.3 <= speed <= 2.5 for speed in speeds)
    assert min(speeds) < 1.45 and max(speeds) > 2.2
    for bad in ((0.0, 1.0), (2.0, 1.5)):
        with pytest.raises(ValueError, match="teacher_speeds"):
            TeacherDataConfig(num_sentences=1, teacher_speeds=bad)
    # the command line: every utterance spoken faster than at speed 1, and the range kept
    # in the manifest (a rerun with another range is refused)
    out = tmp_path / "fast"
    main(["--out", str(out), "--sentences", "2", "--shard-size", "2", "--seed", "3",
          "--varied-speed", "1", "--teacher-speeds", "1.3", "2.5"])
    assert all(u.speed > 1.1 for u in read_data(out))
    with pytest.raises(ValueError, match="teacher_speeds"):
        main(["--out", str(out), "--sentences", "2", "--shard-size", "2", "--seed", "3",
              "--varied-speed", "1"])


def test_a_paragraph_at_a_speed_is_its_sentences_in_order_at_that_pace(teacher,
                                                                         tmp_path: Path) -> None:
    text = "The kite flew over the hill. It came back slowly. Then it rained."
    normal = teacher_utterances(teacher, text, False, sentence_generator(0, 0))
    fast = teacher_utterances(teacher, text, False, sentence_generator(0, 0), speed=2.0)
    assert [u.part for u in fast] == [0, 1, 2]
    for slow_one, fast_one in zip(normal, fast):
        assert torch.equal(slow_one.ids, fast_one.ids)
        # labelled with the pace heard: Piper at speed 2 is not twice as fast (each id's
        # frames are rounded up), and the label says by how much it is
        pace = slow_one.latents.shape[0] / fast_one.latents.shape[0]
        assert fast_one.speed == round(pace, 4) and 1.2 < fast_one.speed < 2.0
    path = shard_path(tmp_path, 0)
    write_shard(path, [text, "Yes."], [fast, normal[:1]])
    back = read_shard(path)
    assert [(u.part, u.speed) for u in back] == [(0, fast[0].speed), (1, fast[1].speed),
                                                 (2, fast[2].speed), (0, 1.0)]
    assert [u.text for u in back] == [text] * 3 + ["Yes."]


def test_data_labelled_with_the_teachers_speed_argument_is_relabelled(
        teacher, tmp_path: Path) -> None:
    """Data written before effective speeds: relabelling gives each utterance the label
    it would get now, keeps the old one, and a rerun changes nothing."""
    import json

    from polyvox.train.teacher_data import MANIFEST, read_manifest, relabel_speeds

    text = "The kite flew over the hill. It came back slowly."
    fast = teacher_utterances(teacher, text, False, sentence_generator(0, 0), speed=1.8)
    old = [u._replace(speed=1.8) for u in fast]  # labelled as before
    write_shard(shard_path(tmp_path, 0), [text], [old])
    config = TeacherDataConfig(num_sentences=1, varied_speed_share=1.0)
    manifest = {k: v for k, v in dataclasses.asdict(config).items()
                if k not in ("speed_label", "teacher_speeds")}
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    assert read_manifest(tmp_path)["speed_label"] == "nominal"
    assert relabel_speeds(tmp_path, teacher) == 2
    assert [u.speed for u in read_data(tmp_path)] == [u.speed for u in fast]
    assert read_manifest(tmp_path)["speed_label"] == "effective"
    assert relabel_speeds(tmp_path, teacher) == 0


def test_grammar_3_without_the_train_extra_is_refused_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from polyvox.train.wide_vocab import load_wide_vocab

    monkeypatch.setitem(sys.modules, "wonderwords", None)  # import fails as if not installed
    load_wide_vocab.cache_clear()
    try:
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path / "data"), "--sentences", "4", "--generator", "3"])
    finally:
        load_wide_vocab.cache_clear()
    assert "train extra (wonderwords is missing)" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
