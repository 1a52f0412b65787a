"""The GPU path's host-side machinery, run on the CPU: fixed-shape ("graph-shaped") stages
and the overlapped loop give the same audio as the plain engine."""

from __future__ import annotations

import pytest
import torch
from conftest import TEXTS, make_engine, params, rel_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyvox.config import EngineConfig
from polyvox.engine.engine import Engine, run_to_completion
from polyvox.engine.graphs import bucket_size, width_bucket

VARIANTS = {
    "shaped": {"graphs": "shaped"},
    "overlap": {"overlap": True},
    "shaped+overlap": {"graphs": "shaped", "overlap": True},
}


def run_script(engine: Engine, texts, voices, abort: str | None = None,
               **param_overrides) -> dict[str, list]:
    """Two arrivals every other step, one abort at step 12; every chunk, per request."""
    chunks: dict[str, list] = {}
    pending = list(range(len(texts)))
    step = 0
    while pending or engine.requests:
        if pending and step % 2 == 0:
            for i in pending[:2]:
                engine.add_request(texts[i], voices[i], params(i, **param_overrides),
                                   request_id=f"r{i}")
            pending = pending[2:]
        if step == 12 and abort:
            engine.abort(abort)
        for chunk in engine.step():
            chunks.setdefault(chunk.request_id, []).append(chunk)
        assert engine.check_integrity()
        step += 1
        assert step < 5000
    assert engine.is_idle() and engine.check_integrity()
    return chunks


def joined(chunks) -> torch.Tensor:
    return torch.cat([c.samples for c in chunks])


def test_buckets() -> None:
    buckets = (1, 2, 4, 8)
    assert [bucket_size(n, buckets) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    with pytest.raises(ValueError, match="largest bucket"):
        bucket_size(9, buckets)
    assert [width_bucket(w) for w in (1, 16, 17, 100, 300)] == [16, 16, 32, 128, 512]


def test_bad_graph_settings_are_refused(model) -> None:
    with pytest.raises(ValueError, match="graphs must be"):
        EngineConfig(graphs="fast")
    with pytest.raises(ValueError, match="largest batch bucket"):
        EngineConfig(graphs="shaped", max_running=300)
    with pytest.raises(ValueError, match="increasing"):
        EngineConfig(batch_buckets=(4, 2))
    with pytest.raises(ValueError, match="CUDA device"):
        Engine(model, EngineConfig(graphs="cuda", kv_memory_mb=8))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_equals_plain_engine(model, voice, variant) -> None:
    """16 mixed requests, staggered arrivals, one abort: every finished request's audio
    equals the plain engine's, and every pool is back to idle."""
    texts = [TEXTS[i % len(TEXTS)] + " " + TEXTS[(i + 2) % len(TEXTS)] for i in range(16)]
    voices = ["chirp" if i % 3 else "default" for i in range(16)]
    plain = run_script(make_engine(model, voice), texts, voices, abort="r5")
    other = run_script(make_engine(model, voice, **VARIANTS[variant]), texts, voices,
                       abort="r5")
    # NOTE: whether r5 spoke before its abort depends on step timing; the others finish.
    assert set(other) - {"r5"} == set(plain) - {"r5"} == {f"r{i}" for i in range(16)} - {"r5"}
    for rid in set(plain) - {"r5"}:
        assert rel_error(joined(other[rid]), joined(plain[rid])) <= 1e-4, rid


def test_shaped_batches_run_at_bucket_sizes(model, voice) -> None:
    engine = make_engine(model, voice, graphs="shaped")
    for i in range(3):
        engine.add_request(TEXTS[i], "chirp", params(i), request_id=f"r{i}")
    run_to_completion(engine)
    rows = {key[0] for key in engine.runner.step_graphs.calls}
    assert rows <= {1, 2, 4} and 4 in rows  # three streams ran in a padded batch of four
    widths = {key[1] for key in engine.runner.step_graphs.calls}
    assert all(w & (w - 1) == 0 for w in widths)  # powers of two
    assert {key[0] for key in engine.runner.decode_graphs.calls} <= {1, 2, 4}


def test_warm_up_builds_every_shape_serving_uses(model, voice) -> None:
    """After warm-up (on a GPU: every CUDA graph captured up front) serving builds no new
    shape, so no listener waits for a capture."""
    engine = make_engine(model, voice, graphs="shaped", batch_buckets=(1, 2, 4),
                         max_running=4, context_window=64, max_clause_tokens=20)
    engine.warm_up()
    step_shapes = set(engine.runner.step_graphs.calls)
    decode_shapes = set(engine.runner.decode_graphs.calls)
    assert {key[0] for key in step_shapes} == {1, 2, 4}
    words = " ".join(TEXTS).split()
    for i in range(6):
        text = " ".join(words[(7 * i + j) % len(words)] for j in range(120))
        engine.add_request(text, ["chirp", "default"][i % 2], params(i, eos_threshold=-3.0),
                           request_id=f"r{i}")
    run_to_completion(engine)
    assert set(engine.runner.step_graphs.calls) == step_shapes
    assert set(engine.runner.decode_graphs.calls) == decode_shapes


@pytest.mark.parametrize("variant", ["overlap", "shaped+overlap"])
def test_overlap_undoes_steps_past_the_end_of_speech(model, voice, variant) -> None:
    """frames_after_eos=0: a clause ends at its EOS step, which the overlapped loop learns
    only after launching the next step. That step is undone (KV slot, position, noise), so
    later clauses come out exactly as in the plain loop, and no frame past EOS is heard."""
    texts = [TEXTS[6] + " " + TEXTS[3] + " " + TEXTS[4], TEXTS[1] + " " + TEXTS[5]] * 2
    voices = ["chirp", "default"] * 2
    eos = {"eos_threshold": -2.5, "frames_after_eos": 0}
    plain = run_script(make_engine(model, voice), texts, voices, **eos)
    engine = make_engine(model, voice, **VARIANTS[variant])
    undone = 0
    undo = engine.streams.undo_step

    def counting_undo(*args):  # type: ignore[no-untyped-def]
        nonlocal undone
        undone += 1
        undo(*args)

    engine.streams.undo_step = counting_undo  # type: ignore[method-assign]
    other = run_script(engine, texts, voices, **eos)
    assert undone >= 4, "no clause ended on an EOS step: the test exercises nothing"
    for rid in plain:
        assert joined(other[rid]).numel() == joined(plain[rid]).numel(), rid
        assert rel_error(joined(other[rid]), joined(plain[rid])) <= 1e-4, rid
        clauses = [c.clause_index for c in plain[rid] if c.ends_clause]
        assert [c.clause_index for c in other[rid] if c.ends_clause] == clauses


def test_overlap_delivers_chunks_in_order(model, voice) -> None:
    engine = make_engine(model, voice, overlap=True)
    texts = [TEXTS[i] + " " + TEXTS[i + 1] for i in range(6)]
    chunks = run_script(engine, texts, ["chirp"] * 6, eos_threshold=-3.0)
    for rid, stream in chunks.items():
        assert [c.index for c in stream] == list(range(len(stream))), rid
        assert stream[-1].is_last and not any(c.is_last for c in stream[:-1]), rid
        marks = [c.clause_index for c in stream if c.ends_clause]
        assert marks == sorted(set(marks)) and len(marks) >= 2, rid
        # a clause's audio all comes before its end mark
        for position, mark in enumerate(stream):
            if mark.ends_clause:
                later = stream[position + 1:]
                assert all(c.clause_index > mark.clause_index for c in later
                           if c.samples.numel())


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(["add", "step", "step", "abort"]),
                          st.integers(0, 1000)), min_size=120, max_size=120))
def test_random_operations_with_overlap_keep_pools_consistent(model, voice, operations) -> None:
    engine = make_engine(model, voice, num_kv_blocks=60, num_decoder_slots=6, max_running=4,
                         chunk_frames=2, graphs="shaped", overlap=True)
    for index, (op, value) in enumerate(operations):
        live = list(engine.requests)
        if op == "add":
            engine.add_request(TEXTS[value % len(TEXTS)], ["default", "chirp"][value % 2],
                               params(value, eos_threshold=-3.0,
                                      frames_after_eos=value % 2),
                               request_id=f"r{index}")
        elif op == "abort" and live:
            engine.abort(live[value % len(live)])
        else:
            engine.step()
        assert engine.check_integrity()
    run_to_completion(engine, max_steps=20000)
    assert engine.check_integrity() and engine.is_idle()


def test_shaped_piper_equals_plain(family) -> None:
    """The Piper decoder at bucketed batch sizes: same audio as the plain engine."""
    from polyvox.serving import serve_family

    texts = ["Hello there, this is a test of the decoder.", "Short one.",
             "A third request, somewhat longer, with two commas in it.", "Yes."]
    outputs = []
    for graphs in ("off", "shaped"):
        engine = serve_family("piper/joe", family, EngineConfig(graphs=graphs)).engine
        for i, text in enumerate(texts):
            engine.add_request(text, "default", family.make_params(seed=i), request_id=f"r{i}")
        outputs.append(run_to_completion(engine))
        assert engine.is_idle() and engine.check_integrity()
    for rid in outputs[0]:
        assert rel_error(outputs[1][rid], outputs[0][rid]) <= 1e-4, rid
