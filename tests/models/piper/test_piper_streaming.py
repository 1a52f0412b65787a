"""Windowed streaming decoding: delta output that adds up to whole-utterance decoding."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("piper")

from polyvox.models.piper.front import make_generator
from polyvox.models.piper.model import PiperModel
from polyvox.models.piper.streaming import (
    PiperDecoderState,
    StreamingConfig,
    decode_windows,
    ready_windows,
)

RelativeError = Callable[[torch.Tensor, torch.Tensor], float]

TEXT = "Streaming speech, one chunk at a time. It should sound the same!"


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize(
    ("first_chunk_frames", "chunk_frames", "text"),
    [(1, 1, "Hi there."), (8, 32, TEXT), (5, 7, TEXT)],
)
def test_streamed_equals_offline(
    joe_model: PiperModel,
    relative_error: RelativeError,
    first_chunk_frames: int,
    chunk_frames: int,
    text: str,
) -> None:
    chunks = list(joe_model.stream(text, 3, 1.0, True, first_chunk_frames, chunk_frames))
    offline = joe_model.synthesize(text, seed=3)
    assert len(chunks[0]) == first_chunk_frames * 256  # small first chunk for TTFA
    assert all(len(chunk) <= chunk_frames * 256 for chunk in chunks[1:])
    error = relative_error(torch.cat(chunks), offline)
    print(f"streamed ({first_chunk_frames}, {chunk_frames}) vs offline: {error:.2e}")
    assert error <= 1e-4


def _latents(model: PiperModel, text: str, seed: int) -> torch.Tensor:  # [C, T]
    (ids,) = model.sentence_ids(text)
    return model.latents(ids, model.scales(), make_generator(seed)).latents


def test_too_little_context_breaks_the_match(
    joe_model: PiperModel, relative_error: RelativeError
) -> None:
    """The 10 + 10 frames of context are needed: with 2 + 2 the seams are audible."""
    latents = _latents(joe_model, "Context matters at every seam.", seed=0)
    state = PiperDecoderState(StreamingConfig(8, 8, history_frames=2, lookahead_frames=2))
    state.append(latents, final=True)
    streamed = torch.cat(decode_windows(joe_model.hifigan, ready_windows(state)))
    assert relative_error(streamed, joe_model.decode(latents)) > 1e-3


def test_latents_arriving_in_pieces_wait_for_lookahead(
    joe_model: PiperModel, relative_error: RelativeError
) -> None:
    latents = _latents(joe_model, "Frames may arrive a few at a time.", seed=1)
    state = PiperDecoderState(StreamingConfig(first_chunk_frames=8, chunk_frames=16))
    state.append(latents[:, :17])
    assert ready_windows(state) == []  # 8 frames + 10 lookahead not there yet
    state.append(latents[:, 17:18])
    (first,) = ready_windows(state)
    assert (first.latents.shape[1], first.first_new_frame, first.num_new_frames) == (18, 0, 8)
    pieces = decode_windows(joe_model.hifigan, [first])
    for start in range(18, latents.shape[1], 5):
        state.append(latents[:, start : start + 5])
        pieces += decode_windows(joe_model.hifigan, ready_windows(state))
        assert state.num_frames_received - state.num_frames_emitted >= 10  # lookahead kept
        assert state.num_frames_kept <= 10 + 16 + 10 + 5  # bounded, however long the text
    assert not state.is_done
    state.finish()
    pieces += decode_windows(joe_model.hifigan, ready_windows(state))
    assert state.is_done and ready_windows(state) == []
    assert relative_error(torch.cat(pieces), joe_model.decode(latents)) <= 1e-4


def test_batched_windows_equal_one_at_a_time(
    joe_model: PiperModel, relative_error: RelativeError
) -> None:
    texts = ["One.", "Two words here.", "A third, somewhat longer request.", "Four is last."]
    latents = [_latents(joe_model, text, seed) for seed, text in enumerate(texts)]
    config = StreamingConfig(first_chunk_frames=8, chunk_frames=24)
    batched_states = [PiperDecoderState(config) for _ in texts]
    single_states = [PiperDecoderState(config) for _ in texts]
    for state_list in (batched_states, single_states):
        for state, z in zip(state_list, latents):
            state.append(z, final=True)
    batched: list[list[torch.Tensor]] = [[] for _ in texts]
    single: list[list[torch.Tensor]] = [[] for _ in texts]
    num_shared_forwards = 0
    while not all(state.is_done for state in batched_states):
        # One engine step: at most one window per request, all decoded together.
        owners, windows = [], []
        for index, state in enumerate(batched_states):
            for window in ready_windows(state, max_windows=1):
                owners.append(index)
                windows.append(window)
        lengths = [w.latents.shape[1] for w in windows]
        num_shared_forwards += len(lengths) - len(set(lengths))
        for index, audio in zip(owners, decode_windows(joe_model.hifigan, windows)):
            batched[index].append(audio)
    for index, state in enumerate(single_states):
        while windows := ready_windows(state, max_windows=1):
            single[index] += decode_windows(joe_model.hifigan, windows)
    assert num_shared_forwards > 0  # equal-length windows really shared a forward
    for index in range(len(texts)):
        error = relative_error(torch.cat(batched[index]), torch.cat(single[index]))
        assert error <= 1e-5, (texts[index], error)
        whole = joe_model.decode(latents[index])
        assert relative_error(torch.cat(batched[index]), whole) <= 1e-4


def test_config_and_state_misuse_fail() -> None:
    with pytest.raises(ValueError):
        StreamingConfig(first_chunk_frames=0)
    state = PiperDecoderState()
    state.append(torch.zeros(192, 4), final=True)
    with pytest.raises(RuntimeError):
        state.append(torch.zeros(192, 1))
    with pytest.raises(ValueError):
        PiperDecoderState().append(torch.zeros(1, 192, 4))
