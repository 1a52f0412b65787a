"""Paired models for parity tests: the same random weights and tokenizer loaded by polyvox
and by the pocket-tts package (the numeric reference)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import yaml

from polyvox.models.pocket.config import PocketConfig, config_to_dict
from polyvox.models.pocket.loader import get_config, load_pocket
from polyvox.models.pocket.local_tokenizer import train_local_tokenizer
from polyvox.models.pocket.model import PocketModules, PocketTTS
from polyvox.models.pocket.weights import random_init

logging.getLogger("pocket_tts").setLevel(logging.ERROR)


@dataclass
class Pair:
    config: PocketConfig
    config_file: Path
    weights_file: Path
    tokenizer_file: Path
    polyvox: PocketTTS
    reference: Any  # pocket_tts.TTSModel, loaded at temperature 0


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizers")
    train_local_tokenizer(directory, "sentencepiece")
    train_local_tokenizer(directory, "tokenizers")
    return directory


def write_pair_files(config: PocketConfig, directory: Path, tokenizer_dir: Path,
                     seed: int = 0) -> tuple[Path, Path, Path]:
    """Random weights (seeded) + a pocket-tts YAML config pointing at local files."""
    kind = config.flow_lm.lookup_table.tokenizer
    tokenizer = train_local_tokenizer(tokenizer_dir, kind)
    modules = PocketModules(config)
    random_init(modules, seed)
    weights = directory / "model.safetensors"
    safetensors.torch.save_file(modules.state_dict(), str(weights))
    data = config_to_dict(config)
    data["weights_path"] = str(weights)
    data.pop("weights_path_without_voice_cloning", None)
    data["flow_lm"]["lookup_table"]["tokenizer_path"] = str(tokenizer)
    config_file = directory / f"{config.name}.yaml"
    config_file.write_text(yaml.safe_dump(data))
    return config_file, weights, tokenizer


@pytest.fixture(scope="session")
def make_pair(tmp_path_factory: pytest.TempPathFactory,
              tokenizer_dir: Path) -> Callable[..., Pair]:
    pocket_tts = pytest.importorskip("pocket_tts")
    cache: dict[str, Pair] = {}

    def make(name: str, flow_type: str | None = None) -> Pair:
        key = f"{name}:{flow_type}"
        if key not in cache:
            config = get_config(name)
            if flow_type is not None:
                flow = config.flow_lm.flow.__class__(config.flow_lm.flow.dim,
                                                     config.flow_lm.flow.depth, flow_type)
                config = config.replace(
                    flow_lm=config.flow_lm.__class__(**{**config.flow_lm.__dict__, "flow": flow}),
                    name=f"{config.name}_{flow_type}",
                )
            directory = tmp_path_factory.mktemp(config.name)
            config_file, weights, tokenizer = write_pair_files(config, directory, tokenizer_dir)
            polyvox = load_pocket(str(config_file), weights=str(weights), tokenizer=str(tokenizer))
            reference = pocket_tts.TTSModel.load_model(config=str(config_file), temp=0.0)
            cache[key] = Pair(config, config_file, weights, tokenizer, polyvox, reference)
        return cache[key]

    return make

