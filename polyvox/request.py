"""A request owns all of its state: text still to speak, its place in the KV pool and in
the decoder pool, the latent it feeds back, the frames waiting for the decoder, and its
timings. The engine keeps no parallel per-request tables.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from polyvox.engine.kv_cache import BlockTable


class Status(enum.Enum):
    WAITING = "waiting"  # not admitted: holds nothing
    RUNNING = "running"  # holds KV blocks and a decoder slot
    PREEMPTED = "preempted"  # KV swapped out to host memory; keeps its decoder slot
    FINISHED = "finished"
    ABORTED = "aborted"
    FAILED = "failed"

    @property
    def is_done(self) -> bool:
        return self in (Status.FINISHED, Status.ABORTED, Status.FAILED)


@dataclass
class Clause:
    """One clause being generated."""

    tokens: torch.Tensor  # [T] token ids
    frames_after_eos: int
    max_frames: int
    num_frames: int = 0  # frames generated (and kept) so far
    eos_frame: int | None = None  # index of the step whose EOS logit crossed the threshold
    first_frame: int = 0  # the request's frames generated before this clause


@dataclass
class AudioChunk:
    """What a request's stream yields: new PCM samples (or the end marker)."""

    request_id: str
    samples: torch.Tensor  # [N] float32, new samples only
    sample_rate: int
    index: int  # 0, 1, 2, ... per request
    created: float  # time.monotonic() when decoded
    is_last: bool = False
    error: str | None = None
    clause_index: int = 0  # which clause of the request these samples belong to
    ends_clause: bool = False  # the last samples of that clause
    # On a clause's last chunk, for families that know their durations (Piper): for each
    # whitespace-separated word of the clause's text, the frames [start, end) it is spoken
    # in, counted from the clause's first frame.
    word_frames: tuple[tuple[int, int], ...] | None = None


# NOTE: eq=False: a request equals only itself. Requests are looked up in lists every step;
# a field-by-field __eq__ made that cost O(n^2) field compares per step (~20 ms at 128 streams).
@dataclass(eq=False)
class Request:
    request_id: str
    voice: Any  # the engine's registered voice entry
    params: Any  # the family's GenerationParams
    arrival: float = field(default_factory=time.monotonic)
    # streams running when it arrived with all its text (the load model's TTFA; None for
    # streamed text, whose first audio waits on its writer too)
    streams_ahead: int | None = None
    status: Status = Status.WAITING
    # --- text ---
    pending_clauses: deque[str] = field(default_factory=deque)
    text_complete: bool = True
    splitter: Any = None  # TextPipeline: normalization + clause splitting
    clause: Clause | None = None
    next_plan: Any = None  # (text, ClausePlan) of the next clause, once the family planned it
    # --- KV ---
    table: BlockTable = field(default_factory=BlockTable)
    next_position: int = 0
    swapped: tuple[torch.Tensor, torch.Tensor] | None = None  # KV of own blocks when preempted
    # --- generation ---
    generator: torch.Generator = field(default_factory=torch.Generator)
    last_latent: torch.Tensor | None = None  # [D]; None = first step of a clause (BOS)
    partial: Any = None  # non-autoregressive: a clause whose latents come in pieces
    # --- decoder ---
    decoder_slot: int | None = None
    pending_latents: list[torch.Tensor] = field(default_factory=list)  # [D] each
    # Frame counts (kept frames, over the whole request): generated, decoded, and where each
    # finished-but-not-yet-decoded clause ends. A chunk never crosses a clause end.
    frames_generated: int = 0
    frames_decoded: int = 0
    clause_ends: deque[int] = field(default_factory=deque)
    # AudioChunk.word_frames of each clause started and not yet ended (None: not known)
    clause_word_frames: deque[tuple[tuple[int, int], ...] | None] = field(default_factory=deque)
    clauses_spoken: int = 0
    fade_samples: int = 0  # samples still to fade in (fresh decoder)
    clauses_started: int = 0
    clause_frames_decoded: int = 0  # frames decoded since the decoder was last (re)started
    # --- output ---
    num_chunks: int = 0
    num_samples: int = 0
    undelivered: int = 0  # chunks decided (decoder call queued) but not yet delivered
    first_audio_time: float | None = None
    finish_time: float | None = None
    error: str | None = None

    @property
    def is_generating(self) -> bool:
        return self.status is Status.RUNNING and self.clause is not None

    @property
    def wants_prefill(self) -> bool:
        return self.status is Status.RUNNING and self.clause is None and bool(self.pending_clauses)

    @property
    def has_work(self) -> bool:
        """Text to prefill, a clause generating, or frames to decode (a stream waiting for
        more streamed text has none)."""
        return bool(self.pending_clauses) or self.clause is not None or bool(self.pending_latents)

    @property
    def is_complete(self) -> bool:
        """Nothing left to generate or decode."""
        return (self.clause is None and not self.pending_clauses and self.text_complete
                and not self.pending_latents)

    def audio_seconds(self, sample_rate: int) -> float:
        return self.num_samples / sample_rate

    def is_behind(self, now: float, sample_rate: int) -> bool:
        """The one meaning of "behind" (engine, scheduler, admission, load model): the
        listener has heard audio, more is to come, and what it was sent has run out by
        `now` (a player that started at the first chunk has stalled)."""
        return (self.first_audio_time is not None and self.has_work
                and self.slack(now, sample_rate) < 0)

    def slack(self, now: float, sample_rate: int) -> float:
        """Seconds of audio delivered beyond what its listener has played by `now`
        (`listener_slack`)."""
        return listener_slack(self.first_audio_time, self.audio_seconds(sample_rate), now)


def listener_slack(first_audio: float | None, audio_seconds: float, now: float) -> float:
    """Seconds of audio delivered beyond what a listener who started at the first chunk
    has played by `now`; -inf before the first chunk (the most urgent). Below zero the
    listener is behind (`Request.is_behind`)."""
    if first_audio is None:
        return float("-inf")
    return audio_seconds - (now - first_audio)
