"""The stage protocol every model family implements.

A family turns text into audio in three stages, each written so that the engine can run
it for many requests at once:

    prefill   text of one clause (+ voice prefix) -> per-request generation state
    step      one autoregressive latent frame per request (AR families only)
    decode    latent frames -> PCM samples, with per-request decoder state

The engine never imports a family's internals: it only holds the opaque per-request
state objects a family hands out and calls the stages below.

NOTE: the decoder output contract is *delta* output. Each `decode` call returns only the
new samples, and the concatenation of every chunk of a request equals decoding the
request's whole latent sequence at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class AudioFormat:
    """What a family's decoder produces."""

    sample_rate: int  # Hz of the PCM the decoder emits
    frame_rate: float  # latent frames per second
    samples_per_frame: int  # PCM samples per latent frame


class ModelFamily(Protocol):
    """What the engine needs from a family (single-request form; batching comes later)."""

    audio: AudioFormat

    def new_decoder_state(self) -> object:
        """A fresh per-request decoder state (conv history, overlap, attention window)."""
        ...

    def decode(self, latents: torch.Tensor, state: object) -> torch.Tensor:
        """latents [T, D] -> PCM [T * samples_per_frame], advancing `state` in place."""
        ...
