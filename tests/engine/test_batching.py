"""Batched and interleaved serving give every request what it would get alone."""

from __future__ import annotations

import time

import pytest
import torch
from conftest import TEXTS, make_engine, params, rel_error

from polyvox.engine.engine import Engine, run_to_completion


def one_at_a_time(model, voice, texts, seeds, voices, **config):
    engine = make_engine(model, voice, schedule="sequential", **config)
    for i, (text, seed, name) in enumerate(zip(texts, seeds, voices)):
        engine.add_request(text, name, params(seed), request_id=f"r{i}")
    return run_to_completion(engine)


@pytest.mark.parametrize("schedule", ["batched", "interleaved"])
def test_concurrent_requests_equal_one_at_a_time(model, voice, schedule) -> None:
    texts = [TEXTS[i % len(TEXTS)] for i in range(16)]
    seeds = list(range(16))
    voices = ["chirp" if i % 3 else "default" for i in range(16)]
    reference = one_at_a_time(model, voice, texts, seeds, voices)

    engine = make_engine(model, voice, schedule=schedule)
    audio: dict[str, list[torch.Tensor]] = {}
    aborted = "r5"
    pending = list(range(16))
    step = 0
    while pending or engine.requests:
        # Arrivals spread over the first steps: two new requests every other step.
        if pending and step % 2 == 0:
            for i in pending[:2]:
                engine.add_request(texts[i], voices[i], params(seeds[i]), request_id=f"r{i}")
            pending = pending[2:]
        if step == 12:
            engine.abort(aborted)
            assert engine.check_integrity()
        for chunk in engine.step():
            audio.setdefault(chunk.request_id, []).append(chunk.samples)
        step += 1
        assert step < 5000
    assert engine.is_idle() and engine.check_integrity()
    for i in range(16):
        rid = f"r{i}"
        if rid == aborted:
            continue
        assert rel_error(torch.cat(audio[rid]), reference[rid]) <= 1e-4, rid


def test_pocket_chaining_equals_the_family_reference(model, voice) -> None:
    """Engine in pocket-compatible mode == PocketTTS.synthesize (itself == pocket-tts)."""
    texts = [TEXTS[6] + " " + TEXTS[3], TEXTS[0], TEXTS[4]]
    engine = make_engine(model, voice, chaining="pocket")
    for i, text in enumerate(texts):
        engine.add_request(text, "chirp", params(i), request_id=f"r{i}")
    out = run_to_completion(engine)
    for i, text in enumerate(texts):
        expected = model.synthesize(text, voice, params(i))
        assert rel_error(out[f"r{i}"], expected) <= 1e-4


def test_seeds_isolate_requests(model) -> None:
    """Same text, different seeds: different audio; same seed: same audio."""
    engine = make_engine(model)
    engine.add_request(TEXTS[1], "default", params(1), request_id="a")
    engine.add_request(TEXTS[1], "default", params(1), request_id="b")
    engine.add_request(TEXTS[1], "default", params(2), request_id="c")
    out = run_to_completion(engine)
    assert rel_error(out["a"], out["b"]) <= 1e-5
    assert out["a"].shape != out["c"].shape or rel_error(out["a"], out["c"]) > 1e-2


def test_voice_blocks_are_stored_once(model, voice) -> None:
    engine = make_engine(model, voice)
    voice_blocks = len(engine.voices["chirp"].table.blocks)
    assert voice_blocks > 0
    used_before = engine.blocks.num_used
    for i in range(6):
        engine.add_request(TEXTS[0], "chirp", params(i), request_id=f"r{i}")
    engine.step()  # admits and prefills all six
    assert all(engine.blocks.ref_counts[b] == 7 for b in engine.voices["chirp"].table.blocks)
    own = sum(len(r.table.own_blocks()) for r in engine.streams.running)
    assert engine.blocks.num_used == used_before + own
    run_to_completion(engine)
    assert engine.is_idle()


def _staggered_decoder_calls(model, buffered: bool, monkeypatch) -> tuple[list[int], dict]:
    """Four streams joining one AR step apart (each at its own chunk phase): the batch
    sizes of the decoder calls over 16 steps of steady state, and everyone's audio.
    Listeners have 100 s buffered, or 0.1 s (nothing to spare for waiting)."""
    calls: list[int] = []
    decode = model.decode

    def counting(latents, state, *args, **kwargs):
        calls.append(int(latents.shape[0]))
        return decode(latents, state, *args, **kwargs)

    monkeypatch.setattr(model, "decode", counting, raising=False)
    engine = make_engine(model, first_audio_step_seconds=1e9, max_step_seconds=1e9)
    audio: dict[str, list[torch.Tensor]] = {}
    text = TEXTS[6] + " " + TEXTS[3]

    def step() -> None:
        now, rate = time.monotonic(), model.audio.sample_rate
        for request in engine.requests.values():
            if request.first_audio_time is not None:  # set the listener's buffer
                spare = 100.0 if buffered else 0.1
                request.first_audio_time = now - request.audio_seconds(rate) + spare
        for chunk in engine.step():
            audio.setdefault(chunk.request_id, []).append(chunk.samples)

    for i in range(4):
        engine.add_request(text, "default", params(i, eos_threshold=float("inf")),
                           request_id=f"r{i}")
        step()
    for _ in range(20):
        step()
    calls.clear()
    for _ in range(16):
        step()
    window = list(calls)
    monkeypatch.undo()
    for request in engine.requests.values():
        request.first_audio_time = time.monotonic()  # back to an honest clock
    for rid, samples in run_to_completion(engine).items():
        audio.setdefault(rid, []).append(samples)
    return window, {rid: torch.cat(parts) for rid, parts in audio.items()}


def test_a_stream_with_time_to_spare_is_not_left_waiting_for_a_tick_that_never_comes(
        model) -> None:
    """The tick's clock is AR steps. Once no stream generates (the last one's text is all
    spoken, only its final frames wait to be decoded), the clock stops: those frames must
    be decoded anyway, however long the listener's buffer (found by the random-operations
    test: a request left RUNNING forever with its last frames pending)."""
    engine = make_engine(model, chunk_frames=4, first_audio_step_seconds=1e9,
                         max_step_seconds=1e9)
    engine.add_request(TEXTS[0], "default", params(0, eos_threshold=float("inf")),
                       request_id="a")
    request = engine.requests["a"]
    rate = model.audio.sample_rate

    def step() -> None:
        if request.first_audio_time is not None:  # a listener with 100 s buffered
            request.first_audio_time = time.monotonic() - request.audio_seconds(rate) + 100
        engine.step()

    for _ in range(200):
        step()
        if request.first_audio_time is not None and len(request.pending_latents) >= 2:
            break  # frames held back for the tick
    else:
        raise AssertionError("the stream never waited for the tick")
    Engine._end_clause(request)  # as at its EOS, with no text left: nothing generates
    request.pending_clauses.clear()
    for _ in range(20):
        if "a" not in engine.requests:
            break
        step()
    assert "a" not in engine.requests and engine.is_idle()


def test_streams_with_time_to_spare_decode_together_on_the_tick(model, monkeypatch) -> None:
    together, audio = _staggered_decoder_calls(model, True, monkeypatch)
    # one call per tick (every 4 AR steps) with all four streams
    assert together == [4, 4, 4, 4], together
    apart, audio_apart = _staggered_decoder_calls(model, False, monkeypatch)
    # listeners with little buffered never wait for the tick: frames are decoded as they
    # come (a call nearly every step)
    assert len(apart) >= 12, apart
    text = TEXTS[6] + " " + TEXTS[3]
    for i in range(4):
        alone = make_engine(model)
        alone.add_request(text, "default", params(i, eos_threshold=float("inf")),
                          request_id="x")
        expected = run_to_completion(alone)["x"]
        assert rel_error(audio[f"r{i}"], expected) <= 1e-4
        assert rel_error(audio_apart[f"r{i}"], expected) <= 1e-4
