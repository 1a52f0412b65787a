"""The seeded ONNX front, and the whole graph fed the same explicit noise."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("piper")

from polyvox.models.piper import front
from polyvox.models.piper.front import (
    Scales,
    Sentence,
    draw_duration_noise,
    draw_latent_noise,
    make_generator,
)
from polyvox.models.piper.model import PiperModel
from polyvox.models.piper.onnx_graph import DURATION_NOISE, LATENT_NOISE, VitsGraph

TEXT = "The quick brown fox jumps over the lazy dog."

RelativeError = Callable[[torch.Tensor, torch.Tensor], float]


def _ids(model: PiperModel) -> list[int]:
    (ids,) = model.sentence_ids(TEXT)
    return ids


def test_front_is_seeded_per_request(joe_model: PiperModel) -> None:
    ids, scales = _ids(joe_model), joe_model.scales()
    first = joe_model.latents(ids, scales, make_generator(1))
    again = joe_model.latents(ids, scales, make_generator(1))
    other = joe_model.latents(ids, scales, make_generator(2))
    assert torch.equal(first.latents, again.latents)
    assert not torch.equal(first.latents[:, :10], other.latents[:, :10])
    assert first.latents.shape[0] == 192 and first.latents.dtype == torch.float32
    assert int(first.durations.sum()) == first.latents.shape[1]
    assert first.durations.shape == (len(ids),)


def test_noise_free_front_ignores_the_seed(joe_model: PiperModel) -> None:
    ids, scales = _ids(joe_model), joe_model.scales(noise=False)
    a = joe_model.latents(ids, scales, make_generator(1)).latents
    b = joe_model.latents(ids, scales, make_generator(2)).latents
    assert torch.equal(a, b)


def test_speed_scales_the_number_of_frames(joe_model: PiperModel) -> None:
    ids = _ids(joe_model)
    normal = joe_model.latents(ids, joe_model.scales(1.0, noise=False), make_generator(0))
    fast = joe_model.latents(ids, joe_model.scales(2.0, noise=False), make_generator(0))
    assert joe_model.scales(2.0).length_scale == pytest.approx(0.5)
    # Durations are rounded up per phoneme id, so half speed is only roughly half.
    ratio = fast.latents.shape[1] / normal.latents.shape[1]
    assert 0.45 < ratio < 0.7


def test_whole_graph_with_same_noise_equals_front_and_hifigan(
    joe_model: PiperModel, joe_graph: VitsGraph, relative_error: RelativeError
) -> None:
    import onnxruntime  # type: ignore[import-untyped]

    ids, scales = _ids(joe_model), joe_model.scales()
    ours = joe_model.latents(ids, scales, make_generator(7))
    audio = joe_model.decode(ours.latents)  # [T * 256]
    # Replay the noise polyvox drew, in the same order, into the uncut graph.
    generator = make_generator(7)
    duration_noise = draw_duration_noise(len(ids), generator)
    latent_noise = draw_latent_noise((1, *ours.latents.shape), generator)
    session = onnxruntime.InferenceSession(
        joe_graph.model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (whole,) = session.run(
        None,
        {
            "input": np.asarray([ids], dtype=np.int64),
            "input_lengths": np.asarray([len(ids)], dtype=np.int64),
            "scales": np.asarray(
                [scales.noise_scale, scales.length_scale, scales.noise_w], dtype=np.float32
            ),
            DURATION_NOISE: duration_noise.numpy(),
            LATENT_NOISE: latent_noise.numpy(),
        },
    )
    expected = torch.from_numpy(whole).reshape(-1)
    error = relative_error(audio, expected)
    print(f"whole graph vs front + PyTorch HiFi-GAN, with noise: {error:.2e}")
    assert error <= 1e-4
    # The noise matters: other noise gives clearly different audio.
    other = joe_model.decode(joe_model.latents(ids, scales, make_generator(8)).latents)
    n = min(len(other), len(expected))
    assert relative_error(other[:n], expected[:n]) > 0.1


@pytest.mark.parametrize("padding_ratio", [front.MAX_PADDING_RATIO, float("inf")])
def test_batched_front_equals_one_sentence_at_a_time(
    joe_model: PiperModel, relative_error: RelativeError, padding_ratio: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sentences of different lengths and scales, two of them drawing from one generator
    (a request's two sentences): each output, and what each generator draws next, as if
    every sentence had run alone, in list order. With no padding limit, sentences of 17
    to 109 ids share one stage-1 call."""
    monkeypatch.setattr(front, "MAX_PADDING_RATIO", padding_ratio)
    texts = [TEXT, "Short!", "Your appointment is on Tuesday at three o'clock in the afternoon.",
             "Hello there.", "Please hold while I transfer your call."]
    ids = [joe_model.sentence_ids(text)[0] for text in texts]
    scales = [joe_model.scales(), joe_model.scales(), joe_model.scales(1.5),
              joe_model.scales(), joe_model.scales(noise=False)]
    owners = [0, 1, 2, 0, 3]  # sentences 0 and 3 share a generator

    def generators() -> list[torch.Generator]:
        return [make_generator(seed) for seed in (11, 12, 13, 14)]

    alone_generators, batch_generators = generators(), generators()
    alone = [joe_model.latents(i, s, alone_generators[o]) for i, s, o in zip(ids, scales, owners)]
    batched = joe_model.latents_batch(
        [Sentence(i, s, batch_generators[o]) for i, s, o in zip(ids, scales, owners)])
    errors = []
    for one, many in zip(alone, batched, strict=True):
        assert torch.equal(one.durations, many.durations)
        errors.append(relative_error(many.latents, one.latents))
    print(f"batched vs one at a time, z: {max(errors):.2e}")
    assert max(errors) <= 1e-4
    for one, many in zip(alone_generators, batch_generators):
        assert torch.equal(torch.randn(4, generator=one), torch.randn(4, generator=many))


def test_batch_of_one_is_the_single_sentence_path(joe_model: PiperModel) -> None:
    ids, scales = _ids(joe_model), joe_model.scales()
    single = joe_model.latents(ids, scales, make_generator(3))
    (batched,) = joe_model.latents_batch([Sentence(ids, scales, make_generator(3))])
    assert torch.equal(single.latents, batched.latents)


def test_batches_keep_each_generators_draws_in_order() -> None:
    """Round r holds every generator's r-th sentence; a stage-1 batch has one `scales` and
    ids within MAX_PADDING_RATIO of its shortest."""
    first, second = make_generator(0), make_generator(1)
    slow = Scales(0.667, 1.5, 0.8)
    normal = Scales(0.667, 1.0, 0.8)
    sentences = [Sentence([1] * n, scales, generator) for n, scales, generator in [
        (20, normal, first), (22, normal, second), (21, slow, make_generator(2)),
        (90, normal, make_generator(3)), (30, normal, first)]]
    rounds = front._draw_rounds(sentences)
    assert rounds == [[0, 1, 2, 3], [4]]
    assert front._batches(sentences, rounds[0]) == [[0, 1], [3], [2]]
