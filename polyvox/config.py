"""Engine configuration: frozen, validated at construction."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

SCHEDULES = ("sequential", "interleaved", "batched")
CHAINING = ("chained", "audio", "pocket")
PRECISIONS = ("float32", "bfloat16", "float16")  # --precision (layers/precision.py)
GRAPHS = ("off", "shaped", "cuda")
# Batch sizes the step and decoder run at when graphs are on: a batch is padded up to the
# next one, so a handful of shapes (and captured CUDA graphs) serve every batch size.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Chunking (and chained context) defaults when neither the config nor the family says
# otherwise.
FALLBACKS: dict[str, int | None] = {
    "first_chunk_frames": 1, "chunk_frames": 4, "max_chunk_frames": None, "min_chunk_frames": 1,
    "max_clause_tokens": 50, "first_clause_tokens": None, "context_window": 384,
}


def device_settings(device: str, graphs: str = "auto", overlap: str = "auto") -> dict[str, object]:
    """The EngineConfig fields that follow the device: on CUDA, captured graphs and the
    overlapped loop unless told otherwise; on the CPU, plain eager steps."""
    cuda = str(device).split(":")[0] == "cuda"
    if overlap not in ("auto", "on", "off"):
        raise ValueError(f"overlap must be auto, on or off, got {overlap!r}")
    return {"graphs": ("cuda" if cuda else "off") if graphs == "auto" else graphs,
            "overlap": cuda if overlap == "auto" else overlap == "on"}


def add_device_arguments(group: Any) -> None:
    """--graphs and --overlap: how the engine drives a GPU (docs/gpu.md)."""
    group.add_argument("--graphs", default="auto", choices=["auto", "off", "shaped", "cuda"],
                       help="fixed-shape stages: cuda = captured CUDA graphs, shaped = the "
                       "same shapes run eagerly (auto: cuda on a GPU, off on the CPU)")
    group.add_argument("--overlap", default="auto", choices=["auto", "on", "off"],
                       help="launch each step before the last one's results are read back "
                       "(auto: on for a GPU)")


def add_chaining_argument(group: Any) -> None:
    """--chaining: how a request's clauses share a context (EngineConfig.chaining)."""
    group.add_argument("--chaining", choices=CHAINING, default=None,
                       help="chained: each clause continues the context of the ones before; "
                       "audio: the same, but only their generated steps are kept; pocket: a "
                       "fresh context per clause (default: the model's preference)")


@dataclass(frozen=True)
class EngineConfig:
    """How the engine batches, pages and streams.

    schedule: sequential (one request at a time), interleaved (every admitted request
        progresses, one request's work per engine step, no tensor batching) or batched
        (continuous batching of every stage across requests).
    chaining: chained (each clause is prefilled into the same context, so prosody carries
        over; older context beyond `context_window` positions is dropped), audio (chained,
        but of the clauses before only their generated steps are kept, their text tokens
        dropped in whole KV blocks: a student trained for it stops repeating an earlier
        clause, docs/posttrain.md) or pocket (each clause restarts from the voice state
        with a fresh decoder, as pocket-tts).
        None: the family's preference (`traits.preferred_settings`), else chained.
    """

    schedule: str = "batched"
    chaining: str | None = None
    block_size: int = 16
    num_kv_blocks: int | None = None  # None: sized from kv_memory_mb
    kv_memory_mb: float = 512.0
    max_running: int = 64  # streams that can generate at once (the decode batch cap)
    max_queued: int = 1024  # waiting requests beyond this are refused by add_request
    num_decoder_slots: int | None = None  # None: max_running
    prefill_token_budget: int = 1024  # tokens packed into one prefill batch
    # Chunking and clause length: None takes the family's preference (a family attribute
    # `traits.preferred_settings`, e.g. Piper's windowed decoder wants longer chunks), then
    # FALLBACKS. `Engine` resolves them with `for_family`.
    first_chunk_frames: int | None = None  # small first chunk for time-to-first-audio
    chunk_frames: int | None = None  # later chunks, while a listener's buffer is short
    max_chunk_frames: int | None = None  # chunks grow up to this as the buffer builds up
    # A listener close to running dry gets what is ready rather than a full chunk, but not
    # less than this: a decoder with a fixed cost per call (a windowed one) falls behind
    # on chunks of one frame, and its listeners would never build a buffer.
    min_chunk_frames: int | None = None
    max_clause_tokens: int | None = None
    first_clause_tokens: int | None = None  # a text's first clause ends at a comma past this
    # Own positions kept across clauses (chained mode): a new clause is prefilled after the
    # last `context_window` positions (whole KV blocks) of what the request spoke before.
    context_window: int | None = None
    # Each step is kept shorter than the audio the most pressed on-time listener has
    # buffered, less this margin for delivery (polyvox/engine/planner.py).
    delivery_margin_seconds: float = 0.05
    # While a request waits for its first audio, a step takes at most about this long.
    first_audio_step_seconds: float = 0.15
    # An autoregressive request that would have waited this long for its first audio by
    # the end of one more engine step (as the engine has timed its steps) takes its first
    # chunk as soon as `min_chunk_frames` are ready, not `first_chunk_frames`: under
    # a burst its first audio comes a step sooner, from a smaller decoder call (the others
    # awaiting first audio then take theirs in the same call). A lone
    # request on an idle engine is quicker than this and keeps the larger first chunk.
    # None: always `first_chunk_frames`.
    first_audio_wait_seconds: float | None = 0.1
    max_step_seconds: float = 0.25  # decoder work beyond this waits for the next step
    # Families that can (Piper) compute a request's first clause in pieces: the first
    # chunk's frames at once, the rest in a later step (sooner first audio, ~8 ms more work).
    clause_pieces: bool = True
    # Fixed shapes for the AR step and the decoder (see polyvox.engine.graphs): off (plain
    # eager calls at the batch's own shape), shaped (padded to a bucket, static buffers,
    # run eagerly: the CPU-testable twin of `cuda`), cuda (captured CUDA graphs, replayed).
    graphs: str = "off"
    batch_buckets: tuple[int, ...] = BATCH_BUCKETS
    # The overlapped loop: the next step is launched before the last one's end-of-speech
    # decisions and audio are read back (one step late), so the host's bookkeeping runs
    # while the device computes. Audio is identical; each chunk is delivered a step later.
    overlap: bool = False

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.chaining is not None and self.chaining not in CHAINING:
            raise ValueError(f"chaining must be one of {CHAINING}, got {self.chaining!r}")
        for name in ("block_size", "max_running", "prefill_token_budget", *FALLBACKS):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1")
        if (self.chunk_frames and self.max_chunk_frames
                and self.max_chunk_frames < self.chunk_frames):
            raise ValueError("max_chunk_frames must be >= chunk_frames")
        if self.graphs not in GRAPHS:
            raise ValueError(f"graphs must be one of {GRAPHS}, got {self.graphs!r}")
        if not self.batch_buckets or list(self.batch_buckets) != sorted(set(self.batch_buckets)) \
                or self.batch_buckets[0] < 1:
            raise ValueError("batch_buckets must be increasing positive sizes")
        if self.graphs != "off" and self.batch_buckets[-1] < self.max_running:
            raise ValueError(f"the largest batch bucket ({self.batch_buckets[-1]}) must hold "
                             f"max_running ({self.max_running}) streams")
        if self.first_audio_wait_seconds is not None and self.first_audio_wait_seconds < 0:
            raise ValueError("first_audio_wait_seconds must be >= 0 (or None)")
        if self.context_window is not None and self.context_window < 2 * self.block_size:
            raise ValueError("context_window must cover at least two KV blocks")

    def for_family(self, family: Any) -> EngineConfig:
        """This config with every unset chunking field, chaining and the context window
        filled: the family's preference, else FALLBACKS (max_chunk_frames falls back to
        chunk_frames: no growth; chaining to chained)."""
        preferred = family.traits.preferred_settings
        values = {name: getattr(self, name) for name in FALLBACKS}
        for name, fallback in FALLBACKS.items():
            if values[name] is None:
                values[name] = preferred.get(name, fallback)
        if values["max_chunk_frames"] is None:
            values["max_chunk_frames"] = values["chunk_frames"]
        values["max_chunk_frames"] = max(values["max_chunk_frames"], values["chunk_frames"])
        values["min_chunk_frames"] = min(values["min_chunk_frames"], values["chunk_frames"])
        chaining = self.chaining or preferred.get("chaining", "chained")
        return dataclasses.replace(self, chaining=chaining, **values)

    @property
    def decoder_slots(self) -> int:
        return self.num_decoder_slots or self.max_running
