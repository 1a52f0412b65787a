"""First audio under a burst of new requests.

Requests that arrive together are prefilled in one packed call as far as the listeners
already playing can wait (up to `max_step_seconds`), not one clause per short step: the
burst's last request hears its first audio sooner. A request that has already waited
`first_audio_wait_seconds`, or would have by the end of one more engine step, takes its
first chunk as soon as a frame is ready; a clause takes its first AR step in the step
that prefills it. These run the real engine; the planner's other rules are tested on
synthetic snapshots (test_planner.py).
"""

from __future__ import annotations

import time

import pytest
import torch
from conftest import make_engine, params, rel_error

from polyvox.engine.engine import run_to_completion
from polyvox.engine.costs import LinearCost

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
    costs = engine.costs
    costs.step = LinearCost(0.0, 0.0, 1)
    costs.prefill = LinearCost(0.0, seconds / (2 * tokens), 1)
    assert costs.prefill(3 * tokens) > engine.config.max_step_seconds


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
    engine.costs.engine_step = step_seconds
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
    engine.costs.decode = LinearCost(10.0, 10.0, 1)  # no chunk fits any deadline
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
