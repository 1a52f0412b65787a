"""The planner's decisions on synthetic snapshots: tables of streams, one `now`, a cost
model with known figures. No engine, no clock, no model: the planner is a pure function
of what it is shown."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from polyvox.engine.baselines import InterleavedPlanner, SequentialPlanner
from polyvox.engine.costs import LinearCost, StageCosts
from polyvox.engine.planner import BatchedPlanner
from polyvox.engine.plans import Rules, StreamView, View

NOW = 1000.0
FRAME = 0.08  # 12.5 frames a second, as Pocket
RULES = Rules(autoregressive=True, frame_seconds=FRAME, first_chunk=2, chunk=4,
              max_chunk=16, min_chunk=1)


def stream(name: str, buffered: float | None = 1.0, *, ready: int = 0,
           generating: bool = True, heard: float = 2.0, waited: float = 0.0,
           prefill: int | None = None, clause_end: int | None = None, rest: int = 0,
           running: bool = True, has_work: bool = True) -> StreamView:
    """A stream named `name` whose listener has `buffered` seconds of audio left (None:
    awaits its first audio) after hearing `heard` seconds; it arrived `waited` s ago."""
    first = None if buffered is None else NOW + buffered - heard
    return StreamView(name, NOW - waited, first, heard if buffered is not None else 0.0,
                      running, has_work, generating, prefill, ready, clause_end, 0, rest)


def costs(*, step: tuple[float, float] = (0.0, 0.0), decode: tuple[float, float] = (0.0, 0.0),
          prefill: tuple[float, float] = (0.0, 0.0), piece: tuple[float, float] = (0.0, 0.0),
          clause: tuple[float, float] = (0.0, 0.0), engine_step: float = 0.0) -> StageCosts:
    """A cost model with these (per call, per unit) figures, nothing learned."""
    model = StageCosts()
    model.step, model.decode = LinearCost(*step, 1), LinearCost(*decode, 1)
    model.prefill, model.piece = LinearCost(*prefill, 1), LinearCost(*piece, 1)
    model.clause, model.engine_step = LinearCost(*clause, 1), engine_step
    return model


def plan(streams, rules=RULES, model=None, stepped=True, ar_steps=1, planner=None):
    """Both phases on the same snapshot; returns (work, {name: frames decoded})."""
    planner = planner or BatchedPlanner(rules)
    model = model or costs()
    view = View(tuple(streams), ar_steps, stepped)
    work = planner.plan_work(view, NOW, model)
    chunks = planner.plan_decodes(view, NOW, model, work)
    return work, {chunk.key: chunk.frames for chunk in chunks}


# --- the step's budget and overload ------------------------------------------------------

@pytest.mark.parametrize("streams, budget", [
    ([stream("a", 0.2, ready=1), stream("b", 3.0, ready=1)], 0.15),  # least buffer - margin
    ([stream("a", 0.2, ready=0), stream("b", 3.0, ready=1)], 0.25),  # no frames: not counted
    ([stream("a", -0.5, ready=1), stream("b", 0.1, ready=1)], 0.05),  # behind: not counted
    ([stream("a", 0.2, ready=1), stream("n", None)], 0.15),  # first audio awaited: short
    ([stream("a", 0.01, ready=1)], 0.0),  # never negative
    ([], 0.25),
])
def test_the_step_budget_is_the_least_on_time_buffer_with_frames_waiting(streams, budget):
    work, _ = plan(streams)
    assert work.budget == pytest.approx(budget)
    assert work.deadline == pytest.approx(NOW + budget)


@pytest.mark.parametrize("num_behind, overloaded", [(0, False), (1, False), (2, True)])
def test_one_straggler_does_not_unprotect_the_others(num_behind: int, overloaded: bool):
    """Overload is more than a quarter of the listeners behind with frames to decode."""
    streams = [stream(f"s{i}", -0.1 if i < num_behind else 1.0, ready=8) for i in range(4)]
    work, _ = plan(streams)
    assert work.overloaded is overloaded


# --- prefill -------------------------------------------------------------------------------

@pytest.mark.parametrize("playing, packed", [(None, 2), (0.2, 1), (1.0, 2), (5.0, 2)])
def test_a_burst_packs_its_clauses_as_far_as_playing_listeners_can_wait(playing, packed):
    """Three new requests of 10 tokens; two cost 0.2 s, three 0.3 s (over max_step). With
    nobody playing, or a listener with 1 s buffered, two pack into one call; a listener
    with 0.2 s buffered leaves the first-audio step (0.15 s): the first clause only."""
    streams = [stream(f"n{i}", None, generating=False, prefill=10) for i in range(3)]
    if playing is not None:
        streams.insert(0, stream("p", playing, ready=0))
    work, _ = plan(streams, model=costs(prefill=(0.0, 0.01)))
    assert work.prefills == tuple(f"n{i}" for i in range(packed))


def test_prefills_keep_to_the_token_budget_and_the_first_always_runs():
    rules = dataclasses.replace(RULES, prefill_token_budget=25)
    streams = [stream(f"n{i}", None, generating=False, prefill=10) for i in range(4)]
    assert plan(streams, rules)[0].prefills == ("n0", "n1")
    huge = costs(prefill=(100.0, 1.0))  # nothing fits any deadline: the first still runs
    assert plan(streams, model=huge)[0].prefills == ("n0",)


def test_ar_steps_go_to_the_least_slack_in_running_order():
    rules = dataclasses.replace(RULES, max_running=2)
    streams = [stream("a", 3.0), stream("b", 0.5), stream("c", None), stream("d", 2.0),
               stream("e", 1.0, generating=False)]
    assert plan(streams, rules)[0].steps == ("b", "c")


# --- chunks ----------------------------------------------------------------------------------

def test_chunks_start_small_and_grow_with_the_listeners_buffer():
    rules = dataclasses.replace(RULES, first_chunk=24, chunk=32, max_chunk=128, frame_seconds=0.01)
    size = BatchedPlanner(rules)._chunk_size
    assert size(None, 500) == 24  # first chunk
    assert [size(s, 500) for s in (0.16, 0.4, 0.64, 1.3, 60.0)] == [32, 32, 64, 128, 128]
    # about to run dry: what is ready now; behind: all that is ready, at least a chunk,
    # at most the biggest
    assert (size(0.01, 5), size(-1.0, 5), size(-1.0, 90), size(-1.0, 500)) == (5, 32, 90, 128)
    size = BatchedPlanner(dataclasses.replace(rules, min_chunk=8))._chunk_size
    assert (size(0.01, 5), size(0.01, 12)) == (8, 12)


def test_listeners_who_cannot_wait_a_step_all_decode_however_short_the_budget():
    """Four listeners with 80 ms buffered, an AR step of 100 ms: none can wait for the next
    step, so all decode now, though the budget (30 ms) holds one chunk at most."""
    streams = [stream(f"s{i}", 0.08, ready=1) for i in range(4)]
    model = costs(step=(0.1, 0.0), decode=(0.0, 0.02))
    work, chunks = plan(streams, model=model)
    assert work.budget < 0.04 and not work.overloaded
    assert set(chunks) == {"s0", "s1", "s2", "s3"}


def test_a_full_step_still_decodes_listeners_about_to_run_dry():
    buffers = {"r0": 5.0, "r1": 0.2, "r2": 3.0, "r3": 0.25}
    streams = [stream(name, b, ready=40, generating=False) for name, b in buffers.items()]
    # no chunk fits the step
    work, chunks = plan(streams, model=costs(decode=(0.0, 1.0)), stepped=False)
    assert work.budget == pytest.approx(0.15)  # r1 sets it
    assert set(chunks) == {"r1", "r3"}  # both would run dry within two steps
    cheap = costs(decode=(0.0, 1e-6))  # the step takes everything ready
    assert set(plan(streams, model=cheap, stepped=False)[1]) == set(buffers)


def test_a_chunk_joining_a_call_of_its_shape_costs_only_its_frames():
    """A second chunk of the same shape joins the first's decoder call (its frames fit the
    step); a third of another shape would need a call of its own (its fixed part does not)."""
    rules = dataclasses.replace(RULES, max_chunk=4, max_step=1.0)
    streams = [stream("a", 0.5, ready=4, generating=False),
               stream("b", 1.0, ready=4, generating=False),
               stream("c", 1.1, ready=4, clause_end=3, generating=False)]
    # step budget 0.45 s: a call's fixed 0.3 s fits once, a chunk's frames (0.01 s) always
    _, chunks = plan(streams, rules, costs(decode=(0.3, 0.0025)), stepped=False)
    assert chunks == {"a": 4, "b": 4}


def test_a_new_request_goes_before_streams_with_a_long_buffer():
    streams = [stream("old", 5.0, ready=16), stream("mid", 0.3, ready=8),
               stream("new", None, ready=2)]
    _, chunks = plan(streams, stepped=False)
    assert set(chunks) == {"mid", "new"}
    # once nobody awaits first audio, the old one decodes too
    _, chunks = plan(streams[:2], stepped=False)
    assert set(chunks) == {"old", "mid"}


def test_a_chunk_never_crosses_the_end_of_its_clause():
    _, chunks = plan([stream("a", 0.2, ready=6, clause_end=3, generating=False),
                      stream("b", 0.2, ready=6, clause_end=0, generating=False)])
    assert chunks == {"a": 3}  # b's clause end is already decoded: the engine marks it


def test_a_stream_s_own_decoder_lookahead_replaces_the_family_s():
    """A stream whose clause stage says its decoder reads fewer frames after a chunk (z
    resampled: HiFi-GAN's reach only) is decoded once that many are ready, and its chunk
    carries that lookahead; the others keep the family's."""
    rules = dataclasses.replace(RULES, lookahead=11)
    own = stream("own", 0.2, ready=7)._replace(lookahead=3)
    family = stream("family", 0.2, ready=7)
    planner = BatchedPlanner(rules)
    view = View((own, family), 1, True)
    work = planner.plan_work(view, NOW, costs())
    chunks = planner.plan_decodes(view, NOW, costs(), work)
    assert [(c.key, c.frames, c.lookahead) for c in chunks] == [("own", 4, 3)]


# --- first audio -------------------------------------------------------------------------------

@pytest.mark.parametrize("waited, engine_step, frames", [
    (0.0, 0.0, None),  # fresh: waits for its 2-frame first chunk
    (0.0, 0.2, 1),  # one more step would take it past the wait: the frame ready now
    (0.5, 0.0, 1),  # kept waiting already
])
def test_a_request_kept_waiting_takes_the_frame_ready(waited, engine_step, frames):
    _, chunks = plan([stream("n", None, ready=1, waited=waited)],
                     model=costs(engine_step=engine_step))
    assert chunks.get("n") == frames


def test_a_burst_takes_its_first_chunks_together_however_costly():
    """Once one request awaiting first audio is overdue, all take what is ready, in one
    call, even when decoding is believed to cost far more than the step may take."""
    streams = [stream("r0", None, ready=1, waited=1.0), stream("r1", None, ready=1),
               stream("r2", None, ready=1)]
    _, chunks = plan(streams, model=costs(decode=(10.0, 10.0)))
    assert chunks == {"r0": 1, "r1": 1, "r2": 1}


# --- the decode tick and fresh streams ---------------------------------------------------------

@pytest.mark.parametrize("ar_steps, stepped, decoded", [
    (1, True, set()),  # off the tick, 3 steps to wait: 5 s buffered affords it
    (4, True, {"a", "b", "c"}),  # on the tick: all decode what is ready, together
    (1, False, {"a", "b", "c"}),  # no AR step this step: the tick would never come
])
def test_streams_with_time_to_spare_decode_on_a_shared_tick(ar_steps, stepped, decoded):
    streams = [stream(name, 5.0, ready=16) for name in "abc"]
    _, chunks = plan(streams, ar_steps=ar_steps, stepped=stepped)
    assert set(chunks) == decoded
    assert set(chunks.values()) <= {16}  # one shape: one decoder call
    # listeners with little to spare never wait for the tick
    _, chunks = plan([stream("a", 0.3, ready=4)], ar_steps=1)
    assert chunks == {"a": 4}


class _NoFreshStreams(BatchedPlanner):
    FRESH_SECONDS = 0.0


@pytest.mark.parametrize("planner, others_decoded", [(BatchedPlanner, 1), (_NoFreshStreams, 3)])
def test_a_fresh_listener_keeps_room_for_its_next_chunk(planner, others_decoded):
    """A fresh stream (0.16 s heard, 50 ms buffered, no frame ready) needs the next step
    soon: the others' tick chunks (5 s to spare) wait, but one (a step decodes at least
    one chunk). Counted as not fresh, all three decode."""
    streams = [stream("fresh", 0.05, heard=0.16)]
    streams += [stream(f"o{i}", 5.0, ready=4) for i in range(3)]
    _, chunks = plan(streams, planner=planner(RULES), ar_steps=4,
                     model=costs(step=(0.1, 0.0), decode=(0.0, 0.001)))
    assert len(chunks) == others_decoded


# --- non-autoregressive families: clauses in pieces -----------------------------------------

PIPER = Rules(autoregressive=False, frame_seconds=0.0116, first_chunk=24, chunk=32,
              max_chunk=128, min_chunk=1)


def test_a_clause_rest_runs_first_when_its_listener_would_run_dry():
    streams = [stream("dry", 0.15, ready=5, generating=False, rest=200),
               stream("ahead", 3.0, ready=100, generating=False, rest=200),
               stream("new", None, ready=0, generating=False, prefill=30)]
    work, _ = plan(streams, PIPER, costs(piece=(0.0, 0.0002), clause=(0.0, 0.05)))
    assert work.rests == ("dry",) and work.prefills == ("new",)
    work, _ = plan(streams[:2], PIPER, costs(piece=(0.0, 0.0002)))  # nobody new: both
    assert set(work.rests) == {"dry", "ahead"}


# --- baselines and purity ---------------------------------------------------------------------

def test_the_interleaved_baseline_works_one_stream_per_step_in_turn():
    streams = [stream(name, 0.5, ready=4) for name in "abc"]
    planner = InterleavedPlanner(dataclasses.replace(RULES, tick=False))
    for turn in range(4):
        view = View(tuple(streams), 1, True, turn)
        work = planner.plan_work(view, NOW, costs())
        chunks = planner.plan_decodes(view, NOW, costs(), work)
        assert work.steps == ("abc"[turn % 3],)
        assert [chunk.key for chunk in chunks] == ["abc"[turn % 3]]
    assert SequentialPlanner.max_admitted == 1 and BatchedPlanner.max_admitted is None


def test_the_planner_is_a_function_of_its_inputs():
    streams = [stream("a", 0.3, ready=4), stream("b", None, ready=1, waited=0.5),
               stream("c", 2.0, ready=9, prefill=12, generating=False)]
    planner, model = BatchedPlanner(RULES), costs(step=(0.02, 0.001), decode=(0.01, 0.001))
    first = plan(streams, planner=planner, model=model)
    assert plan(streams, planner=planner, model=model) == first
    assert plan(streams, planner=BatchedPlanner(RULES), model=model) == first


def test_a_clause_prefilled_this_step_takes_its_first_ar_step_in_it():
    streams = [stream("p", 0.5), stream("n", None, generating=False, prefill=10)]
    work, _ = plan(streams)
    assert work.prefills == ("n",) and work.steps == ("p", "n")


def test_the_planner_reads_no_clock_and_the_engine_probes_no_family():
    """Purity by construction: the planner module imports no clock; no engine module asks
    a family what it has (`getattr` / `hasattr` on it): families declare traits."""
    engine = Path(__file__).resolve().parents[2] / "polyvox" / "engine"
    for name in ("planner.py", "plans.py", "baselines.py"):
        tree = ast.parse((engine / name).read_text(encoding="utf-8"))
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & {"time", "datetime", "asyncio"}, (name, imported)
        names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert not names & {"monotonic", "perf_counter", "time"}, (name, names)
    for path in engine.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args
                    and "family" in ast.unparse(node.args[0])):
                raise AssertionError(f"{path.name}: {ast.unparse(node)} probes the family")
