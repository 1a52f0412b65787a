"""The engine's load model on disk (polyvox/engine/load.py), so that a restarted server
admits from what it learned instead of starting cautious: one JSON file per model,
precision, device and thread count under the data directory, written atomically."""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from pathlib import Path

import torch

from polyvox.engine.load import LoadModel
from polyvox.server.config import ServerConfig

log = logging.getLogger(__name__)


def load_file(config: ServerConfig) -> Path:
    """Where this server's load model is kept: what it sustains depends on the model, its
    precision, the device and the threads it runs on."""
    key = (f"{config.model}-{config.precision}-{config.device}-"
           f"{torch.get_num_threads()}threads-{os.cpu_count()}cpus")
    return config.data_dir / "load" / (re.sub(r"[^A-Za-z0-9_.-]", "_", key) + ".json")


def restore(model: LoadModel, path: Path) -> None:
    """Start `model` from `path` if there is a valid one there (else it starts cold)."""
    try:
        model.restore(json.loads(path.read_text()))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:  # a broken file is ignored, then replaced
        log.warning("ignoring the saved load model %s: %s", path, error)
        return
    log.info("admission starts from the saved load model %s (capacity %d streams)", path,
             model.capacity())


def save(model: LoadModel, path: Path) -> None:
    """Write `model` to `path` atomically (a killed process leaves the old file whole)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp",
                                         delete=False) as file:
            json.dump(model.state(), file)
        os.replace(file.name, path)
    except OSError as error:
        log.warning("cannot save the load model to %s: %s", path, error)
