"""PiperFamily's stage for the engine: a step's clauses through the front at once."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("piper")

from polyvox.models.piper import front
from polyvox.models.piper.family import PiperFamily
from polyvox.models.piper.model import PiperModel

RelativeError = Callable[[torch.Tensor, torch.Tensor], float]

# Phoneme ids per sentence: 33 | 31, 57 | 27 | 13, 43 | 101 | 109 | 17 (the last one slower).
CLAUSES = [
    "Hello world,",
    "Good morning. The store opens at nine.",
    "Hello there.",
    "Hi. How are you today?",
    "Is there anything else I can help you with today?",
    "The quick brown fox jumps over the lazy dog.",
    "Short!",
]


@pytest.mark.parametrize("padding_ratio", [front.MAX_PADDING_RATIO, float("inf")])
def test_a_step_of_clauses_equals_each_clause_alone(
    joe_model: PiperModel, relative_error: RelativeError, padding_ratio: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Different lengths, clauses espeak splits into two sentences (their second sentences
    batch together), one request slower: a clause's latents do not depend on its batch
    neighbours, padded by up to 76 ids or not at all."""
    monkeypatch.setattr(front, "MAX_PADDING_RATIO", padding_ratio)
    family = PiperFamily(joe_model)
    assert len(joe_model.sentence_ids(CLAUSES[1])) == 2
    params = [family.make_params(seed=i, speed=1.5 if i == len(CLAUSES) - 1 else 1.0)
              for i in range(len(CLAUSES))]
    alone = [family.clause_latents(text, p, family.new_generator(p.seed))
             for text, p in zip(CLAUSES, params)]
    generators = [family.new_generator(p.seed) for p in params]
    batched = family.clause_latents_batch(CLAUSES, params, generators)
    errors = []
    for one, many in zip(alone, batched, strict=True):
        assert one.shape == many.shape and one.shape[1] == family.latent_dim
        errors.append(relative_error(many, one))
    print(f"clause_latents_batch vs clause_latents: {max(errors):.2e}")
    assert max(errors) <= 1e-4


def test_clauses_of_one_request_draw_its_noise_in_order(
    joe_model: PiperModel, relative_error: RelativeError
) -> None:
    """Two clauses of one request in one call: as the first clause, then the second."""
    family = PiperFamily(joe_model)
    params = family.make_params(seed=5)
    generator = family.new_generator(5)
    alone = [family.clause_latents(text, params, generator) for text in CLAUSES[:2]]
    generator = family.new_generator(5)
    batched = family.clause_latents_batch(CLAUSES[:2], [params, params], [generator, generator])
    for one, many in zip(alone, batched, strict=True):
        assert relative_error(many, one) <= 1e-4
