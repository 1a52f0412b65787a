"""The Piper family through the engine: streamed, batched output equals piper's own."""

from __future__ import annotations

import pytest
import torch
from conftest import rel_error

from polyvox.config import EngineConfig
from polyvox.engine.engine import Engine, run_to_completion
from polyvox.text.clauses import split_text

pytest.importorskip("piper")

TEXTS = [
    "Hello world, this is the joe voice.",
    "Your appointment is on Tuesday at three.",
    "Short!",
    "A longer sentence follows. And then another one, to check that clauses restart.",
    "Please hold while I transfer your call.",
    "The weather today is sunny with a light breeze from the west.",
    "Thank you for calling.",
    "Is there anything else I can help you with today?",
]


@pytest.mark.parametrize("schedule", ["sequential", "batched"])
def test_eight_concurrent_requests_equal_offline_synthesis(family, schedule) -> None:
    engine = Engine(family, EngineConfig(schedule=schedule, first_chunk_frames=5, chunk_frames=16))
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    chunk_counts: dict[str, int] = {}
    for i, text in enumerate(TEXTS):
        engine.add_request(text, "default", family.make_params(seed=i), request_id=f"r{i}")
    audio: dict[str, list[torch.Tensor]] = {}
    while engine.requests:
        for chunk in engine.step():
            audio.setdefault(chunk.request_id, []).append(chunk.samples)
            chunk_counts[chunk.request_id] = chunk_counts.get(chunk.request_id, 0) + 1
    assert engine.is_idle() and engine.check_integrity()
    for i, text in enumerate(TEXTS):
        expected = offline(family, text, i, engine.config.first_clause_tokens)
        assert rel_error(torch.cat(audio[f"r{i}"]), expected) <= 1e-4
    # the first clause ended at the comma (a shorter front, sooner audio); the rest is whole
    assert split_text(TEXTS[0], family.count_tokens, 50, engine.config.first_clause_tokens) == [
        "Hello world,", "this is the joe voice."]
    assert max(chunk_counts.values()) > 3  # really streamed in chunks


def test_first_clauses_come_in_pieces(family) -> None:
    """A request's first clause starts with the first chunk's frames; its first audio is
    out before the rest of the clause is computed, and the audio is unchanged."""
    engine = Engine(family, EngineConfig(first_clause_tokens=50))  # whole sentences
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    continued: list[tuple[str, bool]] = []
    continue_clauses = engine.runner.continue_clauses

    def recording(requests):  # type: ignore[no-untyped-def]
        continued.extend((r.request_id, r.first_audio_time is not None) for r in requests)
        return continue_clauses(requests)

    engine.runner.continue_clauses = recording  # type: ignore[method-assign]
    texts = [TEXTS[5], TEXTS[7], TEXTS[3]]
    for i, text in enumerate(texts):
        engine.add_request(text, "default", family.make_params(seed=i), request_id=f"r{i}")
    out = run_to_completion(engine)
    assert engine.is_idle()
    assert sorted(rid for rid, _ in continued) == ["r0", "r1", "r2"]  # once each, first clause
    assert all(heard for _, heard in continued)  # the rest came after the first audio
    for i, text in enumerate(texts):
        assert rel_error(out[f"r{i}"], offline(family, text, i, 50)) <= 1e-4


def offline(family, text: str, seed: int, first_clause_tokens: int | None) -> torch.Tensor:
    """Each clause (as the engine splits the text) synthesized whole, as one utterance, with
    one generator for the request."""
    generator = family.new_generator(seed)
    params = family.make_params(seed=seed)
    parts = [family.model.decode(family.clause_latents(clause, params, generator).t())
             for clause in split_text(text, family.count_tokens, 50, first_clause_tokens)]
    return torch.cat(parts)


def test_speed_changes_duration(family) -> None:
    engine = Engine(family, EngineConfig())
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    engine.add_request(TEXTS[5], "default", family.make_params(seed=0, speed=1.0), request_id="a")
    engine.add_request(TEXTS[5], "default", family.make_params(seed=0, speed=1.5), request_id="b")
    out = run_to_completion(engine)
    assert out["b"].numel() < 0.8 * out["a"].numel()


def test_speed_out_of_range_is_refused(family) -> None:
    with pytest.raises(ValueError, match="speed"):
        family.make_params(speed=10.0)
