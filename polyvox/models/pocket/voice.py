"""Voices of the Pocket family: a voice is the backbone's keys and values for the voice
prompt, computed once and shared by every request that speaks with it.

Sources: a reference recording (encoded by Mimi, projected into the backbone, prefilled),
a voice state exported by pocket-tts (`export_model_state` / `pocket-tts export-voice`),
or a polyvox voice file (`save_voice`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import safetensors.torch
import torch

POLYVOX_VOICE_FORMAT = "polyvox-voice-v1"


@dataclass(frozen=True)
class VoicePrefix:
    """k, v [num_layers, length, kv_heads, head_dim]: the voice prompt's KV at positions
    0..length-1. An empty prefix (length 0) means "no voice conditioning"."""

    k: torch.Tensor
    v: torch.Tensor
    name: str = "voice"

    @property
    def length(self) -> int:
        return self.k.shape[1]


def save_voice(voice: VoicePrefix, path: str | Path) -> None:
    safetensors.torch.save_file(
        {"k": voice.k.contiguous(), "v": voice.v.contiguous()}, str(path),
        metadata={"format": POLYVOX_VOICE_FORMAT, "name": voice.name},
    )


def load_voice_file(path: str | Path, num_layers: int, kv_heads: int, head_dim: int) -> VoicePrefix:
    """Read a polyvox voice file or a pocket-tts exported voice state."""
    path = Path(path)
    tensors = safetensors.torch.load_file(str(path))
    if set(tensors) == {"k", "v"}:
        k, v = tensors["k"], tensors["v"]
    else:
        k, v = _from_pocket_state(tensors, num_layers, path)
    expected = (num_layers, kv_heads, head_dim)
    if (k.shape[0], k.shape[2], k.shape[3]) != expected or k.shape != v.shape:
        raise ValueError(
            f"voice {path} has KV of shape {tuple(k.shape)}, this model needs "
            f"[{num_layers}, length, {kv_heads}, {head_dim}]: it was made for another model"
        )
    return VoicePrefix(k.float(), v.float(), name=path.stem)


def _from_pocket_state(tensors: dict[str, torch.Tensor], num_layers: int,
                       path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """pocket-tts state: "transformer.layers.{i}.self_attn/cache" [2, 1, T, Hkv, D] and
    ".../offset" (or the older ".../current_end", whose length is the offset)."""
    ks, vs = [], []
    for layer in range(num_layers):
        prefix = f"transformer.layers.{layer}.self_attn/"
        if prefix + "cache" not in tensors:
            raise ValueError(f"{path} is not a voice state: no {prefix}cache "
                             "(expected a pocket-tts export or a polyvox voice file)")
        cache = tensors[prefix + "cache"]
        if prefix + "offset" in tensors:
            length = int(tensors[prefix + "offset"].reshape(-1)[0])
        elif prefix + "current_end" in tensors:
            length = tensors[prefix + "current_end"].shape[0]
        else:
            length = cache.shape[2]
        ks.append(cache[0, 0, :length])
        vs.append(cache[1, 0, :length])
    return torch.stack(ks), torch.stack(vs)


def read_audio(path: str | Path) -> tuple[torch.Tensor, int]:
    """Mono float32 samples [N] and the sample rate of an audio file."""
    import soundfile

    try:
        data, sample_rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except Exception as error:
        raise ValueError(f"cannot read audio file {path}: {error}") from None
    return torch.from_numpy(np.ascontiguousarray(data.mean(axis=1))), int(sample_rate)


def resample(audio: torch.Tensor, from_rate: int, to_rate: int) -> torch.Tensor:
    """Polyphase resampling [..., N] (scipy's resample_poly, as pocket-tts does)."""
    if from_rate == to_rate:
        return audio
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(from_rate, to_rate)
    out = resample_poly(audio.numpy(), to_rate // g, from_rate // g, axis=-1)
    return torch.from_numpy(np.ascontiguousarray(out)).to(audio.dtype)


def end_on_pause(audio: torch.Tensor, sample_rate: int, pause: float = 0.08, fade: float = 0.02,
                 floor_db: float = 35.0) -> torch.Tensor:
    """Trim trailing silence (20 ms frames more than floor_db below the loudest), fade the
    last `fade` seconds out and append `pause` seconds of silence: prompts that end on
    speech make the model continue that speech. audio [N] -> [M]."""
    frame = max(1, int(0.02 * sample_rate))
    frames = audio.shape[-1] // frame
    if frames == 0:
        return audio
    rms = audio[: frames * frame].reshape(frames, frame).square().mean(dim=1).sqrt()
    level = 20 * torch.log10(rms + 1e-12)
    loud = torch.nonzero(level > level.max() - floor_db).flatten()
    end = (int(loud[-1]) + 1) * frame
    audio = audio[:end].clone()
    fade_len = min(int(fade * sample_rate), end)
    audio[end - fade_len:] *= torch.linspace(1, 0, fade_len, dtype=audio.dtype)
    return torch.cat([audio, audio.new_zeros(int(pause * sample_rate))])
