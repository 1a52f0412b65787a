"""Export a training run's latest checkpoint as a servable student.

    polyvox train export --run DIR --out DIR [--half]

Writes OUT/model.safetensors and OUT/config.yaml (checkpoints.export_student). Serve or
judge it with `--weights OUT/model.safetensors`: the config beside the weights is used
(a student trained with a pace input needs its own config). `--half` stores the weight
matrices in float16 (what ships: half the file, the same WER; docs/distill.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from polyvox.models.joe_ar.network import build_student, config_from_dict
from polyvox.train.checkpoints import export_student, load_checkpoint


def export_run(run: Path, out: Path, half: bool = False) -> tuple[Path, int]:
    """The run's latest checkpoint under `out`; returns the weights' path and the step."""
    state = load_checkpoint(run)
    if state is None:
        raise FileNotFoundError(f"no checkpoint in {run}")
    student = config_from_dict(state["student"])
    model = build_student(student)
    model.load_state_dict(state["model"])
    weights, _ = export_student(model, student, out, torch.float16 if half else None)
    return weights, int(state["step"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="training run directory")
    parser.add_argument("--out", type=Path, required=True, help="export directory")
    parser.add_argument("--half", action="store_true", help="float16 weight matrices")
    args = parser.parse_args(argv)
    weights, step = export_run(args.run, args.out, args.half)
    print(f"step {step} -> {weights}")


if __name__ == "__main__":
    main()
