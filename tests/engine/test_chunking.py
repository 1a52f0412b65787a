"""Chunk sizing, split decoder batches and first-audio priority, in the real engine.

Chunks start small (time to first audio), then grow while the listener's buffer allows;
a family may cap the frames of one decoder call; while a request waits for its first
audio, streams with a long buffer wait a step. None of this may change the audio. (The
planner's rules themselves: test_planner.py.)
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch
from conftest import rel_error

from polyvox.config import EngineConfig
from polyvox.engine.costs import LinearCost
from polyvox.engine.engine import Engine, run_to_completion

pytest.importorskip("piper")

TEXTS = [
    "Hello world, this is the joe voice.",
    "Your appointment is on Tuesday at three, and the office opens at nine.",
    "Please hold while I transfer your call.",
    "The weather today is sunny with a light breeze from the west.",
]


def piper_engine(family, **overrides) -> Engine:
    engine = Engine(family, EngineConfig(**overrides))
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    return engine


def test_unset_chunking_takes_the_family_preference(family, model) -> None:
    resolved = EngineConfig().for_family(family)
    assert (resolved.first_chunk_frames, resolved.chunk_frames, resolved.max_chunk_frames) == (
        24, 32, 128)
    explicit = EngineConfig(first_chunk_frames=3, chunk_frames=12).for_family(family)
    assert (explicit.first_chunk_frames, explicit.chunk_frames, explicit.max_chunk_frames) == (
        3, 12, 128)
    pocket = EngineConfig().for_family(model)  # 2-frame first chunk, fixed chunks, no growth
    assert (pocket.first_chunk_frames, pocket.chunk_frames, pocket.max_chunk_frames) == (2, 4, 4)
    assert EngineConfig(chunk_frames=16).for_family(model).max_chunk_frames == 16
    assert Engine(family, EngineConfig()).config.chunk_frames == 32
    assert resolved.chaining == pocket.chaining == "chained"  # neither family prefers otherwise
    assert EngineConfig(chaining="pocket").for_family(model).chaining == "pocket"


def test_the_chained_context_window_takes_the_family_preference(family, monkeypatch) -> None:
    assert EngineConfig().for_family(family).context_window == 384  # no preference
    preferred = {**family.traits.preferred_settings, "context_window": 128}
    monkeypatch.setattr(family, "traits",
                        dataclasses.replace(family.traits, preferred_settings=preferred))
    assert EngineConfig().for_family(family).context_window == 128
    assert Engine(family, EngineConfig()).streams.config.context_window == 128
    assert EngineConfig(context_window=96).for_family(family).context_window == 96
    with pytest.raises(ValueError, match="context_window"):
        EngineConfig(context_window=16)  # less than two blocks of 16


def test_bad_chunking_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chunk_frames"):
        EngineConfig(chunk_frames=8, max_chunk_frames=4)
    with pytest.raises(ValueError, match="first_chunk_frames"):
        EngineConfig(first_chunk_frames=0)


def test_split_decoder_batches_give_the_same_audio(family, monkeypatch) -> None:
    calls: list[int] = []
    decode = family.decode

    def counting(latents, *args, **kwargs):
        calls.append(int(latents.shape[0]))
        return decode(latents, *args, **kwargs)

    outputs = []
    for budget in (None, 60):
        monkeypatch.setattr(family, "traits",
                            dataclasses.replace(family.traits, decoder_batch_frames=budget))
        monkeypatch.setattr(family, "decode", counting, raising=False)
        calls.clear()
        # NOTE: no step deadlines here (they depend on this machine's speed): only the
        # frame budget may split a decoder batch.
        engine = piper_engine(family, first_chunk_frames=8, chunk_frames=16, max_chunk_frames=16,
                              first_audio_step_seconds=1e9, max_step_seconds=1e9)
        for i, text in enumerate(TEXTS):
            engine.add_request(text, "default", family.make_params(seed=i), request_id=f"r{i}")
        outputs.append(run_to_completion(engine))
        assert engine.is_idle()
        if budget is None:
            assert max(calls) == len(TEXTS)  # all four first chunks in one call
        else:
            # 8 new + 10 lookahead (+ up to 10 history) frames per item: at most 3 fit in 60
            assert max(calls) <= 3 and len(calls) > 2
    for rid, audio in outputs[0].items():
        assert rel_error(outputs[1][rid], audio) <= 1e-5


def test_a_new_request_goes_before_streams_with_a_long_buffer(family) -> None:
    engine = piper_engine(family)
    engine.add_request(TEXTS[1], "default", family.make_params(seed=0), request_id="old")
    while engine.requests["old"].first_audio_time is None:
        engine.step()
    old = engine.requests["old"]
    old.first_audio_time = time.monotonic() + 5.0  # as if 5 s of audio were still buffered
    engine.add_request(TEXTS[0], "default", family.make_params(seed=1), request_id="new")
    decoded_old_before_new = False
    while engine.requests.get("new") is not None and \
            engine.requests["new"].first_audio_time is None:
        chunks = engine.step()
        decoded_old_before_new |= any(c.request_id == "old" and c.samples.numel() for c in chunks)
    assert not decoded_old_before_new
    # once the new request has audio, the old stream is decoded again
    before = old.progress.decoded
    for _ in range(10):
        engine.step()
    assert old.progress.decoded > before
    old.first_audio_time = time.monotonic()  # back to an honest clock
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()


def test_growing_chunks_equal_offline_synthesis(family) -> None:
    engine = piper_engine(family, first_chunk_frames=4, chunk_frames=8, max_chunk_frames=64)
    request = engine.add_request(TEXTS[3] + " " + TEXTS[1], "default",
                                 family.make_params(seed=7), request_id="g")
    sizes: list[int] = []
    parts: list[torch.Tensor] = []
    # a listener far ahead: every chunk after the first may take the biggest size
    while engine.requests:
        for chunk in engine.step():
            if chunk.samples.numel():
                parts.append(chunk.samples)
                sizes.append(chunk.samples.numel() // family.audio.samples_per_frame)
        if request.first_audio_time is not None:
            request.first_audio_time = time.monotonic() + 100.0
    assert sizes[0] == 4 and max(sizes) == 64
    expected = family.model.synthesize(TEXTS[3] + " " + TEXTS[1], seed=7)
    assert rel_error(torch.cat(parts), expected) <= 1e-4


def test_stage_costs_follow_measurements(family) -> None:
    engine = piper_engine(family)
    costs = engine.costs
    costs.clause = LinearCost(0.0, 10.0, 1)  # a wrong prior
    for seed in range(3):
        engine.add_request(TEXTS[1], "default", family.make_params(seed=seed),
                           request_id=f"a{seed}")
        run_to_completion(engine)
    assert costs.clause(1) < 9.0 and costs.decode(32) < 0.1


def test_listeners_behind_real_time_are_counted(family) -> None:
    engine = piper_engine(family)
    engine.add_request(TEXTS[3], "default", family.make_params(seed=0), request_id="a")
    while engine.requests["a"].first_audio_time is None:
        engine.step()
    assert engine.num_behind == 0  # synthesis runs faster than real time here
    request = engine.requests["a"]
    heard = []  # what the load model is told, step by step
    observe = engine.load.observe_step
    engine.load.observe_step = lambda *args: (heard.append(args[3]), observe(*args))
    request.first_audio_time -= 30.0  # as if the listener had waited 30 s for this audio
    engine.step()
    assert engine.num_behind == 1 and engine.num_fell_behind == 1
    engine.step()
    # still behind (admission holds new streams back), but the load model heard of the
    # stall once: the steps after it, at whatever load, did not make it
    assert engine.num_behind == 1 and engine.num_fell_behind == 0
    assert heard == [1, 0]
    run_to_completion(engine)
    engine.step()
    assert engine.num_behind == 0  # finished streams are not behind anyone


def test_a_listener_that_ran_dry_before_its_next_chunk_is_counted_behind(family) -> None:
    """A stall that a big chunk hides: the listener's audio ran out before the step's
    chunk came, so its player stalled, though after the step its audio is ahead of its
    clock again. Admission and the load model must still hear of it."""
    engine = piper_engine(family)
    engine.add_request(TEXTS[3], "default", family.make_params(seed=0), request_id="a")
    request = engine.requests["a"]
    while request.first_audio_time is None:
        engine.step()
    rate = family.audio.sample_rate
    samples = request.num_samples
    request.first_audio_time -= request.audio_seconds(rate) + 0.02  # ran dry 20 ms ago
    while request.num_samples == samples:
        engine.step()
    assert request.slack(time.monotonic(), rate) > 0  # the next chunk refilled it
    assert engine.num_behind == 1 and engine.num_fell_behind == 1
    engine.step()
    assert engine.num_behind == 0  # on time since
