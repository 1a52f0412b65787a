"""One served model: the family, its engine, the asyncio runtime, and its voices.

This is what the HTTP server, the benchmarks and the CLI build on:

    served = load_served("pocket/english_2m")
    served.start()
    async for chunk in served.runtime.generate("Hello.", "default", served.params(seed=1)):
        ...
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import AsyncIterator
from typing import Any

import torch

from polyvox.config import EngineConfig
from polyvox.engine.async_engine import AsyncEngine
from polyvox.engine.engine import Engine, EngineError
from polyvox.request import AudioChunk
from polyvox.startup import StartupTimes

VOICE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
DEFAULT_VOICE = "default"
# How long a CPU engine waits at most, after requests arrive, for the server's event loop to
# answer them and the rest of their burst before it takes the cores (AsyncEngine's
# yield_to_loops): a step burst of 90 callers on 2 cores was refused in 47 ms at p99 with
# it, 89 without (docs/perf.md). A GPU engine's kernels leave the cores to the loop.
CPU_YIELD_SECONDS = 0.025


@dataclass
class Served:
    name: str
    family: Any
    engine: Engine
    runtime: AsyncEngine
    supports_voice_cloning: bool
    builtin_voices: set[str] = field(default_factory=set)
    param_overrides: dict[str, Any] = field(default_factory=dict)  # benchmarks: e.g. no EOS

    @property
    def sample_rate(self) -> int:
        return int(self.family.audio.sample_rate)

    def start(self) -> None:
        self.runtime.start()

    def stop(self) -> None:
        self.runtime.stop()

    def params(self, seed: int = 0, temperature: float | None = None, speed: float = 1.0) -> Any:
        """The family's per-request parameters (ValueError when out of range)."""
        check_speed(speed)
        params = self.family.make_params(seed=seed, temperature=temperature, speed=speed)
        return dataclasses.replace(params, **self.param_overrides) if self.param_overrides \
            else params

    def generate(self, text: str | AsyncIterator[str], voice: str, params: Any,
                 normalize: bool = True, word_timings: bool = False) -> AsyncIterator[AudioChunk]:
        """One request's audio chunks (AsyncEngine.generate): what the server streams.
        (`word_timings` needs nothing here: the WebSocket splits the text as the engine
        does, from text_pipeline.)"""
        return self.runtime.generate(text, voice, params, normalize=normalize)

    def voice_names(self) -> list[str]:
        return sorted(self.engine.voices)

    async def register_voice(self, name: str, prefix: Any) -> None:
        engine = self.engine
        await self.runtime.call(lambda: engine.register_voice(name, prefix.k, prefix.v))

    async def unregister_voice(self, name: str) -> None:
        engine = self.engine
        await self.runtime.call(lambda: engine.unregister_voice(name))

    async def engine_state(self) -> dict[str, Any] | None:
        """The engine's pools and queues (polyvox/server/metrics.py)."""
        from polyvox.server.metrics import engine_state

        engine = self.engine
        return await self.runtime.call(lambda: engine_state(engine))

    async def barrier(self) -> None:
        """Returns once every command queued before it ran on the engine thread (an abort
        queued by a closed stream has then freed what the stream held)."""
        await self.runtime.call(lambda: None)

    def text_pipeline(self, normalize: bool = True) -> Any:
        """The text path of a streamed request (what the WebSocket's word timings replay);
        None where the clauses' words come with the audio (a cluster ingress)."""
        return self.engine.text_pipeline(normalize)

    @property
    def samples_per_frame(self) -> int:
        return int(self.family.audio.samples_per_frame)

    def voice_from_audio(self, audio: torch.Tensor, sample_rate: int, name: str) -> Any:
        """A voice prefix from a recording (runs the codec encoder; call off the event loop
        or through runtime.call)."""
        require_voice_cloning(self)
        return self.family.voice_from_audio(audio, sample_rate, name=name)

    def voice_from_file(self, path: Path) -> Any:
        from polyvox.models.pocket.voice import load_voice_file

        require_voice_cloning(self)
        return load_voice_file(path, *self.family.kv_shape)


def check_speed(speed: float) -> None:
    """ValueError unless `speed` (OpenAI's pace) is one a server takes."""
    if not 0.25 <= speed <= 4.0:
        raise ValueError("speed must be between 0.25 and 4.0")


def require_voice_cloning(served: Any) -> None:
    """EngineError when the served model has fixed voices (no voice can be added)."""
    if not served.supports_voice_cloning:
        raise EngineError(f"{served.name} has fixed voices: adding one is not supported")


def check_voice_id(voice_id: str) -> str:
    """Voice ids are names, never paths: letters, digits, '_' and '-', at most 64."""
    if not VOICE_ID.match(voice_id):
        raise ValueError("voice id must be 1-64 letters, digits, '_' or '-', starting with a "
                         "letter or digit")
    return voice_id


def load_served(model: str, weights: str | None = None, tokenizer: str | None = None,
                config: EngineConfig | None = None, device: str = "cpu",
                seed: int = 0, precision: str = "float32",
                startup: StartupTimes | None = None) -> Served:
    """Load a model by name and put an engine around it, with its default voice; the
    seconds of each ("imports", "files read", "weights placed", "kernels": the compiled
    CPU kernels of autoregressive families, "engine") go to `startup` when given."""
    from polyvox.models.registry import import_model_code, load_model

    startup = startup or StartupTimes()
    with startup.measure("imports"):  # the model's own code (onnx, onnxruntime, ...)
        import_model_code(model)
    began = time.perf_counter()
    startup.add("files read", 0.0)  # listed even for a model with no files (random weights)
    with startup.collecting():  # the loader times its "files read"
        family = load_model(model, weights=weights, tokenizer=tokenizer, seed=seed,
                            device=device, precision=precision)
    startup.add("weights placed",
                time.perf_counter() - began - startup.phases.get("files read", 0.0))
    if device == "cpu" and family.traits.is_autoregressive:
        from polyvox.models.layers import cpu_kernels

        with startup.measure("kernels"):  # built once per machine, else loaded
            cpu_kernels.paged_decode_attention()
    with startup.measure("engine"):
        return serve_family(model, family, config, device)


def length_cap_overrides(family: Any) -> dict[str, Any]:
    """Per-request parameters that make a random-weight family run every request to its
    length cap, for benchmarks (`polyvox bench` in process, `polyvox serve --no-eos`): its
    end-of-speech head is noise, so requests would stop at random, most within a second,
    and a benchmark would measure request setup instead of streaming; at the cap, audio
    length follows the text as real speech's does. ValueError for trained weights (they
    end speech where it ends) and for a family without an end-of-speech threshold."""
    if not family.is_random:
        raise ValueError("--no-eos is for random weights (benchmarks): trained weights end "
                         "speech where the speech ends")
    if "eos_threshold" not in {f.name for f in dataclasses.fields(family.make_params())}:
        raise ValueError(f"{type(family).__name__} has no end-of-speech threshold to turn off")
    return {"eos_threshold": float("inf")}


def serve_family(model: str, family: Any, config: EngineConfig | None = None,
                 device: str = "cpu") -> Served:
    """An engine (with its default voice) around an already loaded family."""
    engine = Engine(family, config or EngineConfig(), device=device)
    empty = family.empty_voice()
    engine.register_voice(DEFAULT_VOICE, empty.k, empty.v)
    if engine.config.graphs == "cuda":
        engine.warm_up()  # capture the CUDA graphs now, not while a listener waits
    runtime = AsyncEngine(engine, yield_to_loops=CPU_YIELD_SECONDS if device == "cpu" else 0.0)
    return Served(model, family, engine, runtime,
                  supports_voice_cloning=family.traits.clones_voices,
                  builtin_voices={DEFAULT_VOICE})
