"""Streaming HiFi-GAN decoding in overlapping windows, with per-request state.

HiFi-GAN is non-causal: a sample depends on about 10 latent frames on either side. A
chunk of N new frames is therefore decoded as one window

    [ history (<= 10 frames) | N new frames | lookahead (<= 10 frames) ]

and only the N frames' samples (hop_length each) are kept; the context is cut off, not
crossfaded. A window that touches either end of the utterance has fewer context frames,
which is exact, because whole-utterance decoding zero-pads there too. With 10 + 10
frames the streamed audio matches whole-utterance decoding to ~2e-6 (less context breaks
audibly). Windows of equal length batch exactly; zero-padding ragged windows does not,
so `decode_windows` groups windows by length.

NOTE: the output contract is delta output. Each window yields only its new samples, and
the concatenation of a request's chunks equals decoding its whole utterance at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from polyvox.models.piper.hifigan import HiFiGan


@dataclass(frozen=True)
class StreamingConfig:
    """Chunking policy: a small first chunk for time-to-first-audio, then larger ones."""

    first_chunk_frames: int = 8
    chunk_frames: int = 32
    history_frames: int = 10
    lookahead_frames: int = 10

    def __post_init__(self) -> None:
        if self.first_chunk_frames < 1 or self.chunk_frames < 1:
            raise ValueError(f"Chunk sizes must be >= 1 frame: {self}")
        if self.history_frames < 0 or self.lookahead_frames < 0:
            raise ValueError(f"Context sizes must be >= 0 frames: {self}")


class DecodeWindow(NamedTuple):
    """One chunk to decode: a window of z and which of its frames are new."""

    latents: torch.Tensor  # [C, W] frames [start, start + W) of the utterance
    first_new_frame: int  # index in the window of the first frame to emit
    num_new_frames: int  # frames to emit (each hop_length samples)


class PiperDecoderState:
    """One request's decoder state for one utterance: z received so far, frames emitted.

    Only the frames still needed as history or not yet emitted are kept, so memory is
    bounded by the chunk size plus context, however long the utterance.
    """

    def __init__(self, config: StreamingConfig | None = None) -> None:
        self.config = config or StreamingConfig()
        self.num_frames_received = 0
        self.num_frames_emitted = 0  # frames handed out in windows (decoded or not)
        self.is_final = False  # no more frames will arrive for this utterance
        self._frames: torch.Tensor | None = None  # [C, kept] latents
        self._first_kept_frame = 0  # utterance index of self._frames[:, 0]

    def append(self, latents: torch.Tensor, final: bool = False) -> None:
        """Add new z frames [C, N]; `final` marks the end of the utterance."""
        if self.is_final:
            raise RuntimeError("append() after the utterance was marked final.")
        if latents.dim() != 2:
            raise ValueError(f"latents must be [C, N], got {tuple(latents.shape)}.")
        latents = latents.detach().float()
        self._frames = latents if self._frames is None else torch.cat([self._frames, latents], 1)
        self.num_frames_received += latents.shape[1]
        self.is_final = final

    def finish(self) -> None:
        """Mark the end of the utterance: the last chunk is decoded without lookahead."""
        self.is_final = True

    @property
    def is_done(self) -> bool:
        """Every frame of a finished utterance has been handed out."""
        return self.is_final and self.num_frames_emitted == self.num_frames_received

    @property
    def num_frames_kept(self) -> int:
        """Latent frames held in memory (history + not yet emitted)."""
        return 0 if self._frames is None else self._frames.shape[1]

    @property
    def next_chunk_frames(self) -> int:
        """Size of the next chunk: the small first chunk, then the regular size."""
        if self.num_frames_emitted == 0:
            return self.config.first_chunk_frames
        return self.config.chunk_frames

    def next_window(self) -> DecodeWindow | None:
        """Hand out the next chunk's window if it can be decoded now, else None.

        A full chunk is ready once its lookahead has arrived; after `finish()`, the rest
        of the utterance is ready, the last chunk shortened and without lookahead.
        """
        config = self.config
        start = self.num_frames_emitted
        num_new = min(self.next_chunk_frames, self.num_frames_received - start)
        end = start + num_new
        window_end = min(end + config.lookahead_frames, self.num_frames_received)
        is_complete = num_new == self.next_chunk_frames and (
            window_end == end + config.lookahead_frames
        )
        if num_new == 0 or not (is_complete or self.is_final):
            return None
        assert self._frames is not None
        window_start = max(0, start - config.history_frames)
        offset = self._first_kept_frame
        latents = self._frames[:, window_start - offset : window_end - offset]  # [C, W]
        self.num_frames_emitted = end
        # NOTE: keep only what the next window can still use as history.
        forget = max(0, end - config.history_frames) - offset
        self._frames = self._frames[:, forget:]
        self._first_kept_frame += forget
        return DecodeWindow(latents, start - window_start, num_new)


def ready_windows(state: PiperDecoderState, max_windows: int | None = None) -> list[DecodeWindow]:
    """All windows of `state` that can be decoded now (at most `max_windows`), in order."""
    windows: list[DecodeWindow] = []
    while max_windows is None or len(windows) < max_windows:
        window = state.next_window()
        if window is None:
            break
        windows.append(window)
    return windows


@torch.inference_mode()
def decode_windows(hifigan: HiFiGan, windows: list[DecodeWindow]) -> list[torch.Tensor]:
    """Decode windows (of any requests) in one HiFi-GAN forward per window length.

    Returns, per window and in input order, its new samples [num_new_frames * hop]
    as CPU float32.
    """
    hop = hifigan.hop_length
    by_length: dict[int, list[int]] = {}
    for index, window in enumerate(windows):
        by_length.setdefault(window.latents.shape[1], []).append(index)
    outputs: list[torch.Tensor | None] = [None] * len(windows)
    for indices in by_length.values():
        batch = torch.stack([windows[i].latents for i in indices]).to(hifigan.device)  # [B, C, W]
        audio = hifigan(batch).float().cpu()  # [B, W * hop]
        for row, index in enumerate(indices):
            window = windows[index]
            first = window.first_new_frame * hop
            outputs[index] = audio[row, first : first + window.num_new_frames * hop].clone()
    return [audio for audio in outputs if audio is not None]
