"""KV pressure, long texts, and pool integrity under random operations."""

from __future__ import annotations

import pytest
import torch
from conftest import TEXTS, make_engine, params, rel_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyvox.engine.engine import EngineError, run_to_completion
from polyvox.request import Status


@pytest.mark.parametrize("variant", [{}, {"graphs": "shaped", "overlap": True}],
                         ids=["plain", "shaped+overlap"])
def test_pool_for_four_streams_serves_twelve(model, voice, variant) -> None:
    """KV pressure: preemption by swapping (also with fixed shapes and the overlapped loop,
    whose in-flight steps must survive a preemption)."""
    texts = [TEXTS[i % len(TEXTS)] + " " + TEXTS[(i + 3) % len(TEXTS)] for i in range(12)]
    reference_engine = make_engine(model, voice, schedule="sequential")
    for i, text in enumerate(texts):
        reference_engine.add_request(text, "chirp", params(i), request_id=f"r{i}")
    reference = run_to_completion(reference_engine)

    voice_blocks = -(-voice.length // 16)
    per_stream = max(-(-(model.count_tokens(t) + 200) // 16) for t in texts)
    engine = make_engine(model, voice, num_kv_blocks=voice_blocks + 4 * per_stream // 2,
                         num_decoder_slots=12, **variant)
    preempted = 0
    for i, text in enumerate(texts):
        engine.add_request(text, "chirp", params(i), request_id=f"r{i}")
    audio: dict[str, list[torch.Tensor]] = {}
    while engine.requests:
        for chunk in engine.step():
            assert chunk.error is None, chunk.error
            audio.setdefault(chunk.request_id, []).append(chunk.samples)
        preempted += sum(r.status is Status.PREEMPTED for r in engine.streams.running)
        assert engine.check_integrity()
    assert preempted > 0, "the pool was never short: the test does not exercise preemption"
    for i in range(12):
        assert rel_error(torch.cat(audio[f"r{i}"]), reference[f"r{i}"]) <= 1e-4


def test_streamed_chunks_equal_offline_decoding(model, voice) -> None:
    engine = make_engine(model, voice, first_chunk_frames=1, chunk_frames=3)
    latents: dict[str, list[torch.Tensor]] = {}
    advance = engine._advance

    def recording_advance(request, latent, logit):  # type: ignore[no-untyped-def]
        before = len(request.pending_latents)
        advance(request, latent, logit)
        if len(request.pending_latents) > before:
            latents.setdefault(request.request_id, []).append(latent)

    engine._advance = recording_advance  # type: ignore[method-assign]
    for i in range(6):
        engine.add_request(TEXTS[i] + " " + TEXTS[i + 1], "chirp", params(i), request_id=f"r{i}")
    streamed = run_to_completion(engine)
    for rid, frames in latents.items():
        offline = model.decode(torch.stack(frames)[None], model.new_decoder_state())[0]
        fade = model.traits.fade_in_samples
        offline[:fade] *= torch.linspace(0, 1, fade)
        assert rel_error(streamed[rid], offline) <= 1e-5


def test_long_text_streams_with_bounded_kv(model, voice) -> None:
    words = " ".join(TEXTS).split()
    text = " ".join(words[i % len(words)] for i in range(2000))
    text = text.replace("dog.", "dog,")  # mostly long sentences: exercises comma splitting too
    engine = make_engine(model, voice, context_window=96, max_clause_tokens=40)
    resets = 0
    reset = engine.slots.reset

    def counting_reset(slot: int) -> None:
        nonlocal resets
        resets += 1
        reset(slot)

    engine.slots.reset = counting_reset  # type: ignore[method-assign]
    # EOS fires early on every clause (random weights otherwise run to the length cap).
    request = engine.add_request(text, "chirp", params(0, eos_threshold=-3.0), request_id="long")
    clauses = len(request.pending_clauses)
    # The window's worth, plus the clause being generated (tokens + frames), plus partial
    # blocks at both ends.
    longest_clause = 40 + 6 + 3 + 1
    window_blocks = -(-96 // 16) + -(-longest_clause // 16) + 2
    max_own = 0
    samples = 0
    while engine.requests:
        for chunk in engine.step():
            samples += chunk.samples.numel()
        max_own = max(max_own, len(request.table.own_blocks()))
    assert clauses > 20
    assert request.status is Status.FINISHED
    assert max_own <= window_blocks
    assert resets == 1  # only when the slot was first handed out
    assert samples > clauses * model.audio.samples_per_frame


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(["add", "stream", "text", "end", "step", "abort"]),
                          st.integers(0, 1000)), min_size=200, max_size=200))
def test_random_operations_keep_pools_consistent(model, voice, operations) -> None:
    engine = make_engine(model, voice, num_kv_blocks=60, num_decoder_slots=6, max_running=4,
                         chunk_frames=2)
    ids: list[str] = []
    for index, (op, value) in enumerate(operations):
        live = [rid for rid in ids if rid in engine.requests]
        if op == "add":
            rid = f"r{index}"
            engine.add_request(TEXTS[value % len(TEXTS)], ["default", "chirp"][value % 2],
                               params(value), request_id=rid)
            ids.append(rid)
        elif op == "stream":
            rid = f"r{index}"
            engine.add_request("", "chirp", params(value), request_id=rid, text_complete=False)
            ids.append(rid)
        elif op in ("text", "end") and live:
            rid = live[value % len(live)]
            try:
                if op == "text":
                    engine.add_text(rid, TEXTS[value % len(TEXTS)] + " ")
                else:
                    engine.finish_text(rid)
            except EngineError:
                pass  # that request already had all its text
        elif op == "abort" and live:
            engine.abort(live[value % len(live)])
        else:
            engine.step()
        assert engine.check_integrity()
    for rid in list(engine.requests):
        if not engine.requests[rid].text_complete:
            engine.finish_text(rid)
    run_to_completion(engine, max_steps=20000)
    assert engine.check_integrity() and engine.is_idle()
    assert not engine.requests
