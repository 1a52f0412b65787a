"""PiperModel: a Piper voice as polyvox runs it (phonemes -> front -> HiFi-GAN).

    text ─► Phonemizer ─► ids per sentence ─► PiperFront (onnxruntime) ─► z [C, T]
         ─► HiFiGan (PyTorch), whole (synthesize) or in windows (stream) ─► PCM

Sentences are synthesized independently, as piper-tts does, so at noise 0 the audio
equals piper-tts' own (un-normalized) output. One generator seeded per request draws the
noise of every sentence in turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from polyvox.models.base import AudioFormat
from polyvox.models.piper.front import FrontOutput, PiperFront, Scales, Sentence, make_generator
from polyvox.models.piper.hifigan import HiFiGan, onnx_decoder_error
from polyvox.models.piper.onnx_graph import GraphSurgeryError, VitsGraph, load_vits_graph
from polyvox.models.piper.phonemes import Phonemizer
from polyvox.models.piper.streaming import (
    PiperDecoderState,
    StreamingConfig,
    decode_windows,
    ready_windows,
)
from polyvox.models.piper.voice_files import PiperVoiceConfig, VoiceFiles, voice_files

# The PyTorch decoder must match onnxruntime's on random z (measured ~2e-6).
MAX_DECODER_ERROR = 1e-4


class PiperModel:
    """A loaded Piper voice: phonemizer, ONNX front and PyTorch HiFi-GAN."""

    def __init__(
        self,
        files: VoiceFiles,
        config: PiperVoiceConfig,
        phonemizer: Phonemizer,
        front: PiperFront,
        hifigan: HiFiGan,
    ) -> None:
        self.files = files
        self.config = config
        self.phonemizer = phonemizer
        self.front = front
        self.hifigan = hifigan
        if hifigan.hop_length != config.hop_length:
            raise GraphSurgeryError(
                f"The decoder upsamples x{hifigan.hop_length} but {files.config_path} "
                f"says hop_length {config.hop_length}."
            )

    @staticmethod
    def load(
        path: str | Path | None = None,
        device: str | torch.device = "cpu",
        num_threads: int | None = None,
        verify: bool = True,
    ) -> PiperModel:
        """Load a voice: None -> the bundled en_US-joe-medium, else a `voice.onnx` path.

        `verify` checks the PyTorch decoder against onnxruntime's on random latents,
        so a graph read wrongly fails here rather than producing noise.
        """
        files = voice_files(path)
        vits = load_vits_graph(str(files.onnx_path))
        return PiperModel.from_graph(files, vits, device, num_threads, verify)

    @staticmethod
    def from_graph(
        files: VoiceFiles,
        vits: VitsGraph,
        device: str | torch.device = "cpu",
        num_threads: int | None = None,
        verify: bool = True,
    ) -> PiperModel:
        """Build from an already loaded graph (see `load`)."""
        config = files.read_config()
        hifigan = HiFiGan.from_vits(vits).to(device).eval()
        if verify:
            error = onnx_decoder_error(hifigan, vits)
            if not error <= MAX_DECODER_ERROR:
                raise GraphSurgeryError(
                    f"The PyTorch HiFi-GAN read from {files.onnx_path} differs from the "
                    f"ONNX decoder by {error:.2e} (relative); the graph was not understood."
                )
        front = PiperFront(vits, num_threads=num_threads)
        return PiperModel(files, config, Phonemizer(config), front, hifigan)

    @property
    def sample_rate(self) -> int:
        """PCM sample rate in Hz (22050 for the joe voice)."""
        return self.config.sample_rate

    @property
    def audio(self) -> AudioFormat:
        """Output format: 22050 Hz, 256 samples per latent frame for medium voices."""
        hop = self.hifigan.hop_length
        return AudioFormat(self.sample_rate, self.sample_rate / hop, hop)

    def scales(self, speed: float = 1.0, noise: bool = True) -> Scales:
        """The voice's inference defaults; `speed` > 1 talks faster, `noise=False` is 0."""
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}.")
        return Scales(
            noise_scale=self.config.noise_scale if noise else 0.0,
            length_scale=self.config.length_scale / speed,
            noise_w=self.config.noise_w if noise else 0.0,
        )

    def sentence_ids(self, text: str) -> list[list[int]]:
        """Text -> phoneme ids, one sequence per sentence."""
        return self.phonemizer.text_to_ids(text)

    def latents(
        self, phoneme_ids: list[int], scales: Scales, generator: torch.Generator
    ) -> FrontOutput:
        """One sentence's ids -> z [C, T] (and durations), noise drawn from `generator`."""
        return self.front(
            phoneme_ids, scales.noise_scale, scales.length_scale, scales.noise_w, generator
        )

    def latents_batch(self, sentences: list[Sentence]) -> list[FrontOutput]:
        """Many sentences' z at once (see `PiperFront.run`): each equals its `latents`."""
        return self.front.run(sentences)

    @torch.inference_mode()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Whole-utterance decoding: z [C, T] -> samples [T * hop] (CPU float32)."""
        audio: torch.Tensor = self.hifigan(latents[None].to(self.hifigan.device))  # [1, T * hop]
        return audio[0].float().cpu()

    def synthesize(
        self, text: str, seed: int = 0, speed: float = 1.0, noise: bool = True
    ) -> torch.Tensor:
        """Text -> samples [N] float32 in [-1, 1], sentence by sentence."""
        scales = self.scales(speed, noise)
        generator = make_generator(seed)
        pieces = [
            self.decode(self.latents(ids, scales, generator).latents)
            for ids in self.sentence_ids(text)
        ]
        return torch.cat(pieces) if pieces else torch.zeros(0)

    def stream(
        self,
        text: str,
        seed: int = 0,
        speed: float = 1.0,
        noise: bool = True,
        first_chunk_frames: int = 8,
        chunk_frames: int = 32,
    ) -> Iterator[torch.Tensor]:
        """Text -> chunks of samples; their concatenation equals `synthesize`."""
        config = StreamingConfig(first_chunk_frames=first_chunk_frames, chunk_frames=chunk_frames)
        scales = self.scales(speed, noise)
        generator = make_generator(seed)
        for ids in self.sentence_ids(text):
            state = PiperDecoderState(config)
            state.append(self.latents(ids, scales, generator).latents, final=True)
            while windows := ready_windows(state, max_windows=1):
                yield from decode_windows(self.hifigan, windows)
