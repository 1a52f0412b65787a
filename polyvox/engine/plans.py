"""What a planner reads and returns: the contract between the engine and its planners.

`Streams.view` takes a `View` (one `StreamView` per admitted stream); a planner
(planner.py, baselines.py) returns a `WorkPlan`, then `Chunk`s; `Rules` are the family's
facts and the engine's settings a planner needs. All immutable.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Protocol

from polyvox.engine.costs import StageCosts
from polyvox.request import listener_is_behind, listener_slack


class StreamView(NamedTuple):
    """One admitted stream as the planner sees it."""

    key: Any  # the engine's handle (its Request); the planner never looks inside
    arrival: float
    first_audio: float | None  # when its first chunk went out (None: not yet)
    audio_seconds: float  # audio delivered so far
    running: bool  # holds its KV blocks (not swapped out)
    has_work: bool  # text to prefill, a clause generating or frames to decode
    generating: bool  # a clause is being generated (takes AR steps)
    prefill_tokens: int | None  # may start its next clause now: its tokens (None: no)
    ready: int  # frames waiting for the decoder
    to_clause_end: int | None  # frames until a finished clause's end (None: none finished)
    decoded_in_clause: int  # frames decoded since its decoder last (re)started
    rest_frames: int  # a clause computed in pieces: frames still to compute
    lookahead: int | None = None  # frames its decoder reads after a chunk (None: the rules')

    def slack(self, now: float) -> float:
        return listener_slack(self.first_audio, self.audio_seconds, now)

    def is_behind(self, now: float) -> bool:
        return listener_is_behind(self.first_audio, self.audio_seconds, self.has_work, now)

    @property
    def is_playing(self) -> bool:
        return self.first_audio is not None


class View(NamedTuple):
    """The streams in admission order, and the decode tick's clock."""

    streams: tuple[StreamView, ...]
    ar_steps: int = 0  # AR steps taken so far (this step's included in phase two)
    stepped: bool = False  # phase two: this step ran an AR step
    turn: int = 0  # steps planned with streams admitted (the interleaved baseline's turn)


class Chunk(NamedTuple):
    """A decoder chunk: `frames` new frames of stream `key`, with `lookahead` frames after
    them and `history` before them read by the decoder."""

    key: Any
    frames: int
    lookahead: int = 0
    history: int = 0

    @property
    def window_frames(self) -> int:
        return self.history + self.frames + self.lookahead


class WorkPlan(NamedTuple):
    """Phase one's decisions (what the engine applies before the AR step) and what phase
    two needs of them."""

    prefills: tuple[Any, ...]  # in order; the engine stops at the first that does not fit
    steps: tuple[Any, ...]  # streams taking an AR step (running order)
    rests: tuple[Any, ...]  # clauses in pieces whose rest is computed now
    starting: bool  # a stream awaits its first audio
    overloaded: bool
    budget: float  # seconds this step may take
    deadline: float  # when it should end


@dataclasses.dataclass(frozen=True)
class Rules:
    """What the planner needs of the family and the engine's settings. Four of these are
    tuning knobs (margin, first_audio_step, first_audio_wait, max_step); the rest is what
    the family is and how the engine is sized."""

    autoregressive: bool
    frame_seconds: float
    lookahead: int = 0
    max_history: int = 0
    first_chunk: int = 1
    chunk: int = 4
    max_chunk: int = 4
    min_chunk: int = 1
    max_running: int = 64
    prefill_token_budget: int = 1024
    tick: bool = True  # AR streams with time to spare share a decode tick (set: make_planner_of)
    margin: float = 0.05
    first_audio_step: float = 0.15
    first_audio_wait: float | None = 0.1
    max_step: float = 0.25

    @classmethod
    def of(cls, config: Any, family: Any) -> Rules:
        traits = family.traits
        return cls(
            autoregressive=traits.is_autoregressive,
            frame_seconds=1.0 / family.audio.frame_rate, lookahead=traits.decoder_lookahead,
            max_history=traits.decoder_history, first_chunk=config.first_chunk_frames,
            chunk=config.chunk_frames, max_chunk=config.max_chunk_frames,
            min_chunk=config.min_chunk_frames, max_running=config.max_running,
            prefill_token_budget=config.prefill_token_budget,
            margin=config.delivery_margin_seconds,
            first_audio_step=config.first_audio_step_seconds,
            first_audio_wait=config.first_audio_wait_seconds,
            max_step=config.max_step_seconds)


class Planner(Protocol):
    max_admitted: int | None  # streams admitted at once (None: as memory allows)

    def plan_work(self, view: View, now: float, costs: StageCosts) -> WorkPlan: ...

    def plan_decodes(self, view: View, now: float, costs: StageCosts,
                     work: WorkPlan) -> list[Chunk]: ...
