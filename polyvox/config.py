"""Engine configuration: frozen, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("sequential", "interleaved", "batched")
CHAINING = ("chained", "pocket")


@dataclass(frozen=True)
class EngineConfig:
    """How the engine batches, pages and streams.

    schedule: sequential (one request at a time), interleaved (every admitted request
        progresses, one request's work per engine step, no tensor batching) or batched
        (continuous batching of every stage across requests).
    chaining: chained (each clause is prefilled into the same context, so prosody carries
        over; older context beyond `context_window` positions is dropped) or pocket
        (each clause restarts from the voice state with a fresh decoder, as pocket-tts).
    """

    schedule: str = "batched"
    chaining: str = "chained"
    block_size: int = 16
    num_kv_blocks: int | None = None  # None: sized from kv_memory_mb
    kv_memory_mb: float = 512.0
    max_running: int = 64  # streams that can generate at once (the decode batch cap)
    max_queued: int = 1024  # waiting requests beyond this are refused by add_request
    num_decoder_slots: int | None = None  # None: max_running
    prefill_token_budget: int = 1024  # tokens packed into one prefill batch
    # Non-autoregressive families (Piper) compute a whole clause per prefill, one request at
    # a time: a cap keeps a burst of new requests from starving running streams' decoding.
    max_clause_prefills_per_step: int = 4
    first_chunk_frames: int = 1  # small first chunk for time-to-first-audio
    chunk_frames: int = 4  # later chunks
    context_window: int = 384  # own positions kept across clauses (chained mode)
    max_clause_tokens: int = 50

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.chaining not in CHAINING:
            raise ValueError(f"chaining must be one of {CHAINING}, got {self.chaining!r}")
        for name in ("block_size", "max_running", "first_chunk_frames", "chunk_frames",
                     "prefill_token_budget", "max_clause_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.context_window < 2 * self.block_size:
            raise ValueError("context_window must cover at least two KV blocks")

    @property
    def decoder_slots(self) -> int:
        return self.num_decoder_slots or self.max_running
