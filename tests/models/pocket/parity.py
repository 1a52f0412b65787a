"""Helpers shared by the parity tests: run pocket-tts and polyvox the same way."""

from __future__ import annotations

from typing import Any

import torch

from polyvox.models.pocket.model import GenerationParams, PocketTTS
from polyvox.models.pocket.text import split_into_chunks
from polyvox.models.pocket.voice import VoicePrefix


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|; shapes must match."""
    assert a.shape == b.shape, f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def reference_generate(reference: Any, text: str, eos_threshold: float,
                       voice_state: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """pocket-tts at temperature 0: (decoder-space latents [T, D], audio [N])."""
    from pocket_tts.modules.stateful_module import init_states

    recorded: list[torch.Tensor] = []
    decode = reference.mimi.decode_from_latent

    def recording_decode(latents: torch.Tensor, state: dict) -> torch.Tensor:
        recorded.append(latents[0].clone())
        return decode(latents, state)

    reference.mimi.decode_from_latent = recording_decode
    reference.temp = 0.0
    reference.eos_threshold = eos_threshold
    try:
        state = voice_state if voice_state is not None else init_states(reference.flow_lm, 1, 0)
        audio = reference.generate_audio(state, text)
    finally:
        reference.mimi.decode_from_latent = decode
    return torch.cat(recorded), audio


def polyvox_generate(model: PocketTTS, text: str, eos_threshold: float,
                     voice: VoicePrefix | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """polyvox at temperature 0, pocket-compatible: (decoder-space latents, audio)."""
    params = GenerationParams(temperature=0.0, eos_threshold=eos_threshold)
    voice = voice if voice is not None else model.empty_voice()
    latents = []
    for chunk in split_into_chunks(text, model.tokenizer, model.config):
        latents += list(model.generate_chunk_latents(chunk, voice, params, torch.Generator()))
    audio = model.synthesize(text, voice, params)
    return model.flow_lm.denormalize(torch.cat(latents)), audio


def eos_threshold_that_fires(model: PocketTTS, text: str, voice: VoicePrefix | None = None,
                             start: int = 6, stop: int = 16) -> float:
    """A threshold at which EOS fires inside frames [start, stop) of the first chunk, with a
    clear margin to every other logit before it (so both implementations agree)."""
    logits: list[float] = []
    step = model.step

    def recording_step(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        latent, eos = step(*args, **kwargs)
        logits.append(float(eos))
        return latent, eos

    model.step = recording_step  # type: ignore[method-assign]
    try:
        chunk = split_into_chunks(text, model.tokenizer, model.config)[0]
        params = GenerationParams(temperature=0.0, eos_threshold=1e9)
        list(model.generate_chunk_latents(chunk, voice or model.empty_voice(), params,
                                          torch.Generator()))
    finally:
        del model.step
    for end in range(stop, len(logits) + 1):
        window = sorted(logits[6:end], reverse=True)
        crossing = logits.index(window[0])
        margin = window[0] - window[1]
        if crossing >= start and margin > 1e-4:
            return window[0] - margin / 2
    raise AssertionError(f"no clear EOS crossing with these weights: {logits[:30]}")
