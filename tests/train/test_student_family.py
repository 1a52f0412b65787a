"""The student behind the engine: batched equals one at a time, the engine equals the
offline path, and windowed decoding equals whole-clause decoding."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import yaml

from polyvox.config import EngineConfig
from polyvox.engine.engine import Engine, run_to_completion
from polyvox.models.joe_ar.network import config_to_dict
from polyvox.text.clauses import split_text

TEXT = "The kite flew. It came back, slowly."


@pytest.fixture(scope="module",
                params=["prior", "z", "prior+features", "prior+draws", "prior+pointer"])
def family(request, tiny_config, teacher, tmp_path_factory: pytest.TempPathFactory):
    """A tiny student of either teacher latent: the prior's mean (decoded through the
    teacher's flow) or z; "+features": it also reads the teacher's text encoding;
    "+draws": each step averages 4 head draws (the shipped voice's kind of setting);
    "+pointer": its frames copy the teacher's encodings its pointer head points at (a
    head that also reads the pointer's context)."""
    from polyvox.models.joe_ar.family import load_student_family

    latent, _, extra = request.param.partition("+")
    config = dataclasses.replace(
        tiny_config, teacher_latent=latent,
        text_features="teacher_prior" if extra in ("features", "pointer") else None,
        head_draws=4 if extra == "draws" else 1,
        pointer_width=32 if extra == "pointer" else 0, pointer_context=extra == "pointer")
    path = tmp_path_factory.mktemp("student") / "tiny.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(config)))
    return load_student_family(path, seed=1)  # random weights: noise, but deterministic


def _params(family, seed: int):
    # random weights never say EOS reliably: clauses run to their length cap
    return dataclasses.replace(family.make_params(seed=seed), eos_threshold=1e9)


def _engine(family, **config) -> Engine:
    engine = Engine(family, EngineConfig(max_clause_tokens=400, chunk_frames=4, **config))
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    return engine


def test_formats(family) -> None:
    assert family.audio.samples_per_frame == 4 * 256
    # context either side: HiFi-GAN's 10 frames, plus the flow's 32 for a prior student
    context = 3 if family.student.teacher_latent == "z" else 11
    assert family.latent_dim == 768
    assert family.traits.decoder_history == family.traits.decoder_lookahead == context
    assert family.kv_spec.num_layers == 3


def test_each_clause_gets_a_fresh_context_unless_told_to_chain(family) -> None:
    # chained, it sometimes speaks a question again in place of a short clause after it
    assert EngineConfig().for_family(family).chaining == "pocket"
    chained = EngineConfig(chaining="chained").for_family(family)
    # trained after the tail of at most one clause: chained over a window no longer
    assert (chained.chaining, chained.context_window) == ("chained", 128)
    settings = EngineConfig().for_family(family)
    assert (settings.first_chunk_frames, settings.min_chunk_frames, settings.chunk_frames,
            settings.max_chunk_frames) == (8, 8, 8, 32)


def test_batched_equals_one_at_a_time_and_offline(family) -> None:
    engine = _engine(family)
    engine.add_request(TEXT, "default", _params(family, 1), request_id="a")
    engine.add_request("Good morning!", "default", _params(family, 2), request_id="b")
    together = run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()
    alone = {}
    for rid, text, seed in (("a", TEXT, 1), ("b", "Good morning!", 2)):
        engine = _engine(family)
        engine.add_request(text, "default", _params(family, seed), request_id=rid)
        alone.update(run_to_completion(engine))
        offline = family.synthesize(text, params=_params(family, seed), max_tokens=400)
        torch.testing.assert_close(alone[rid], offline, atol=1e-4, rtol=0)
    # NOTE: chunks (so flow windows) differ with the batch, and onnxruntime's flow rounds
    # a little differently per window length: measured up to 1.005e-4 for a prior student.
    tolerance = 1e-4 if family.flow is None else 2e-4
    for rid in ("a", "b"):
        torch.testing.assert_close(together[rid], alone[rid], atol=tolerance, rtol=0)


def test_chained_clauses_follow_the_window_as_the_reference_does(family) -> None:
    """Three clauses, each longer than a 32-position window: the engine drops the same
    old blocks as the reference; fresh contexts (pocket) give other audio."""
    text = "The kite flew. It came back, slowly. Then it rained."
    audio = {}
    for name, window, chaining in (("short", 32, "chained"), ("fresh", None, "pocket")):
        engine = _engine(family, chaining=chaining, context_window=window)
        engine.add_request(text, "default", _params(family, 3), request_id=name)
        audio.update(run_to_completion(engine))
        assert engine.is_idle() and engine.check_integrity()
        offline = family.synthesize(text, params=_params(family, 3), max_tokens=400,
                                    context_window=window)
        torch.testing.assert_close(audio[name], offline, atol=1e-4, rtol=0)
    first = len(family.synthesize("The kite flew.", params=_params(family, 3)))
    assert audio["short"].shape == audio["fresh"].shape  # clauses run to their length caps
    torch.testing.assert_close(audio["short"][:first], audio["fresh"][:first], atol=1e-4,
                               rtol=0)  # the first clause has nothing before it
    assert (audio["short"][first:] - audio["fresh"][first:]).abs().max() > 1e-2


def test_audio_chaining_drops_the_earlier_text_as_the_reference_does(family) -> None:
    """chaining="audio": of the clauses before, only the blocks holding their generated
    steps stay (a window of 400 positions would keep everything); the engine keeps what
    the reference keeps, and the audio differs from plain chaining after clause one."""
    text = "The kite flew. It came back, slowly. Then it rained."
    audio = {}
    for chaining, keep_text in (("audio", False), ("chained", True)):
        engine = _engine(family, chaining=chaining, context_window=400)
        engine.add_request(text, "default", _params(family, 3), request_id=chaining)
        audio.update(run_to_completion(engine))
        assert engine.is_idle() and engine.check_integrity()
        offline = family.synthesize(text, params=_params(family, 3), max_tokens=400,
                                    context_window=400, keep_text=keep_text)
        # NOTE: the engine's windowed decoding rounds differently from the whole clause's:
        # up to ~1.1e-4 on one sample of 185,344 here, with some thread counts
        torch.testing.assert_close(audio[chaining], offline, atol=2e-4, rtol=0)
    first = len(family.synthesize("The kite flew.", params=_params(family, 3)))
    torch.testing.assert_close(audio["audio"][:first], audio["chained"][:first], atol=1e-4,
                               rtol=0)
    assert (audio["audio"][first:] - audio["chained"][first:]).abs().max() > 1e-2


def test_windowed_decoding_equals_whole_clause_decoding(family) -> None:
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(1, 40, family.latent_dim, generator=generator) * 0.5
    whole = family.decode(latents, family.new_decoder_state())
    state, pieces, done = family.new_decoder_state(), [], 0
    context = family.traits.decoder_lookahead
    for size in (1, 4, 4, 4, 4, 4, 2, 12, 5):
        lookahead = min(context, 40 - done - size)
        window = latents[:, done: done + size + lookahead]
        history = min(context, done)
        pieces.append(family.decode(window, state, num_frames=size, history=history))
        done += size
    torch.testing.assert_close(torch.cat(pieces, 1), whole, atol=1e-5, rtol=0)
    # with less than the flow's context the windows would not match
    if family.student.teacher_latent == "prior":
        state, short = family.new_decoder_state(), []
        for start in range(0, 40, 8):
            window = latents[:, start: start + 8 + 3]
            short.append(family.decode(window, state, num_frames=min(8, 40 - start),
                                       history=min(3, start)))
        assert (torch.cat(short, 1) - whole).abs().max() > 1e-3


def test_text_features_are_what_training_read(family, teacher_data) -> None:
    """At inference the student reads, per id, what the teacher data gave it in training:
    the teacher's prior mean of the id (stage 1 at noise 0; durations do not matter)."""
    from polyvox.models.joe_ar.network import id_features
    from polyvox.train.teacher_data import read_data

    if family.student.text_features is None:
        assert family.plan_clause(TEXT, family.make_params()).features is None
        return
    for utterance in read_data(teacher_data):
        ids = utterance.ids.tolist()
        got = family.text_features(ids)
        assert got is not None and got.shape == (len(ids), 192)
        expected = id_features(utterance.latents, utterance.durations).float()
        torch.testing.assert_close(got, expected, atol=2e-2, rtol=1e-2)  # stored in float16
    plan = family.plan_clause(TEXT, family.make_params())
    assert plan.features is not None and plan.features.shape == (len(plan.tokens), 192)


def test_speed_other_than_one_is_refused(family) -> None:
    with pytest.raises(ValueError, match="speed"):
        family.make_params(speed=1.5)


def test_a_student_with_a_pace_input_reads_the_speed(tiny_config, teacher, tmp_path) -> None:
    from polyvox.models.joe_ar.family import load_student_family

    config = dataclasses.replace(tiny_config, text_features="teacher_prior", speed_input=True)
    path = tmp_path / "paced.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(config)))
    paced = load_student_family(path, seed=1)
    slow = paced.plan_clause(TEXT, paced.make_params(speed=0.75))
    normal = paced.plan_clause(TEXT, paced.make_params())
    assert slow.features is not None and normal.features is not None
    assert slow.features.shape == (len(slow.tokens), 193)
    torch.testing.assert_close(slow.features[:, -1], torch.full((len(slow.tokens),),
                                                                math.log(0.75)))
    assert torch.equal(slow.features[:, :-1], normal.features[:, :-1])
    assert slow.max_frames > normal.max_frames  # slower speech may run longer
    for speed in (0.25, 3.0):
        with pytest.raises(ValueError, match="speeds 0.5 to 2.0"):
            paced.make_params(speed=speed)


def test_fixed_shape_steps_equal_plain_steps(family) -> None:
    """graphs="shaped" (the CUDA-graph shapes, run eagerly): padded rows, key widths and,
    for a pointer student, clause features padded to the longest clause change no audio."""
    audio = {}
    for graphs in ("off", "shaped"):
        engine = _engine(family, graphs=graphs)
        engine.add_request(TEXT, "default", _params(family, 1), request_id="a")
        engine.add_request("Good morning!", "default", _params(family, 2), request_id="b")
        audio[graphs] = run_to_completion(engine)
        assert engine.is_idle() and engine.check_integrity()
    for rid in ("a", "b"):
        torch.testing.assert_close(audio["shaped"][rid], audio["off"][rid], atol=2e-4, rtol=0)


def test_a_pointer_student_draws_nothing_so_the_seed_changes_nothing(family) -> None:
    """A pointer student's frames are copies of the teacher's encodings chosen by argmax:
    every seed speaks the same audio. The others sample: seeds differ."""
    audio = [family.synthesize(TEXT, params=_params(family, seed)) for seed in (1, 2)]
    if family.traits.steps_read_clause:
        torch.testing.assert_close(audio[0], audio[1], rtol=0, atol=0)
    else:
        assert audio[0].shape != audio[1].shape or (audio[0] - audio[1]).abs().max() > 1e-3


def _fast_and_plain_alike(family, fast, plain) -> dict[str, torch.Tensor]:
    """A fast and a plain request batched equal each alone and the offline reference, and
    the overlapped loop with fixed shapes (the GPU's: EOS read a step late, the step past a
    clause's end undone) gives the same audio; returns the batched audio by name."""
    engine = _engine(family)
    engine.add_request(TEXT, "default", fast, request_id="fast")
    engine.add_request(TEXT, "default", plain, request_id="plain")
    together = run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()
    for rid, params in (("fast", fast), ("plain", plain)):
        engine = _engine(family)
        engine.add_request(TEXT, "default", params, request_id=rid)
        alone = run_to_completion(engine)[rid]
        torch.testing.assert_close(alone, family.synthesize(TEXT, params=params,
                                                            max_tokens=400),
                                   atol=1e-4, rtol=0)
        torch.testing.assert_close(together[rid], alone, atol=2e-4, rtol=0)
    engine = _engine(family, overlap=True, graphs="shaped")
    engine.add_request(TEXT, "default", fast, request_id="fast")
    engine.add_request(TEXT, "default", plain, request_id="plain")
    overlapped = run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()
    for rid in ("fast", "plain"):
        torch.testing.assert_close(overlapped[rid], together[rid], atol=2e-4, rtol=0)
    return together


def test_a_retimed_pointer_student_speeds_up_alike_batched_alone_and_offline(
        tiny_config, teacher, tmp_path) -> None:
    """Faster speech by retiming (polyvox.models.retime): the student speaks at speed 1 (its
    features and length cap are speed 1's) and its runs are retimed as they come. Two
    requests batched, at 1.5 and at 1, equal each alone and the offline reference; the
    fast one is shorter (random weights hold the last id to the length cap, which the
    retiming shrinks most: its pace is tested on the teacher's runs in test_retime)."""
    from polyvox.models.joe_ar.family import load_student_family

    config = dataclasses.replace(
        tiny_config, teacher_latent="prior", text_features="teacher_prior", pointer_width=32,
        pointer_context=True, retime_faster=0.7, run_counts=(3.0, 4.0, 2.0, 1.0))
    path = tmp_path / "retimed.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(config)))
    family = load_student_family(path, seed=1)
    fast = dataclasses.replace(family.make_params(speed=1.5), eos_threshold=1e9)
    plain = _params(family, 0)
    assert family.retiming(1.0) is None and family.retiming(0.75) is None  # no retime_slower
    plan, base = family.plan_clause(TEXT, fast), family.plan_clause(TEXT, plain)
    assert plan.retime is not None and base.retime is None
    assert plan.max_frames == base.max_frames and torch.equal(plan.features, base.features)
    together = _fast_and_plain_alike(family, fast, plain)
    assert len(together["fast"]) < 0.8 * len(together["plain"])


def test_a_student_speeding_up_in_z_is_alike_batched_alone_and_offline(
        tiny_config, teacher, tmp_path) -> None:
    """Faster speech with z resampled (faster_in_z): the student speaks at speed 1 and the
    teacher flow's output is resampled as it comes; the decoder reads that z without its
    flow. Two requests batched, at 1.5 and at 1, equal each alone and the offline
    reference (flow and resampling of each whole clause, decoded at once); the fast one
    is 1 / 1.5 as long within a latent per clause."""
    from polyvox.models.joe_ar.family import load_student_family
    from polyvox.models.retime import ZResampling

    with pytest.raises(ValueError, match="faster_in_z"):  # no flow in the decoder
        dataclasses.replace(tiny_config, teacher_latent="z", text_features=None,
                            faster_in_z=True)
    config = dataclasses.replace(
        tiny_config, teacher_latent="prior", text_features="teacher_prior", pointer_width=32,
        pointer_context=True, faster_in_z=True)
    path = tmp_path / "z.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(config)))
    family = load_student_family(path, seed=1)
    fast = dataclasses.replace(family.make_params(speed=1.5), eos_threshold=1e9)
    plain = _params(family, 0)
    plan, base = family.plan_clause(TEXT, fast), family.plan_clause(TEXT, plain)
    assert isinstance(plan.retime, ZResampling) and base.retime is None
    # its decoder reads z with HiFi-GAN alone: less lookahead than the flow needs
    assert plan.retime.decoder_lookahead < family.traits.decoder_lookahead
    assert family.retiming(0.75) is None  # slower speech: the pace input
    assert plan.max_frames == base.max_frames and torch.equal(plan.features, base.features)
    together = _fast_and_plain_alike(family, fast, plain)
    clauses = len(split_text(TEXT, family.count_tokens, 400))
    latent = family.frames_per_step * family.hifigan.hop_length
    assert abs(len(together["fast"]) - len(together["plain"]) / 1.5) <= clauses * latent


def test_bfloat16_runs_the_student_and_its_decoder_in_bfloat16_close_to_float32(
        tiny_config, tmp_path) -> None:
    """`--precision bfloat16` for a student: its linears, the teacher's streamed flow and
    HiFi-GAN keep bfloat16 weights; a step and a decoded window move only by bfloat16
    rounding."""
    from polyvox.models.joe_ar.family import load_student_family
    from polyvox.models.layers.attention import ContiguousKV

    path = tmp_path / "tiny.yaml"
    config = dataclasses.replace(tiny_config, teacher_latent="prior")
    path.write_text(yaml.safe_dump(config_to_dict(config)))
    plain, low = (load_student_family(path, seed=1) for _ in range(2))
    low.lower_precision(torch.bfloat16)
    linears = [m for m in low.flow_lm.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert all(b.dtype == torch.bfloat16 for b in low.hifigan.buffers())
    assert all(b.dtype == torch.bfloat16 for b in low.streamed_flow.parameters())
    latents = torch.randn(1, 24, plain.latent_dim, generator=torch.Generator().manual_seed(0))
    expected = plain.decode(latents * 0.5, plain.new_decoder_state())
    audio = low.decode(latents * 0.5, low.new_decoder_state())
    assert audio.dtype == torch.float32 and audio.shape == expected.shape
    error = float((audio - expected).norm() / expected.norm())
    assert 0 < error < 1e-1  # random latents through a bf16 flow and HiFi-GAN: ~6%
    ids = torch.tensor([1, 0, 20, 0, 31, 0, 2])
    outputs = []
    for family in (plain, low):
        kv = ContiguousKV(*family.kv_shape, dtype=torch.float32, device=torch.device("cpu"))
        family.prefill_tokens(ids, kv.next_positions(len(ids)), kv, None)
        kv.commit()
        outputs.append(kv.k.clone())  # the prompt's keys: the student's linears at work
    error = float((outputs[1] - outputs[0]).norm() / outputs[0].norm())
    assert 0 < error < 5e-2
