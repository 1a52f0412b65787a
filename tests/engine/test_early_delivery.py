"""Audio leaves the engine as soon as its decoder call is done (`Engine.on_chunks`, set by
AsyncEngine): a listener about to run dry does not wait for the step's other decoder
calls, e.g. a tick's batch of full chunks for listeners with time to spare."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from conftest import make_engine, params

from polyvox.engine.runner import DecodeItem

TEXTS = ["The quick brown fox jumps over the lazy dog.",
         "Hello there, how are you today?",
         "A third request with its own words to say."]


def test_each_decoder_call_is_handed_over_as_soon_as_it_is_done(model) -> None:
    # 8-frame chunks: nothing is decoded while the three streams gather their first frames.
    engine = make_engine(model, first_chunk_frames=8, chunk_frames=8,
                         first_audio_wait_seconds=None)
    for index in range(3):
        engine.add_request(TEXTS[0], "default", params(index, eos_threshold=float("inf")),
                           request_id=f"r{index}")
    requests = [engine.requests[f"r{index}"] for index in range(3)]
    while not all(len(r.pending_latents) >= 4 for r in requests):
        engine.step()
    # Two shapes: a 1-frame chunk, then 4-frame chunks -> two decoder calls, in that order.
    items = [DecodeItem(requests[0], 1)] + [DecodeItem(r, 4) for r in requests[1:]]
    calls: list[list[int]] = []
    pcm = engine.runner.decode(items, on_batch=lambda indices, rows: calls.append(indices))
    assert calls == [[0], [1, 2]]
    assert [row.wait().numel() for row in pcm] == [
        item.num_frames * model.audio.samples_per_frame for item in items]
    for request in requests:
        engine.abort(request.request_id)
    assert engine.is_idle() and engine.check_integrity()


def test_audio_handed_over_early_equals_the_stepped_audio(model, monkeypatch) -> None:
    # The engine plans from the clock (listeners' buffers, measured step costs): a clock
    # that ticks per reading gives both runs one schedule, however loaded the machine is.
    import polyvox.engine.engine as engine_module

    def run(early: bool) -> dict[str, torch.Tensor]:
        ticks = iter(range(1, 10**9))
        clock = lambda: next(ticks) * 1e-3  # noqa: E731
        monkeypatch.setattr(engine_module, "time", SimpleNamespace(perf_counter=clock,
                                                                   monotonic=clock))
        engine = make_engine(model, first_chunk_frames=1, chunk_frames=4)
        handed: dict[str, list[torch.Tensor]] = {}
        returned: list = []
        if early:
            engine.on_chunks = lambda chunks: [
                handed.setdefault(c.request_id, []).append(c.samples) for c in chunks]
        for index, text in enumerate(TEXTS):
            engine.add_request(text, "default", params(index),
                               request_id=f"r{index}")
        while engine.requests:
            returned += engine.step()
        for chunk in returned:
            handed.setdefault(chunk.request_id, []).append(chunk.samples)
        if early:  # step() itself returned only the endings
            assert all(chunk.is_last or not chunk.samples.numel() for chunk in returned)
        assert engine.is_idle() and engine.check_integrity()
        return {rid: torch.cat(parts) for rid, parts in handed.items()}

    early, stepped = run(True), run(False)
    assert early.keys() == stepped.keys() == {"r0", "r1", "r2"}
    for rid in early:
        assert torch.equal(early[rid], stepped[rid])
