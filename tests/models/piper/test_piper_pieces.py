"""A clause's latents in pieces (`PiperFamily.start_clauses`, `ClauseLatents.next`).

The pieces must concatenate to the whole clause's z however the engine cuts them, and the
request's generator must draw exactly what `clause_latents` draws.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("piper")

from polyvox.models.piper import front
from polyvox.models.piper.clause_latents import ClauseLatents
from polyvox.models.piper.family import PiperFamily
from polyvox.models.piper.model import PiperModel

RelativeError = Callable[[torch.Tensor, torch.Tensor], float]

SHORT = "Hi. Yes."  # 2 sentences, 93 frames at seed 3
ONE_SENTENCE = "Good morning, and welcome to the city library reading room,"  # 268 frames
TWO_SENTENCES = "Please hold on. I will check that for you right away."  # 241 frames
MAX_ERROR = 1e-5  # measured ~1e-6: a shorter flow call rounds differently


def _pieces(clause: ClauseLatents, sizes: list[int | None]) -> torch.Tensor:
    """Ask for `sizes` in turn (None: the rest), then the rest; checks each piece's size."""
    pieces = []
    for size in [*sizes, None]:
        left = clause.total_frames - clause.frames_given
        piece = clause.next(size)
        assert piece.shape == (left if size is None else min(size, left), 192)
        assert clause.frames_given == clause.total_frames - left + piece.shape[0]
        pieces.append(piece)
    assert clause.done and clause.next(34).shape == (0, 192)
    return torch.cat(pieces)


def _whole_and_pieces(family: PiperFamily, text: str, sizes: list[int | None],
                      seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    params = family.make_params(seed=seed)
    whole = family.clause_latents(text, params, family.new_generator(seed))
    (clause,) = family.start_clauses([text], [params], [family.new_generator(seed)])
    assert clause.total_frames == whole.shape[0] and clause.frames_given == 0
    return whole, _pieces(clause, sizes)


@pytest.mark.parametrize("sizes", [[34], [1, 1, 1], [0, 100, 200], [500]],
                         ids=["34-then-rest", "1-1-1-then-rest", "0-100-200", "more-than-all"])
@pytest.mark.parametrize("text", [ONE_SENTENCE, TWO_SENTENCES])
def test_pieces_concatenate_to_the_whole_clause(
    joe_model: PiperModel, relative_error: RelativeError, text: str, sizes: list[int | None]
) -> None:
    """The engine's first piece then the rest, tiny pieces, pieces across the sentence
    boundary of a clause espeak splits: the same z as the whole clause."""
    whole, pieces = _whole_and_pieces(PiperFamily(joe_model), text, sizes)
    error = relative_error(pieces, whole)
    print(f"{sizes}: {error:.2e}")
    assert error <= MAX_ERROR


def test_one_frame_pieces_equal_the_whole_clause(
    joe_model: PiperModel, relative_error: RelativeError
) -> None:
    family = PiperFamily(joe_model)
    assert len(joe_model.sentence_ids(SHORT)) == 2
    whole, pieces = _whole_and_pieces(family, SHORT, [1] * 200)
    assert relative_error(pieces, whole) <= MAX_ERROR


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_pieces_equal_the_whole_clause(
    joe_model: PiperModel, relative_error: RelativeError, seed: int
) -> None:
    sizes: list[int | None] = [random.Random(seed).randint(1, 80) for _ in range(8)]
    whole, pieces = _whole_and_pieces(PiperFamily(joe_model), TWO_SENTENCES, sizes, seed)
    assert relative_error(pieces, whole) <= MAX_ERROR


@pytest.mark.parametrize("context", [0, 16])
def test_a_context_below_the_flows_receptive_field_breaks_pieces(
    joe_model: PiperModel, relative_error: RelativeError, context: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The flow's z frame depends on 32 frames either side: with less context the pieces
    differ from the whole (so the tests above can fail)."""
    family = PiperFamily(joe_model)
    params = family.make_params(seed=3)
    whole = family.clause_latents(ONE_SENTENCE, params, family.new_generator(3))
    monkeypatch.setattr(front, "FLOW_CONTEXT", context)
    (clause,) = family.start_clauses([ONE_SENTENCE], [params], [family.new_generator(3)])
    error = relative_error(_pieces(clause, [34, 34, 34]), whole)
    print(f"context {context}: {error:.2e}")  # measured 7.5e-01 and 2.8e-04
    assert error > 10 * MAX_ERROR


def test_generators_draw_as_clause_latents_batch_does_and_pieces_draw_nothing(
    joe_model: PiperModel, relative_error: RelativeError, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clauses of one request and one of another in one step: each clause's pieces
    equal it alone in order, stage 1 runs no flow, and the generators end as
    `clause_latents_batch` leaves them."""
    family = PiperFamily(joe_model)
    texts = [TWO_SENTENCES, SHORT, ONE_SENTENCE]
    params = [family.make_params(seed=seed) for seed in (5, 5, 6)]
    first, other = family.new_generator(5), family.new_generator(6)
    alone = family.clause_latents_batch(texts, params, [first, first, other])

    flow_calls = []
    run_flow = front.PiperFront.run_flow
    monkeypatch.setattr(front.PiperFront, "run_flow",
                        lambda *args, **kwargs: flow_calls.append(1) or run_flow(*args, **kwargs))
    generators = [family.new_generator(5), family.new_generator(6)]
    clauses = family.start_clauses(texts, params, [generators[0], generators[0], generators[1]])
    assert not flow_calls
    states = [generator.get_state() for generator in generators]
    assert torch.equal(states[0], first.get_state()) and torch.equal(states[1], other.get_state())

    for clause, expected in zip(clauses, alone, strict=True):
        assert relative_error(_pieces(clause, [34, 50]), expected) <= MAX_ERROR
    assert flow_calls
    for generator, state in zip(generators, states, strict=True):
        assert torch.equal(generator.get_state(), state)


def test_next_rejects_a_negative_size(joe_model: PiperModel) -> None:
    family = PiperFamily(joe_model)
    (clause,) = family.start_clauses([SHORT], [family.make_params()], [family.new_generator(0)])
    with pytest.raises(ValueError, match="max_frames"):
        clause.next(-1)
