"""The Pocket TTS family in engine form: loading, voices, and the three stages.

    prefill  voice prefix + clause tokens -> the request's KV store
    step     one latent frame (+ EOS logit) per call
    decode   latent frames -> PCM, with per-request Mimi state (delta output)

`stream()` drives the stages for one request, one chunk at a time, exactly as pocket-tts
generates (the `pocket-compatible` mode: every text chunk starts again from the voice
state with a fresh decoder). The engine (polyvox.engine) drives the same stages for many
requests at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from polyvox.models.base import AudioFormat, ClausePlan, FamilyTraits, KVSpec
from polyvox.models.layers.attention import ContiguousKV
from polyvox.models.pocket.config import PocketConfig
from polyvox.models.pocket.convs import DecoderState
from polyvox.models.pocket.flow_lm import FlowLM, FlowLMStages
from polyvox.models.pocket.mimi import Mimi
from polyvox.models.pocket.text import Tokenizer, prepare_text, split_into_chunks
from polyvox.models.pocket.voice import VoicePrefix, end_on_pause, resample

MIN_FRAMES_BEFORE_EOS = 6  # EOS is ignored on the first frames (pocket-tts' rule)
TOKENS_PER_SECOND = 3.0  # for the length cap: tokens / 3 + 2 seconds
PADDING_SECONDS = 2.0
FADE_IN_SECONDS = 1 / 200  # a fresh decoder clicks: its first 5 ms are faded in


@dataclass(frozen=True)
class GenerationParams:
    """Per-request sampling settings. None means the model config's default."""

    temperature: float | None = None
    eos_threshold: float | None = None
    frames_after_eos: int | None = None
    sampler_steps: int = 1
    noise_clamp: float | None = None
    seed: int = 0
    max_tokens_per_chunk: int = 50

    def __post_init__(self) -> None:
        if self.temperature is not None and not 0 <= self.temperature <= 10:
            raise ValueError("temperature must be between 0 and 10")
        if self.sampler_steps < 1:
            raise ValueError("sampler_steps must be >= 1")


class PocketModules(nn.Module):
    """The parameter tree, named as in pocket-tts' TTSModel checkpoints."""

    def __init__(self, config: PocketConfig) -> None:
        super().__init__()
        self.flow_lm = FlowLM(config.flow_lm, config.latent_dim, config.voice_latent_dim)
        self.mimi = Mimi(config.mimi)


class PocketTTS(FlowLMStages):
    # NOTE: a first chunk of 2 frames (160 ms) costs one step of time to first audio over
    # 1 frame, but leaves the listener a buffer that survives a busy step: at 4 streams on
    # 2 cores every stream stayed real-time with 2, a third of them with 1 (docs/perf-history.md).
    PREFERRED_SETTINGS = {"first_chunk_frames": 2}

    def __init__(self, config: PocketConfig, modules: PocketModules, tokenizer: Tokenizer,
                 is_random: bool) -> None:
        self.config, self.modules, self.tokenizer = config, modules, tokenizer
        self.flow_lm, self.mimi = modules.flow_lm, modules.mimi
        self.is_random = is_random  # True: random weights, the audio is noise
        mimi = config.mimi
        self.audio = AudioFormat(mimi.sample_rate, mimi.frame_rate, mimi.samples_per_frame)
        backbone = config.flow_lm.transformer
        self.kv_shape = (backbone.num_layers, backbone.kv_heads, backbone.head_dim)
        self.kv_spec = KVSpec(*self.kv_shape, dtype=torch.float32)
        self.latent_dim = config.latent_dim
        self.traits = FamilyTraits(
            is_autoregressive=True, clones_voices=True,
            fade_in_samples=int(self.audio.sample_rate * FADE_IN_SECONDS),
            preferred_settings=self.PREFERRED_SETTINGS)
        modules.eval()

    @property
    def sample_rate(self) -> int:
        return self.audio.sample_rate

    @property
    def device(self) -> torch.device:
        return self.flow_lm.bos_emb.device

    # --- voices -------------------------------------------------------------------------

    def empty_voice(self) -> VoicePrefix:
        layers, heads, dim = self.kv_shape
        empty = torch.zeros(layers, 0, heads, dim, device=self.device)
        return VoicePrefix(empty, empty.clone(), name="none")

    @torch.no_grad()
    def voice_from_audio(self, audio: torch.Tensor, sample_rate: int,
                         name: str = "voice") -> VoicePrefix:
        """A voice from a mono recording [N] at any sample rate."""
        if audio.numel() == 0:
            raise ValueError("the voice recording is empty")
        audio = resample(audio.float().cpu(), sample_rate, self.sample_rate)
        audio = end_on_pause(audio, self.sample_rate).to(self.device)
        latents = self.mimi.encode(audio[None, None])[0]  # [frames, inner_dim]
        prefix = self.flow_lm.embed_voice(latents)  # [P, d]
        kv = ContiguousKV(*self.kv_shape, dtype=prefix.dtype, device=self.device)
        self.flow_lm.prefill(prefix[None], kv.next_positions(prefix.shape[0]), kv)
        kv.commit()
        k, v = kv.prefix()
        return VoicePrefix(k, v, name=name)

    # --- stages -------------------------------------------------------------------------

    def tokenize(self, chunk: str) -> tuple[torch.Tensor, int]:
        """A chunk of text -> (token ids [T] on the host, pocket-tts' frames-after-EOS
        guess)."""
        prepared = prepare_text(chunk, self.config)
        ids = self.tokenizer.encode(prepared.text)
        return torch.tensor(ids, dtype=torch.long), prepared.frames_after_eos_guess + 2

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, kv: ContiguousKV) -> None:
        """Append a clause's text tokens [T] to the request's context."""
        embeddings = self.flow_lm.embed_text(tokens.to(self.device))[None]
        self.flow_lm.prefill(embeddings, kv.next_positions(tokens.shape[0]), kv)
        kv.commit()

    @torch.no_grad()
    def step(self, latent: torch.Tensor, kv: ContiguousKV, noise: torch.Tensor,
             sampler_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """latent [1, D] (NaN = first step) -> (next latent [1, D], EOS logit [1])."""
        positions = kv.next_positions(1)[:, 0]
        out = self.flow_lm.step(latent, positions, kv, noise, sampler_steps)
        kv.commit()
        return out

    def new_decoder_state(self, batch_size: int = 1) -> DecoderState:
        return self.mimi.new_decoder_state(batch_size, self.device)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """Generated latents [B, T, D] -> PCM [B, T * samples_per_frame] (new samples only)."""
        return self.mimi.decode(self.flow_lm.denormalize(latents), state)

    # --- the engine's stage protocol (polyvox.models.base.ModelFamily) -------------------

    def make_params(self, seed: int = 0, temperature: float | None = None,
                    speed: float = 1.0) -> GenerationParams:
        """Per-request parameters. Pocket TTS has no speed control: speed must be 1."""
        if speed != 1.0:
            raise ValueError(f"{self.config.name} cannot change speed; use speed 1.0")
        return GenerationParams(temperature=temperature, seed=seed)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    def split_like_reference(self, text: str, max_tokens: int) -> list[str]:
        return split_into_chunks(text, self.tokenizer, self.config, max_tokens)

    def plan_clause(self, text: str, params: GenerationParams) -> ClausePlan:
        tokens, guess = self.tokenize(text)
        after_eos = params.frames_after_eos
        if after_eos is None:
            after_eos = self.config.model_recommended_frames_after_eos
        if after_eos is None:
            after_eos = guess
        return ClausePlan(tokens, after_eos, self.max_frames(tokens.shape[0]))

    def eos_threshold(self, params: GenerationParams) -> float:
        if params.eos_threshold is None:
            return self.config.default_eos_threshold
        return params.eos_threshold

    def temperature(self, params: GenerationParams) -> float:
        if params.temperature is None:
            return self.config.default_temperature
        return params.temperature

    def sample_noise(self, generator: torch.Generator, params: GenerationParams) -> torch.Tensor:
        return self._host_noise(generator, self.temperature(params), params.noise_clamp)[0]

    def decoder_state_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.mimi.decoder_state_shapes()

    # --- one request, start to finish ---------------------------------------------------

    def max_frames(self, num_tokens: int) -> int:
        seconds = num_tokens / TOKENS_PER_SECOND + PADDING_SECONDS
        return math.ceil(seconds * self.audio.frame_rate)

    def noise(self, generator: torch.Generator, temperature: float,
              clamp: float | None) -> torch.Tensor:
        """Sampler noise [1, D] ~ N(0, temperature), optionally truncated to [-clamp, clamp],
        on the model's device."""
        return self._host_noise(generator, temperature, clamp).to(self.device)

    def _host_noise(self, generator: torch.Generator, temperature: float,
                    clamp: float | None) -> torch.Tensor:
        noise = torch.empty(1, self.config.latent_dim)
        std = temperature**0.5
        if clamp is None:
            noise.normal_(0.0, std, generator=generator)
        else:
            nn.init.trunc_normal_(noise, 0.0, std, -clamp, clamp, generator=generator)
        return noise

    @torch.no_grad()
    def generate_chunk_latents(self, chunk: str, voice: VoicePrefix,
                               params: GenerationParams,
                               generator: torch.Generator) -> Iterator[torch.Tensor]:
        """Latent frames [1, D] of one text chunk, starting from the voice state."""
        plan = self.plan_clause(chunk, params)
        tokens, after_eos = plan.tokens, plan.frames_after_eos
        threshold = self.eos_threshold(params)
        kv = ContiguousKV.from_prefix(voice.k, voice.v) if voice.length else \
            ContiguousKV(*self.kv_shape, dtype=torch.float32, device=self.device)
        self.prefill(tokens, kv)
        latent = torch.full((1, self.config.latent_dim), float("nan"), device=self.device)
        eos_at: int | None = None
        for index in range(plan.max_frames):
            noise = self.sample_noise(generator, params)[None].to(self.device)
            latent, eos_logit = self.step(latent, kv, noise, params.sampler_steps)
            if eos_at is None and index >= MIN_FRAMES_BEFORE_EOS and eos_logit.item() > threshold:
                eos_at = index
            if eos_at is not None and index >= eos_at + after_eos:
                return
            yield latent

    @torch.no_grad()
    def stream(self, text: str, voice: VoicePrefix | None = None,
               params: GenerationParams | None = None,
               frames_per_chunk: int = 1) -> Iterator[torch.Tensor]:
        """PCM chunks [N] of `text`, pocket-compatible: each text chunk restarts from the
        voice state with a fresh decoder. `frames_per_chunk` latents per decoder call."""
        params = params or GenerationParams()
        voice = voice if voice is not None else self.empty_voice()
        generator = torch.Generator().manual_seed(params.seed)
        for chunk in split_into_chunks(text, self.tokenizer, self.config,
                                       params.max_tokens_per_chunk):
            state = self.new_decoder_state()
            fade = torch.linspace(0, 1, int(self.sample_rate * FADE_IN_SECONDS), device=self.device)
            pending: list[torch.Tensor] = []
            for latent in self.generate_chunk_latents(chunk, voice, params, generator):
                pending.append(latent)
                if len(pending) == frames_per_chunk:
                    pcm, fade = self._decode_pending(pending, state, fade)
                    pending = []
                    yield pcm
            if pending:
                yield self._decode_pending(pending, state, fade)[0]

    def _decode_pending(self, pending: list[torch.Tensor], state: DecoderState,
                        fade: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pcm = self.decode(torch.stack(pending, dim=1), state)[0]
        count = min(fade.numel(), pcm.numel())
        pcm[:count] *= fade[:count]
        return pcm, fade[count:]

    def synthesize(self, text: str, voice: VoicePrefix | None = None,
                   params: GenerationParams | None = None) -> torch.Tensor:
        """The whole utterance as one PCM tensor [N]."""
        chunks = list(self.stream(text, voice, params, frames_per_chunk=10_000))
        return torch.cat(chunks) if chunks else torch.zeros(0)


def load_voice_path(model: PocketTTS, path: str | Path) -> VoicePrefix:
    """A voice from an audio file or a voice-state safetensors file."""
    from polyvox.models.pocket.voice import load_voice_file, read_audio

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"voice file not found: {path}")
    if path.suffix == ".safetensors":
        return load_voice_file(path, *model.kv_shape)
    audio, sample_rate = read_audio(path)
    return model.voice_from_audio(audio, sample_rate, name=path.stem)
