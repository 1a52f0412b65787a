"""Building a Pocket TTS model: config (preset or YAML file) + weights + tokenizer."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import yaml

from polyvox.models.pocket.config import PocketConfig, config_from_dict, load_config_file
from polyvox.models.pocket.local_tokenizer import train_local_tokenizer
from polyvox.models.pocket.model import PocketModules, PocketTTS
from polyvox.models.pocket.text import Tokenizer
from polyvox.models.pocket.weights import (
    from_hf_cache,
    load_checkpoint,
    random_init,
    resolve_weights,
    split_hf_uri,
)

logger = logging.getLogger(__name__)
PRESETS_FILE = Path(__file__).with_name("presets.yaml")


@functools.cache
def _presets() -> dict[str, Any]:
    with open(PRESETS_FILE, encoding="utf-8") as file:
        return dict(yaml.safe_load(file))


def preset_names() -> list[str]:
    return sorted(_presets())


def get_config(name_or_path: str) -> PocketConfig:
    """A preset name ("english_2m_2026-10", "english_2m" for short) or a YAML file path."""
    if name_or_path.endswith((".yaml", ".yml")):
        return load_config_file(name_or_path)
    presets = _presets()
    name = name_or_path
    if name not in presets:
        dated = [n for n in presets if n.startswith(name + "_20")]
        if len(dated) == 1:
            name = dated[0]
        else:
            raise KeyError(f"unknown Pocket TTS config {name_or_path!r}; known: "
                           + ", ".join(preset_names()))
    return config_from_dict(presets[name], name=name)


def resolve_tokenizer(config: PocketConfig, spec: str | None, weights: Path | None) -> Path | None:
    """The tokenizer file: `spec`, else next to the weights, else the config's path (a local
    file or a hub path found in the local cache). None if none is on this machine."""
    uri = config.flow_lm.lookup_table.tokenizer_path
    if spec:
        return Path(spec)
    filename = Path(split_hf_uri(uri)[1] if uri.startswith("hf://") else uri).name
    if weights is not None and (weights.parent / filename).is_file():
        return weights.parent / filename
    if uri.startswith("hf://"):
        return from_hf_cache(*split_hf_uri(uri))
    return Path(uri) if Path(uri).is_file() else None


def load_pocket(
    config: str | PocketConfig,
    weights: str | None = None,
    tokenizer: str | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> PocketTTS:
    """A ready PocketTTS. Without weights (none given, none cached) the model gets seeded
    random weights and a locally trained tokenizer: it runs, but speaks noise."""
    cfg = get_config(config) if isinstance(config, str) else config
    weights_file = resolve_weights(weights, cfg)
    if weights_file is None:
        modules = PocketModules(cfg)
        random_init(modules, seed)
        logger.warning("no weights for %s: using random weights (seed %d), audio will be noise",
                       cfg.name, seed)
    else:
        # Built uninitialized (its weights' memory is never touched, so never resident)
        # and given the checkpoint's tensors, memory-mapped: no initialization the
        # weights would overwrite (~0.5 s for english), no copy of them (load_checkpoint).
        # NOTE: not on the meta device: torch's meta kernels import torch._dynamo (~1.2 s).
        with _no_initialization():
            modules = PocketModules(cfg)
        load_checkpoint(modules, weights_file)
    table = cfg.flow_lm.lookup_table
    tokenizer_file = resolve_tokenizer(cfg, tokenizer, weights_file)
    if tokenizer_file is None:
        if weights_file is not None:
            raise FileNotFoundError(
                f"the tokenizer of {cfg.name} ({table.tokenizer_path}) is not on this machine: "
                "put it next to the weights file or pass --tokenizer PATH"
            )
        tokenizer_file = train_local_tokenizer(kind=table.tokenizer)
    tok = Tokenizer(tokenizer_file, table.tokenizer, table.n_bins)
    modules.to(device)
    return PocketTTS(cfg, modules, tok, is_random=weights_file is None)


@contextlib.contextmanager
def _no_initialization() -> Iterator[None]:
    """torch.nn.init's functions do nothing inside: modules keep their weights as
    allocated (uninitialized), for a checkpoint to replace."""
    names = [name for name in dir(torch.nn.init)
             if name.endswith("_") and not name.startswith("_")
             and callable(getattr(torch.nn.init, name))]
    saved = {name: getattr(torch.nn.init, name) for name in names}
    try:
        for name in names:
            setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, function in saved.items():
            setattr(torch.nn.init, name, function)

