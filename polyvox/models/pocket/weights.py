"""Pocket TTS weights: strict loading of pocket-tts checkpoints, offline resolution of
where they are, and the seeded random initialization used without them.

A checkpoint is one safetensors file in pocket-tts' `TTSModel` layout (`flow_lm.*`,
`mimi.*`). Loading is strict: every key must be consumed and every shape must match; the
error names the first offending key.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import safetensors.torch
import torch
from torch import nn

from polyvox.models.pocket.config import PocketConfig
from polyvox.startup import startup_part

# safetensors' dtype names -> torch dtypes (those a Pocket checkpoint may hold)
_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
           "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


class WeightsError(ValueError):
    """A checkpoint that does not fit the model, or one that cannot be found."""


def load_strict(model: nn.Module, tensors: dict[str, torch.Tensor], source: str,
                assign: bool = False) -> None:
    """Copy `tensors` into `model`, demanding an exact match of keys and shapes.
    `assign`: the model takes the tensors themselves where their dtype is the model's
    (memory-mapped weights stay mapped), copies of the others."""
    expected = model.state_dict()
    for key in sorted(expected):
        if key not in tensors:
            raise WeightsError(f"{source}: missing key {key!r} (shape {tuple(expected[key].shape)})")
    for key in sorted(tensors):
        if key not in expected:
            raise WeightsError(f"{source}: unexpected key {key!r}: this checkpoint does not fit "
                               "the chosen config (pick the matching --model)")
    for key in sorted(expected):
        if tuple(tensors[key].shape) != tuple(expected[key].shape):
            raise WeightsError(
                f"{source}: key {key!r} has shape {tuple(tensors[key].shape)}, the config "
                f"expects {tuple(expected[key].shape)} (pick the matching --model)"
            )
    converted = {key: value.to(expected[key].dtype) for key, value in tensors.items()}
    model.load_state_dict(converted, strict=True, assign=assign)


def map_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, memory-mapped (copy-on-write, never written
    back): nothing is read until used, and processes on one machine that map the same
    file share its pages in the page cache. A tensor whose bytes are not aligned to its
    element size (the format allows it) is copied instead."""
    with open(path, "rb") as file:
        (header_size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(header_size))
        # The bytes go to the page cache now (the mapping then shares those pages), so
        # reading the files is its own phase of a start, not spread over the first uses.
        block = bytearray(16 << 20)
        while file.readinto(block):
            pass
    size = path.stat().st_size
    storage = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=size)
    start = 8 + header_size
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = _DTYPES[entry["dtype"]], entry["shape"]
        begin, end = (start + offset for offset in entry["data_offsets"])
        if end > size:
            raise ValueError(f"tensor {name!r} runs past the end of the file")
        itemsize = torch.empty(0, dtype=dtype).element_size()
        flat = torch.empty(0, dtype=dtype)
        if begin % itemsize:  # unaligned: a copy of its bytes
            raw = torch.empty(0, dtype=torch.uint8).set_(storage, begin, (end - begin,))
            tensors[name] = raw.clone().view(dtype).reshape(shape)
            continue
        tensors[name] = flat.set_(storage, begin // itemsize, tuple(shape))
    return tensors


def load_checkpoint(model: nn.Module, path: Path, mmap: bool = True) -> None:
    """Load a checkpoint strictly. The model takes the file's tensors themselves where
    their dtype is the model's (so a model built on the meta device works); `mmap` (the
    default): those tensors are memory-mapped, else read by safetensors."""
    try:
        with startup_part("files read"):
            tensors = map_safetensors(path) if mmap else safetensors.torch.load_file(str(path))
    except Exception as error:  # safetensors and json raise their own error types
        raise WeightsError(f"{path}: not a readable safetensors file ({error})") from None
    load_strict(model, tensors, str(path), assign=True)


def split_hf_uri(uri: str) -> tuple[str, str, str | None]:
    """hf://owner/repo/path/in/repo[@revision] -> (repo_id, filename, revision)."""
    rest = uri.removeprefix("hf://")
    revision = None
    if "@" in rest:
        rest, revision = rest.rsplit("@", 1)
    parts = rest.split("/")
    return "/".join(parts[:2]), "/".join(parts[2:]), revision


def from_hf_cache(repo_id: str, filename: str, revision: str | None = None) -> Path | None:
    """A file of a Hugging Face repo if it is already in the local cache (never downloads)."""
    from huggingface_hub import try_to_load_from_cache

    for rev in ([revision] if revision else []) + [None]:
        found = try_to_load_from_cache(repo_id, filename, revision=rev)
        if isinstance(found, str):
            return Path(found)
    return None


def _config_filename(config: PocketConfig) -> str:
    uri = config.weights_path or config.weights_path_without_voice_cloning
    return split_hf_uri(uri)[1] if uri and uri.startswith("hf://") else "model.safetensors"


def resolve_weights(spec: str | None, config: PocketConfig) -> Path | None:
    """Where the weights are: `spec` is a file, a directory, or a Hugging Face repo id looked
    up in the local cache; None means the config's own hub paths, if cached.

    Returns None when `spec` is None and nothing is cached (random weights are used then);
    raises WeightsError, saying what is needed and where, when `spec` names nothing usable.
    """
    filename = _config_filename(config)
    if spec is None:
        for uri in (config.weights_path, config.weights_path_without_voice_cloning):
            if uri and uri.startswith("hf://"):
                found = from_hf_cache(*split_hf_uri(uri))
                if found is not None:
                    return found
        return None
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        for candidate in (path / filename, path / "model.safetensors", path / Path(filename).name):
            if candidate.is_file():
                return candidate
        raise WeightsError(
            f"no weights in directory {path}: put the model's safetensors file there as "
            f"'model.safetensors' (or '{filename}')"
        )
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        for name in (filename, "model.safetensors"):
            found = from_hf_cache(spec, name)
            if found is not None:
                return found
        raise WeightsError(
            f"Hugging Face repo {spec!r} has no '{filename}' in the local cache (polyvox never "
            f"downloads). On a machine with access run `huggingface-cli download {spec} "
            f"{filename}`, then copy ~/.cache/huggingface to this machine, or pass --weights "
            "with the path of the safetensors file."
        )
    raise WeightsError(
        f"weights not found: {spec!r} is neither a file, a directory, nor a Hugging Face repo id. "
        f"Pass the pocket-tts checkpoint ('{filename}', a safetensors file in TTSModel layout)."
    )


@torch.no_grad()
def random_init(model: nn.Module, seed: int) -> None:
    """Seeded random weights with sensible scales (tests, benchmarks; the audio is noise).

    Matrices ~ N(0, 1/fan_in); norm gains ~ 1, biases ~ 0, layer scales ~ 0.01; the latent
    statistics stay positive. The same seed always gives the same weights.
    """
    generator = torch.Generator().manual_seed(seed)
    for name, tensor in sorted(model.state_dict().items()):
        if name.endswith("freqs") or not tensor.is_floating_point():
            continue  # deterministic buffers keep their computed values

        def normal(std: float, mean: float = 0.0) -> torch.Tensor:
            sample = torch.randn(tensor.shape, generator=generator) * std + mean
            return sample.to(tensor.dtype)

        leaf = name.rsplit(".", 1)[-1]
        if name.endswith("emb_std"):
            value = normal(0.2, 1.0).abs() + 0.1
        elif leaf == "scale":  # LayerScale
            value = normal(0.002, 0.01)
        elif leaf in ("bias", "emb_mean") or (leaf == "weight" and tensor.dim() == 1):
            base = 1.0 if leaf == "weight" else 0.0
            value = normal(0.05, base)
        elif leaf == "alpha":
            value = normal(0.05, 1.0)
        elif name.endswith("embed.weight") or tensor.dim() == 1 or "bos" in name:
            value = normal(1.0)
        else:
            fan_in = tensor[0].numel() if tensor.dim() > 1 else tensor.numel()
            # NOTE: the fed-back latent enters weakly; at full scale the random AR loop is
            # chaotic and float rounding alone makes two correct implementations diverge.
            gain = 0.01 if "input_linear" in name else 1.0
            if name.startswith("flow_lm.transformer") and "linear1" in name:
                gain = 0.3  # a random feed-forward at full gain makes the AR loop chaotic too
            value = normal(gain * fan_in**-0.5)
        tensor.copy_(value)
