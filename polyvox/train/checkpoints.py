"""Training checkpoints (resume) and the exported student (serving).

A checkpoint (`checkpoint.pt`) holds everything a resumed run needs: weights, optimizer
moments, the step, both configs. It is written to a temporary file and renamed, so a run
killed mid-write leaves the previous checkpoint intact.

The export is what ships: `model.safetensors` with the FlowLM's tensors under pocket-tts'
TTSModel names (`flow_lm.*`, as PocketModules names them) and the student's YAML config
beside it (`config.yaml`, `weights_path: model.safetensors`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import safetensors.torch
import torch
import yaml

from polyvox.models.pocket.flow_lm import FlowLM
from polyvox.models.pocket.weights import load_strict
from polyvox.train.student import StudentConfig, build_student, config_to_dict, load_config

CHECKPOINT = "checkpoint.pt"
WEIGHTS = "model.safetensors"
CONFIG = "config.yaml"
PREFIX = "flow_lm."


def save_checkpoint(out: Path, state: dict[str, Any]) -> Path:
    path = out / CHECKPOINT
    temporary = path.with_suffix(".tmp")
    torch.save(state, temporary)
    temporary.rename(path)
    return path


def load_checkpoint(out: Path) -> dict[str, Any] | None:
    path = out / CHECKPOINT
    if not path.exists():
        return None
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    return state


def export_student(flow_lm: FlowLM, config: StudentConfig, out: Path,
                   matrices: torch.dtype | None = None) -> tuple[Path, Path]:
    """Write `model.safetensors` (flow_lm.* keys) and `config.yaml` under `out`.

    `matrices=torch.float16` stores the weight matrices (2-D and up) in half precision,
    halving the file; vectors (norms, biases, latent statistics) stay float32. Loading
    converts back to the model's dtype."""
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, tensor in flow_lm.state_dict().items():
        tensor = tensor.detach().contiguous().clone()
        if matrices is not None and tensor.dim() >= 2 and tensor.is_floating_point():
            tensor = tensor.to(matrices)
        tensors[PREFIX + name] = tensor
    weights = out / WEIGHTS
    safetensors.torch.save_file(tensors, str(weights), metadata={"model": config.name})
    data = config_to_dict(config)
    data["weights_path"] = WEIGHTS
    config_path = out / CONFIG
    config_path.write_text(yaml.safe_dump(data, sort_keys=False))
    return weights, config_path


def read_student_weights(flow_lm: FlowLM, weights: str | Path,
                         keep_missing: tuple[str, ...] = ()) -> None:
    """Load an export's flow_lm.* tensors into `flow_lm`, strictly (names the first
    missing, unexpected or misshapen key). Keys starting with a `keep_missing` prefix
    may be absent from the file: they keep the model's values (a student that gained a
    module since the export, e.g. `prior_proj`, zero at init)."""
    tensors = safetensors.torch.load_file(str(weights))
    unprefixed = {name.removeprefix(PREFIX): tensor for name, tensor in tensors.items()
                  if name.startswith(PREFIX)}
    if len(unprefixed) != len(tensors):
        extra = sorted(set(tensors) - {PREFIX + name for name in unprefixed})
        raise ValueError(f"{weights}: keys outside flow_lm.* ({extra[0]!r}): not a student export")
    for name, tensor in flow_lm.state_dict().items():
        if name not in unprefixed and name.startswith(keep_missing):
            unprefixed[name] = tensor
    load_strict(flow_lm, unprefixed, str(weights))


def load_student(config_path: str | Path,
                 weights: str | Path | None = None) -> tuple[StudentConfig, FlowLM]:
    """A config file and its weights (its `weights_path`, relative to the file, unless
    `weights` is given) -> the student, strictly loaded, in eval mode."""
    config_path = Path(config_path)
    config = load_config(config_path)
    if weights is None:
        if config.weights_path is None:
            raise FileNotFoundError(f"{config_path} names no weights (weights_path) and none "
                                    "were given: train them with python -m polyvox.train.distill")
        weights = config_path.parent / config.weights_path
    flow_lm = build_student(config)
    read_student_weights(flow_lm, weights)
    return config, flow_lm.eval()
