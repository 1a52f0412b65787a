"""The streaming contract of the Mimi decoder: delta output, chunked == whole."""

from __future__ import annotations

import pytest
import torch
from parity import rel_error

from polyvox.models.pocket.loader import load_pocket
from polyvox.models.pocket.model import GenerationParams


@pytest.fixture(scope="module")
def model():
    return load_pocket("english_2m", seed=1)


def _latents(model, frames: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(5)
    return torch.randn(1, frames, model.config.latent_dim, generator=generator)


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_chunked_decoding_equals_whole(model, chunk: int) -> None:
    latents = _latents(model, 23)
    whole = model.decode(latents, model.new_decoder_state())
    state = model.new_decoder_state()
    pieces = [model.decode(latents[:, i : i + chunk], state) for i in range(0, 23, chunk)]
    assert all(p.shape[1] == min(chunk, 23 - i) * model.audio.samples_per_frame
               for p, i in zip(pieces, range(0, 23, chunk)))
    assert rel_error(torch.cat(pieces, dim=1), whole) <= 1e-5


def test_decoder_history_matters(model) -> None:
    """Chunks decoded with a fresh state each time differ from the streamed output: the
    state really carries history (guards against a test that cannot fail)."""
    latents = _latents(model, 10)
    whole = model.decode(latents, model.new_decoder_state())
    fresh = torch.cat([model.decode(latents[:, i : i + 2], model.new_decoder_state())
                       for i in range(0, 10, 2)], dim=1)
    assert rel_error(fresh, whole) > 1e-2


def test_window_longer_than_attention_context(model) -> None:
    """Past the decoder transformer's window (50 steps = 3 frames for english_2m, more for
    others), streaming still equals whole decoding."""
    big = load_pocket("english_7m", seed=2)
    latents = _latents(big, 40)
    whole = big.decode(latents, big.new_decoder_state())
    state = big.new_decoder_state()
    streamed = torch.cat([big.decode(latents[:, i : i + 3], state) for i in range(0, 40, 3)], 1)
    assert rel_error(streamed, whole) <= 1e-5


def test_batched_decoding_equals_single(model) -> None:
    a, b = _latents(model, 6), _latents(model, 6) * 0.5
    single = [model.decode(x, model.new_decoder_state()) for x in (a, b)]
    both = model.decode(torch.cat([a, b]), model.new_decoder_state(batch_size=2))
    assert rel_error(both[0:1], single[0]) <= 1e-5
    assert rel_error(both[1:2], single[1]) <= 1e-5


@pytest.mark.parametrize("frames_per_chunk", [1, 2, 5])
def test_streamed_generation_equals_offline(model, frames_per_chunk: int) -> None:
    params = GenerationParams(temperature=0.7, seed=11, eos_threshold=1e9)
    text = "Streaming keeps every sample."
    offline = model.synthesize(text, params=params)
    chunks = list(model.stream(text, params=params, frames_per_chunk=frames_per_chunk))
    assert all(c.numel() <= frames_per_chunk * model.audio.samples_per_frame for c in chunks)
    assert rel_error(torch.cat(chunks), offline) <= 1e-5


def test_seed_decides_the_audio(model) -> None:
    text = "Same seed, same voice."
    first = model.synthesize(text, params=GenerationParams(temperature=0.7, seed=1))
    again = model.synthesize(text, params=GenerationParams(temperature=0.7, seed=1))
    other = model.synthesize(text, params=GenerationParams(temperature=0.7, seed=2))
    assert torch.equal(first, again)
    assert first.shape != other.shape or not torch.equal(first, other)


def test_ring_window_streams_like_stateless_decoding(model) -> None:
    """The decoder transformer's window is a ring written in place (WindowKV): chunks of
    mixed sizes, some longer than one transformer call takes (STEPS_PER_CALL, so they go
    through in pieces), wrap it many times and still equal decoding the whole input at
    once without any state (attention masked to the context)."""
    steps_per_frame = model.mimi.cfg.resample_stride
    transformer = model.mimi.decoder_transformer
    long_chunk = transformer.STEPS_PER_CALL // steps_per_frame + 2  # needs two pieces
    sizes = [1, long_chunk, 2, 3, long_chunk, 1, 4]
    frames = sum(sizes) * 2
    assert frames * steps_per_frame > 3 * transformer.window  # the ring wraps
    latents = _latents(model, frames)
    reference = model.mimi.decode(model.flow_lm.denormalize(latents), None)
    state = model.new_decoder_state()
    pieces, start = [], 0
    for size in sizes * 2:
        pieces.append(model.decode(latents[:, start: start + size], state))
        start += size
    assert rel_error(torch.cat(pieces, dim=1), reference) <= 1e-5
