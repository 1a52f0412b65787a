"""Resuming a stream from a later clause (what a cluster does when a replica dies): a
request given the clauses still to speak, or all of its text with the spoken ones
skipped, speaks exactly those; with per-clause seeds each clause samples the same noise
wherever it runs, so where a clause starts from the voice alone (chaining "pocket") a
restarted clause is what it was the first time. (Chained clauses also read their
predecessors' context, which a restart does not carry: docs/deploy.md.)"""

from __future__ import annotations

import torch
from conftest import make_engine, params, rel_error

from polyvox.engine.engine import Engine

TEXT = "The first clause is here. A second clause follows it. And a third one ends it."


def by_clause(engine: Engine) -> dict[str, dict[int, torch.Tensor]]:
    """Each request's audio, split by clause."""
    parts: dict[str, dict[int, list[torch.Tensor]]] = {}
    while engine.requests:
        for chunk in engine.step():
            parts.setdefault(chunk.request_id, {}).setdefault(chunk.clause_index, []).append(
                chunk.samples)
    return {rid: {i: torch.cat(p) for i, p in clauses.items()}
            for rid, clauses in parts.items()}


def test_a_restarted_clause_with_clause_seeds_is_what_it_was(model, voice) -> None:
    engine = make_engine(model, voice, schedule="sequential", chaining="pocket",
                         max_clause_tokens=12)
    clauses = engine.clauses_of(TEXT)
    assert len(clauses) >= 3
    engine.add_request(TEXT, "chirp", params(7), request_id="whole", clause_seed_base=0)
    engine.add_request("", "chirp", params(7), request_id="resumed", clauses=clauses[1:],
                       clause_seed_base=1)
    for name, skip in (("streamed", 0), ("streamed-resumed", 1)):
        engine.add_request("", "chirp", params(7), request_id=name, text_complete=False,
                           skip_clauses=skip, clause_seed_base=skip)
        engine.add_text(name, TEXT)
        engine.finish_text(name)
    engine.add_request(TEXT, "chirp", params(7), request_id="one-generator")
    audio = by_clause(engine)
    assert sorted(audio["whole"]) == list(range(len(clauses)))
    for resumed, original in (("resumed", "whole"), ("streamed-resumed", "streamed")):
        # the clauses left, no more, each as it was
        assert sorted(audio[resumed]) == list(range(len(audio[original]) - 1)), resumed
        for index in audio[resumed]:
            assert rel_error(audio[resumed][index], audio[original][index + 1]) < 1e-4
    # one generator through all clauses (a single-box request) samples other noise from
    # the second clause on: the per-clause seeds are what makes a restart reproducible
    other = audio["one-generator"][1]
    assert other.shape != audio["whole"][1].shape or rel_error(other, audio["whole"][1]) > 1e-3
