"""Server configuration: frozen, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from polyvox.config import EngineConfig

MiB = 2**20


@dataclass(frozen=True)
class ServerConfig:
    """What `polyvox serve` serves and the limits it enforces.

    Admission: at most `max_streams` streams generate at once, at most `max_queued` more
    wait for a turn (in arrival order), and a request whose estimated wait exceeds
    `max_wait_seconds` is refused with 429 (see admission.py).
    """

    model: str
    engine: EngineConfig = field(default_factory=EngineConfig)
    weights: str | None = None
    tokenizer: str | None = None
    device: str = "cpu"
    precision: str = "float32"  # or bfloat16 (pocket models; layers/precision.py)
    seed: int = 0  # random-weights seed (models without a checkpoint)
    data_dir: Path = Path("polyvox-data")
    api_key: str | None = None
    # --- admission ---
    max_streams: int = 64
    max_queued: int = 64
    max_wait_seconds: float = 0.25
    # seconds of synthetic load at a first start to learn what the engine sustains (an
    # earlier start's load model in data_dir skips it); 0: no prediction, admission by the
    # reactive limit alone
    calibrate_seconds: float = 15.0
    # a new caller's first audio is kept within 2x an idle engine's or this, whichever is
    # longer (the load model's TTFA cap and the queue's wait budget); 0: 2x idle alone
    ttfa_floor_seconds: float = 0.25
    # --- input limits ---
    max_input_chars: int = 4096  # one speech request (OpenAI's limit)
    max_stream_chars: int = 100_000  # one WebSocket utterance
    max_body_bytes: int = 1 * MiB
    max_voice_bytes: int = 10 * MiB
    max_voice_seconds: float = 30.0
    min_voice_seconds: float = 0.5
    ws_idle_seconds: float = 300.0  # a WebSocket session with no message for this long closes
    debug_state: bool = False  # expose GET /debug/state (engine pools, for tests)
    # random weights only: every request runs to its length cap (serving.length_cap_overrides)
    no_eos: bool = False

    def __post_init__(self) -> None:
        for name in ("max_streams", "max_input_chars", "max_stream_chars", "max_body_bytes",
                     "max_voice_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.max_queued < 0:
            raise ValueError("max_queued must be >= 0")
        if self.calibrate_seconds < 0:
            raise ValueError("calibrate_seconds must be >= 0")
        if self.ttfa_floor_seconds < 0:
            raise ValueError("ttfa_floor_seconds must be >= 0")
        if self.max_wait_seconds <= 0 or self.ws_idle_seconds <= 0:
            raise ValueError("max_wait_seconds and ws_idle_seconds must be > 0")
        if not 0 < self.min_voice_seconds <= self.max_voice_seconds:
            raise ValueError("need 0 < min_voice_seconds <= max_voice_seconds")
        # NOTE: the engine must never refuse what admission let through: every admitted
        # stream gets a decoder slot at once, so no stream waits inside the engine.
        if self.max_streams > self.engine.decoder_slots:
            raise ValueError(f"max_streams ({self.max_streams}) exceeds the engine's decoder "
                             f"slots ({self.engine.decoder_slots}): raise --max-running")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("the API key is empty")
