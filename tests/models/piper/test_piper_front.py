"""The seeded ONNX front, and the whole graph fed the same explicit noise."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("piper")

from polyvox.models.piper.front import draw_duration_noise, draw_latent_noise, make_generator
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
