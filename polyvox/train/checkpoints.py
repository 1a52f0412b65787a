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

from polyvox.models.joe_ar.network import PREFIX, StudentConfig, config_to_dict
from polyvox.models.pocket.flow_lm import FlowLM

CHECKPOINT = "checkpoint.pt"
WEIGHTS = "model.safetensors"
CONFIG = "config.yaml"


def save_checkpoint(out: Path, state: dict[str, Any]) -> Path:
    path = out / CHECKPOINT
    temporary = path.with_suffix(".tmp")
    torch.save(state, temporary)
    temporary.rename(path)
    return path


def save_policy(out: Path, policy: FlowLM, optimizer: torch.optim.Optimizer, step: int,
                config: StudentConfig) -> Path:
    """A post-training run's checkpoint (DPO, GRPO): the policy, its optimizer, the step."""
    return save_checkpoint(out, {"model": policy.state_dict(),
                                 "optimizer": optimizer.state_dict(), "step": step,
                                 "student": config_to_dict(config)})


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
        tensor = tensor.detach().cpu().contiguous().clone()
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


def refuse_pointer_students(family: Any, init: Path, method: str) -> None:
    """Post-training (DPO, GRPO) moves the flow head's samples; a pointer student
    (`pointer_width` in its config: the shipped voice since session 28) does not speak
    through them, so training it that way changes nothing it says."""
    if getattr(family, "pointer_head", None) is not None:
        raise ValueError(
            f"{init} is a pointer student: {method} trains the flow head's samples, which it "
            "does not speak through. Give a sampling student's export (a config without "
            "pointer_width beside it), e.g. v5: git show "
            "6644b0a:polyvox/models/pocket/joe_ar.safetensors (docs/posttrain.md)")
