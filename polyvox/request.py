"""A request owns all of its state: text still to speak, its place in the KV pool and in
the decoder pool, the latent it feeds back, the frames waiting for the decoder, where its
speech stands (`Progress`: frames, clause ends, chunks, moved only by its own methods) and
its timings. The engine keeps no parallel per-request tables; `Streams` and the engine
write a request's fields, the planner only reads a snapshot of them.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from polyvox.engine.kv_cache import BlockTable
from polyvox.models.retime import ClauseStage


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
    num_frames: int = 0  # AR steps generated (and kept) so far
    eos_frame: int | None = None  # index of the step whose EOS logit crossed the threshold
    first_frame: int = 0  # the request's frames generated before this clause
    features: torch.Tensor | None = None  # its plan's per-token features, if any
    retimer: ClauseStage | None = None  # its latents retimed as they come (ClausePlan.retime)


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
    # From a cluster replica (polyvox.cluster), for the WebSocket's word timings: on a
    # clause's last chunk, its words and the client words they came from (ClauseWords);
    # and whether this chunk speaks its clause again from the start (the stream moved).
    clause_words: Any = None
    restarts_clause: bool = False


WordFrames = tuple[tuple[int, int], ...]


class ChunkPlace(NamedTuple):
    """Where a chunk sits in its stream (decided when its decoder call is queued)."""

    index: int  # the request's chunk number
    clause_index: int  # the clause its samples belong to
    ends_clause: bool
    fade: tuple[int, int] | None  # fade-in samples [start, start + count) of the ramp
    word_frames: WordFrames | None  # on a clause's last chunk, where known


@dataclass
class Progress:
    """A request's place in its speech, and the only code that moves it: frames generated
    and decoded (kept frames, over the whole request), the ends of clauses generated but
    not yet spoken, the decoder's fresh start, and chunks handed out. A chunk never
    crosses a clause end."""

    generated: int = 0
    decoded: int = 0
    ends: deque[int] = field(default_factory=deque)  # clause ends (in frames) not yet spoken
    # AudioChunk.word_frames of each clause started and not yet spoken (None: not known)
    word_frames: deque[WordFrames | None] = field(default_factory=deque)
    started: int = 0  # clauses started
    spoken: int = 0  # clauses whose last chunk went out
    decoded_in_clause: int = 0  # frames decoded since the decoder last (re)started
    fade: int = 0  # samples still to fade in (a fresh decoder)
    chunks: int = 0  # chunks handed out (audio and clause marks)
    undelivered: int = 0  # chunks handed out whose samples are not delivered yet

    def restart_decoder(self, fade_samples: int) -> None:
        """The decoder starts afresh (admission; each clause where it restarts per clause):
        its first samples fade in."""
        self.decoded_in_clause = 0
        self.fade = fade_samples

    def start_clause(self) -> None:
        self.started += 1

    def clause_words(self, word_frames: WordFrames | None) -> None:
        """The word timings of the clause just started (None: not known); they go out
        with its last chunk."""
        self.word_frames.append(word_frames)

    def add_frames(self, count: int) -> None:
        self.generated += count

    def end_clause(self) -> None:
        """The clause generating ends after the frames generated so far (an empty clause
        marks nothing)."""
        if not (self.ends and self.ends[-1] == self.generated):
            self.ends.append(self.generated)

    @property
    def to_clause_end(self) -> int | None:
        """Frames until the end of the first clause not yet spoken (None: none ended)."""
        return self.ends[0] - self.decoded if self.ends else None

    def take_chunk(self, frames: int, fade_total: int, samples: int) -> ChunkPlace:
        """A chunk of `frames` frames (`samples` samples) leaves for the decoder."""
        self.decoded += frames
        self.decoded_in_clause += frames
        clause_index = self.spoken
        ends_clause = bool(self.ends) and self.decoded == self.ends[0]
        word_frames = self._finish_clause() if ends_clause else None
        fade = None
        if self.fade:
            count = min(self.fade, samples)
            fade = (fade_total - self.fade, count)
            self.fade -= count
        return self._hand_out(clause_index, ends_clause, fade, word_frames)

    def take_marks(self) -> list[ChunkPlace]:
        """Empty chunks marking the end of clauses whose last frames were decoded before
        the clause was known to end (EOS is decided one step after the last frame)."""
        marks = []
        while self.ends and self.ends[0] == self.decoded:
            clause_index = self.spoken
            marks.append(self._hand_out(clause_index, True, None, self._finish_clause()))
        return marks

    def delivered(self) -> None:
        self.undelivered -= 1

    def _finish_clause(self) -> WordFrames | None:
        self.ends.popleft()
        self.spoken += 1
        return self.word_frames.popleft() if self.word_frames else None

    def _hand_out(self, clause_index: int, ends_clause: bool, fade: tuple[int, int] | None,
                  word_frames: WordFrames | None) -> ChunkPlace:
        self.chunks += 1
        self.undelivered += 1
        return ChunkPlace(self.chunks - 1, clause_index, ends_clause, fade, word_frames)


# NOTE: eq=False: a request equals only itself. Requests are looked up in lists every step;
# a field-by-field __eq__ made that cost O(n^2) field compares per step (~20 ms at 128 streams).
@dataclass(eq=False)
class Request:
    request_id: str
    voice: Any  # the engine's registered voice entry
    params: Any  # the family's GenerationParams
    arrival: float = field(default_factory=time.monotonic)
    # other streams in the engine while it waited for its first audio: running when it
    # arrived, or arriving before its first audio (they share its first steps); the load
    # model's TTFA. None for streamed text, whose first audio waits on its writer too
    streams_sharing: int | None = None
    # when its caller handed it in (AsyncEngine.generate; the engine's clock): `arrival`
    # is stamped only once the engine thread takes it, after the step then running, and
    # the load model's TTFA counts that wait too (None: at arrival)
    handed_in: float | None = None
    status: Status = Status.WAITING
    # --- text ---
    pending_clauses: deque[str] = field(default_factory=deque)
    text_complete: bool = True
    splitter: Any = None  # TextPipeline: normalization + clause splitting
    skip_clauses: int = 0  # clauses still to leave out (Engine.add_request)
    # per-clause seeds (Engine.add_request): the index of its first clause in the whole
    # text; None: one generator seeded once runs through all its clauses
    clause_seed_base: int | None = None
    clauses_started: int = 0
    clause: Clause | None = None
    next_plan: Any = None  # (text, ClausePlan) of the next clause, once the family planned it
    # --- KV ---
    table: BlockTable = field(default_factory=BlockTable)
    next_position: int = 0
    steps_start: int = 0  # the position of the current (or last) clause's first AR step
    swapped: tuple[torch.Tensor, torch.Tensor] | None = None  # KV of own blocks when preempted
    # --- generation ---
    generator: torch.Generator = field(default_factory=torch.Generator)
    last_latent: torch.Tensor | None = None  # [D]; None = first step of a clause (BOS)
    partial: Any = None  # non-autoregressive: a clause whose latents come in pieces
    # --- decoder ---
    decoder_slot: int | None = None
    pending_latents: list[torch.Tensor] = field(default_factory=list)  # [D] each
    # what the family's decode is told about them (the clauses' stage: ClauseStage)
    decode_options: dict[str, bool] = field(default_factory=dict)
    # frames its decoder reads after a chunk (its clauses' stage; None: the family's)
    decoder_lookahead: int | None = None
    progress: Progress = field(default_factory=Progress)  # frames, clauses, chunks
    # --- output ---
    num_samples: int = 0
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
        """`listener_is_behind` for this request."""
        return listener_is_behind(self.first_audio_time, self.audio_seconds(sample_rate),
                                  self.has_work, now)

    def slack(self, now: float, sample_rate: int) -> float:
        """Seconds of audio delivered beyond what its listener has played by `now`
        (`listener_slack`)."""
        return listener_slack(self.first_audio_time, self.audio_seconds(sample_rate), now)


def listener_is_behind(first_audio: float | None, audio_seconds: float, has_work: bool,
                       now: float) -> bool:
    """The one meaning of "behind" (engine, planner, admission, load model): the listener
    has heard audio, more is to come, and what it was sent has run out by `now` (a player
    that started at the first chunk has stalled)."""
    return first_audio is not None and has_work and listener_slack(first_audio, audio_seconds,
                                                                   now) < 0


def listener_slack(first_audio: float | None, audio_seconds: float, now: float) -> float:
    """Seconds of audio delivered beyond what a listener who started at the first chunk
    has played by `now`; -inf before the first chunk (the most urgent). Below zero the
    listener is behind (`Request.is_behind`)."""
    if first_audio is None:
        return float("-inf")
    return audio_seconds - (now - first_audio)


def clause_seed(seed: int, clause_index: int) -> int:
    """The sampling seed of a request's clause `clause_index` (per-clause seeds): the same
    clause of the same text and seed samples the same noise, wherever it runs."""
    return (seed + 0x9E3779B97F4A7C15 * (clause_index + 1)) % 2**64
