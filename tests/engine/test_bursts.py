"""First audio under a burst of new requests.

Requests that arrive together are prefilled in one packed call as far as the listeners
already playing can wait (up to `max_step_seconds`), not one clause per short step: the
burst's last request hears its first audio sooner. What the scheduler believes a prefill
costs is learned from the engine's timings, without the first (cold) run, with a fixed
part per call. A request that has already waited `first_audio_wait_seconds`, or would
have by the end of one more engine step, takes its first chunk as soon as a frame is
ready; a clause takes its first AR step in the step that prefills it. Listeners who could
not wait for the next step are served however short the step's budget.
"""

from __future__ import annotations

import time

import pytest
import torch
from conftest import make_engine, params, rel_error

from polyvox.engine.engine import run_to_completion
from polyvox.engine.scheduler import Scheduler, StageCosts

CLAUSE = "The quick brown fox jumps over the lazy dog."


def _record_prefills(engine) -> list[int]:
    """Wrap the runner: how many clauses each prefill call packed."""
    sizes: list[int] = []
    prefill = engine.runner.prefill

    def recording(items, *args, **kwargs):
        if items:
            sizes.append(len(items))
        return prefill(items, *args, **kwargs)

    engine.runner.prefill = recording
    return sizes


def _costs_for_two_clauses_in(engine, seconds: float) -> None:
    """Stage costs under which two of CLAUSE's prefills take `seconds`, three more than
    max_step_seconds (CLAUSE has more than 8 tokens), and an AR step nothing."""
    tokens = engine.family.count_tokens(CLAUSE)
    assert tokens > 8
    costs = engine.scheduler.costs
    costs.step = 0.0
    costs.prefill_token = seconds / (2 * tokens + StageCosts.PREFILL_CALL_TOKENS)
    assert costs.prefill_seconds(3 * tokens) > engine.config.max_step_seconds


def _endless_streams(engine, count: int) -> list:
    """`count` requests r0, r1, ... of CLAUSE that never end on their own (no EOS)."""
    for index in range(count):
        engine.add_request(CLAUSE, "default", params(index, eos_threshold=float("inf")),
                           request_id=f"r{index}")
    return [engine.requests[f"r{index}"] for index in range(count)]


def _buffer(stream, seconds: float, rate: int, now: float | None = None) -> None:
    """Shift the clock of `stream`'s listener so that it has `seconds` of audio buffered."""
    now = time.monotonic() if now is None else now
    stream.first_audio_time = now + seconds - stream.audio_seconds(rate)


def test_a_burst_packs_its_first_clauses_beyond_the_first_audio_step(model) -> None:
    engine = make_engine(model)
    config = engine.config
    assert config.first_audio_step_seconds < 0.2 < config.max_step_seconds
    _costs_for_two_clauses_in(engine, 0.2)
    sizes = _record_prefills(engine)
    for index in range(3):
        engine.add_request(CLAUSE, "default", params(index), request_id=f"r{index}")
    engine.step()
    # Nobody is listening yet: two clauses fit in max_step_seconds (with a one-clause step
    # budget, only the first would have run).
    assert sizes == [2]
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()


@pytest.mark.parametrize("buffered, packed", [(0.2, 1), (1.0, 2)])
def test_listeners_already_playing_bound_the_packing(model, buffered: float,
                                                     packed: int) -> None:
    """A listener with 0.2 s buffered leaves the step 0.15 s (one clause); one with 1 s
    leaves max_step_seconds (two clauses)."""
    engine = make_engine(model)
    engine.add_request(CLAUSE, "default", params(9, eos_threshold=float("inf")),
                       request_id="playing")
    playing = engine.requests["playing"]
    while playing.first_audio_time is None:
        engine.step()
    for index in range(3):
        engine.add_request(CLAUSE, "default", params(index), request_id=f"r{index}")
    _costs_for_two_clauses_in(engine, 0.2)
    _buffer(playing, buffered, model.audio.sample_rate)
    sizes = _record_prefills(engine)
    engine.step()
    assert sizes[:1] == [packed]
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()


def test_stage_costs_forget_the_cold_run_and_price_a_call_and_its_tokens() -> None:
    costs = StageCosts()
    prior = costs.step
    costs.observe("step", 5.0, 1)  # the first, cold run: kernels chosen, buffers allocated
    assert costs.step == prior
    costs.observe("step", 0.03, 1)
    assert prior < costs.step < 0.03

    def measured(tokens: int) -> float:  # a fixed part and a part per token
        return 0.010 + 0.00055 * tokens

    for _ in range(60):
        for tokens in (10, 40, 320):
            costs.observe_prefill(measured(tokens), tokens)
    for tokens in (10, 40, 320):
        assert costs.prefill_seconds(tokens) == pytest.approx(measured(tokens), rel=0.3)


# NOTE: "waited" shifts the request's arrival; -60 s keeps it fresh however slow the box.
@pytest.mark.parametrize("waited, first_frames", [(-60.0, 2), (10.0, 1)])
def test_a_request_kept_waiting_hears_its_first_frame_at_once(model, waited: float,
                                                              first_frames: int) -> None:
    """A first chunk is 2 frames, unless the request has waited `first_audio_wait_seconds`
    already: then it is the one frame ready. The audio is the same either way."""
    audio = {}
    for wait in (None, 0.1):
        engine = make_engine(model, first_chunk_frames=2, chunk_frames=4,
                             first_audio_wait_seconds=wait)
        engine.add_request(CLAUSE, "default", params(5, eos_threshold=float("inf")),
                           request_id="r")
        engine.requests["r"].arrival -= waited
        chunks = []
        while not chunks:
            chunks = [chunk for chunk in engine.step() if chunk.samples.numel()]
        expected = first_frames if wait is not None else 2
        assert chunks[0].samples.numel() == expected * model.audio.samples_per_frame
        rest = run_to_completion(engine)
        audio[wait] = torch.cat([chunks[0].samples, rest["r"]])
        assert engine.is_idle() and engine.check_integrity()
    assert rel_error(audio[0.1], audio[None]) <= 1e-5


@pytest.mark.parametrize("num_behind, overloaded", [(0, False), (1, False), (2, True)])
def test_one_straggler_does_not_unprotect_the_others(model, num_behind: int,
                                                     overloaded: bool) -> None:
    """Under overload (a listener behind with frames to decode) nobody's chunk is put
    first. One stream a little behind among four is no overload: the on-time listeners
    keep their protection. More than a quarter of them behind is."""
    engine = make_engine(model, first_chunk_frames=1, chunk_frames=8, max_chunk_frames=8)
    streams = _endless_streams(engine, 4)
    while not all(s.first_audio_time is not None and s.pending_latents for s in streams):
        engine.step()
    now = time.monotonic()
    for index, stream in enumerate(streams):
        _buffer(stream, -0.1 if index < num_behind else 1.0, model.audio.sample_rate, now)
    engine.scheduler._step_budget()
    assert engine.scheduler.overloaded is overloaded
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()


def test_a_burst_takes_its_first_chunks_together(model) -> None:
    """Requests that arrived a moment apart: once the first of them has waited
    `first_audio_wait_seconds`, all that await first audio take the frame that is ready
    in the same step (one decoder call), not 2-frame chunks a step later for the others."""
    engine = make_engine(model, first_chunk_frames=2, chunk_frames=4,
                         first_audio_wait_seconds=0.1)
    _endless_streams(engine, 3)
    # r0 has waited long; r1 and r2 stay fresh however slow the box (arrival moved ahead).
    engine.requests["r0"].arrival -= 10.0
    for index in (1, 2):
        engine.requests[f"r{index}"].arrival += 60.0
    firsts: dict[str, int] = {}
    while len(firsts) < 3:
        for chunk in engine.step():
            if chunk.samples.numel() and chunk.request_id not in firsts:
                firsts[chunk.request_id] = chunk.samples.numel()
    assert set(firsts.values()) == {model.audio.samples_per_frame}
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()


def test_a_clause_takes_its_first_ar_step_in_its_prefill_step(model) -> None:
    """A lone request with 1-frame first chunks hears audio from its very first engine step:
    prefill, AR step and decoder call, not a prefill step and then an AR step."""
    engine = make_engine(model, first_chunk_frames=1, chunk_frames=4)
    engine.add_request(CLAUSE, "default", params(3), request_id="r")
    chunks = [chunk for chunk in engine.step() if chunk.samples.numel()]
    assert [chunk.request_id for chunk in chunks] == ["r"]
    assert chunks[0].samples.numel() == model.audio.samples_per_frame
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()


# NOTE: the request's arrival is moved 30 s ahead: only the predicted step can make it due.
@pytest.mark.parametrize("step_seconds, first_frames", [(0.0, 2), (60.0, 1)])
def test_one_more_step_past_the_wait_takes_the_frame_ready(model, step_seconds: float,
                                                           first_frames: int) -> None:
    """Whether a first chunk waits for its second frame depends on when that frame would
    come: if one more engine step (as the engine has measured them) ends past
    `first_audio_wait_seconds`, the first chunk is the frame ready now."""
    engine = make_engine(model, first_chunk_frames=2, chunk_frames=4,
                         first_audio_wait_seconds=0.1)
    engine.scheduler.costs.engine_step = step_seconds
    engine.add_request(CLAUSE, "default", params(5, eos_threshold=float("inf")),
                       request_id="r")
    engine.requests["r"].arrival += 30.0
    chunks = []
    while not chunks:
        chunks = [chunk for chunk in engine.step() if chunk.samples.numel()]
    assert chunks[0].samples.numel() == first_frames * model.audio.samples_per_frame
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()


def test_overdue_first_chunks_are_not_split_by_the_step_deadline(model) -> None:
    """Requests kept waiting take their first chunks in one decoder call even when the
    scheduler believes decoding costs far more than the step may take."""
    engine = make_engine(model, first_chunk_frames=2, chunk_frames=4,
                         first_audio_wait_seconds=0.1)
    for stream in _endless_streams(engine, 3):
        stream.arrival -= 10.0
    engine.scheduler.costs.decode_frame = 10.0  # no chunk fits any deadline
    first_step: dict[str, int] = {}
    steps = 0
    while len(first_step) < 3:
        steps += 1
        for chunk in engine.step():
            if chunk.samples.numel():
                first_step.setdefault(chunk.request_id, steps)
    assert len(set(first_step.values())) == 1
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()


def test_listeners_who_cannot_wait_a_step_all_decode_however_short_the_budget(model) -> None:
    """Four listeners with 80 ms buffered, an AR step believed to take 100 ms: none can
    wait for the next step, so all four decode now, though the step's budget (the least
    buffer less the delivery margin: 30 ms) holds one chunk at most."""
    engine = make_engine(model, first_chunk_frames=1, chunk_frames=4)
    streams = _endless_streams(engine, 4)
    while not all(s.first_audio_time is not None and s.pending_latents for s in streams):
        engine.step()
    scheduler = engine.scheduler
    scheduler.costs.step, scheduler.costs.decode_frame = 0.1, 0.02
    now = time.monotonic()
    for stream in streams:
        _buffer(stream, 0.08, model.audio.sample_rate, now)
    scheduler.step_budget = scheduler._step_budget()
    assert scheduler.step_budget < 0.04 and not scheduler.overloaded
    scheduler.deadline = time.monotonic() + scheduler.step_budget
    assert {item.request.request_id for item in scheduler.plan_decodes()} == {
        s.request_id for s in streams}
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()


FRESH_SECONDS = Scheduler.FRESH_SECONDS


@pytest.mark.parametrize("fresh_seconds, others_decoded", [(FRESH_SECONDS, 1), (0.0, 3)])
def test_a_fresh_listener_keeps_room_for_its_next_chunk(model, monkeypatch,
                                                        fresh_seconds: float,
                                                        others_decoded: int) -> None:
    """A fresh stream (less than FRESH_SECONDS of audio out) with 50 ms buffered and no
    frame ready: its next chunk needs the next step soon, so the others' chunks, due on the
    tick but with seconds to spare, wait (one decodes: a step decodes at least one chunk).
    With no stream counted as fresh, all three decode."""
    monkeypatch.setattr(Scheduler, "FRESH_SECONDS", fresh_seconds)
    engine = make_engine(model, first_chunk_frames=1, chunk_frames=4)
    streams = _endless_streams(engine, 4)
    fresh, others = streams[0], streams[1:]
    while not all(s.first_audio_time is not None for s in streams):
        engine.step()
    scheduler, rate = engine.scheduler, model.audio.sample_rate

    # The others gather frames off the tick; the fresh stream decodes each frame it gets.
    monkeypatch.setattr(Scheduler, "_waits_for_tick",
                        lambda self, slack: slack is not None and slack > 1.0)
    for _ in range(5):
        for stream in others:
            _buffer(stream, 5.0, rate)
        _buffer(fresh, 0.05, rate)
        engine.step()
    assert not fresh.pending_latents and fresh.audio_seconds(rate) < FRESH_SECONDS
    assert all(len(stream.pending_latents) >= 4 for stream in others)
    monkeypatch.setattr(Scheduler, "_waits_for_tick", lambda self, slack: None)  # the tick
    scheduler.costs.step = 0.1
    _buffer(fresh, 0.05, rate)
    scheduler.deadline = time.monotonic() + 10.0
    chosen = scheduler.plan_decodes()
    assert len(chosen) == others_decoded
    assert fresh.is_generating
    run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()
