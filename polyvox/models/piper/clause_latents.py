"""One clause's latents z, handed out in pieces: the first audio waits only for its frames.

Stage 1 (durations) has run for every sentence of the clause, and the request's generator
has drawn all their noise, by the time a `ClauseLatents` exists. Stage 2 (the flow) runs
lazily per piece: its convs see 32 frames either side (`FLOW_CONTEXT`), so a piece needs
only its own frames of stage 1's output plus that much context, not the whole sentence.

    start_clauses ─► ClauseLatents ─► next(34) ─► z [34, 192]  (flow over 34 + 32 frames)
                                 └─► next()   ─► z [T - 34, 192]
"""

from __future__ import annotations

from collections import deque

import torch

from polyvox.models.piper.front import PiperFront, Stage1Output


class ClauseLatents:
    """A clause's z [total_frames, C] in order, computed piece by piece on request.

    The pieces, however they are cut, concatenate to the clause's whole z (to ~1e-6
    relative: onnxruntime rounds a shorter flow call slightly differently).
    """

    def __init__(self, front: PiperFront, sentences: list[Stage1Output], latent_dim: int,
                 word_frames: tuple[tuple[int, int], ...] | None = None) -> None:
        # For each whitespace-separated word of the clause's text, the frames [start, end)
        # it is spoken in, from the clause's first frame (None: not known).
        self.word_frames = word_frames
        self.total_frames = sum(sentence.num_frames for sentence in sentences)
        self.frames_given = 0
        self.latent_dim = latent_dim
        self._front = front
        # NOTE: the first pending sentence has given its first `_offset` frames; finished
        # sentences are dropped (their stage-1 tensors are ~3 KB per frame).
        self._pending = deque(sentences)
        self._offset = 0

    @property
    def done(self) -> bool:
        """Every frame has been handed out."""
        return self.frames_given == self.total_frames

    def next(self, max_frames: int | None = None) -> torch.Tensor:
        """The next min(max_frames, frames left) frames, [n, C] float32 (None: all left).

        A piece runs across sentence boundaries (each sentence has its own flow call);
        once `done`, pieces are empty.
        """
        left = self.total_frames - self.frames_given
        if max_frames is not None and max_frames < 0:
            raise ValueError(f"max_frames must be >= 0 or None, got {max_frames}.")
        wanted = left if max_frames is None else min(max_frames, left)
        pieces = []  # [C, frames] each
        while wanted > 0:
            sentence = self._pending[0]
            stop = min(sentence.num_frames, self._offset + wanted)
            pieces.append(self._front.run_flow(sentence, self._offset, stop))
            wanted -= stop - self._offset
            self.frames_given += stop - self._offset
            self._offset = stop
            if stop == sentence.num_frames:
                self._pending.popleft()
                self._offset = 0
        if not pieces:
            return torch.zeros(0, self.latent_dim)
        return torch.cat(pieces, dim=1).t().contiguous()  # [n, C]
