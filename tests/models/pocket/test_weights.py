"""Strict checkpoint loading, weight resolution and their error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.torch
import torch

from polyvox.models.pocket.loader import get_config, load_pocket
from polyvox.models.pocket.local_tokenizer import train_local_tokenizer
from polyvox.models.pocket.model import PocketModules
from polyvox.models.pocket.weights import WeightsError, load_strict, random_init, resolve_weights


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, dict[str, torch.Tensor]]:
    modules = PocketModules(get_config("english_2m"))
    random_init(modules, 4)
    tensors = {k: v.clone() for k, v in modules.state_dict().items()}
    path = tmp_path_factory.mktemp("ckpt") / "model.safetensors"
    safetensors.torch.save_file(tensors, str(path))
    return path, tensors


def test_checkpoint_round_trips(checkpoint) -> None:
    path, tensors = checkpoint
    model = load_pocket("english_2m", weights=str(path), tokenizer=str(train_local_tokenizer()))
    assert not model.is_random
    for key, value in model.modules.state_dict().items():
        assert torch.equal(value, tensors[key]), key
    # built uninitialized and given the mapped file: nothing initialized, nothing copied
    assert len({p.untyped_storage().data_ptr() for p in model.modules.parameters()}) == 1


def test_missing_key_is_named(checkpoint) -> None:
    _, tensors = checkpoint
    broken = dict(tensors)
    del broken["flow_lm.out_eos.bias"]
    with pytest.raises(WeightsError, match=r"missing key 'flow_lm.out_eos.bias'"):
        load_strict(PocketModules(get_config("english_2m")), broken, "ckpt")


def test_unexpected_key_is_named(checkpoint) -> None:
    _, tensors = checkpoint
    broken = dict(tensors) | {"flow_lm.extra.weight": torch.zeros(3)}
    with pytest.raises(WeightsError, match=r"unexpected key 'flow_lm.extra.weight'"):
        load_strict(PocketModules(get_config("english_2m")), broken, "ckpt")


def test_shape_mismatch_is_named(checkpoint) -> None:
    _, tensors = checkpoint
    broken = dict(tensors) | {"flow_lm.bos_emb": torch.zeros(64)}
    with pytest.raises(WeightsError, match=r"key 'flow_lm.bos_emb' has shape \(64,\).*\(32,\)"):
        load_strict(PocketModules(get_config("english_2m")), broken, "ckpt")


def test_checkpoint_of_another_config_is_refused(checkpoint) -> None:
    path, _ = checkpoint
    with pytest.raises(WeightsError, match="key"):
        load_pocket("english_7m", weights=str(path))


def test_weights_from_a_directory(checkpoint) -> None:
    path, _ = checkpoint
    assert resolve_weights(str(path.parent), get_config("english_2m")) == path


def test_empty_directory_says_what_file_is_needed(tmp_path) -> None:
    with pytest.raises(WeightsError, match="model.safetensors"):
        resolve_weights(str(tmp_path), get_config("english_2m"))


def test_uncached_hub_repo_explains_what_to_do(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(WeightsError, match="languages/english/model.safetensors"):
        resolve_weights("kyutai/pocket-tts", get_config("english"))


def test_nonexistent_path_is_an_error(tmp_path) -> None:
    with pytest.raises(WeightsError, match="not found"):
        resolve_weights(str(tmp_path / "nope" / "x.safetensors"), get_config("english_2m"))


def test_missing_tokenizer_is_explained(checkpoint) -> None:
    path, _ = checkpoint
    with pytest.raises(FileNotFoundError, match="tokenizer.*--tokenizer"):
        load_pocket("english_2m", weights=str(path))


def test_garbage_file_is_an_error(tmp_path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsError, match="not a readable safetensors"):
        load_pocket("english_2m", weights=str(bad))


def test_random_init_is_seeded() -> None:
    a, b, c = (PocketModules(get_config("english_2m")) for _ in range(3))
    random_init(a, 1)
    random_init(b, 1)
    random_init(c, 2)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["flow_lm.input_linear.weight"], sc["flow_lm.input_linear.weight"])


def test_without_weights_the_model_is_marked_random(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert load_pocket("english_2m").is_random


def test_mapped_checkpoint_is_the_file_and_the_model_keeps_it_mapped(checkpoint) -> None:
    """Weights are memory-mapped: every float32 weight of the loaded model lies in one
    mapping of the file (replicas on a machine share its pages), and equals the file."""
    from polyvox.models.pocket.weights import load_checkpoint, map_safetensors

    path, tensors = checkpoint
    mapped = map_safetensors(path)
    assert mapped.keys() == tensors.keys()
    for key, value in mapped.items():
        assert value.dtype == tensors[key].dtype and torch.equal(value, tensors[key]), key
    modules = PocketModules(get_config("english_2m"))
    load_checkpoint(modules, path)
    storages = {p.untyped_storage().data_ptr() for p in modules.parameters()}
    assert len(storages) == 1  # one mapping, not one copy per tensor
    (storage,) = {p.untyped_storage().nbytes() for p in modules.parameters()}
    assert storage == path.stat().st_size
    copied = PocketModules(get_config("english_2m"))
    load_checkpoint(copied, path, mmap=False)
    for (name, a), b in zip(modules.state_dict().items(), copied.state_dict().values()):
        assert torch.equal(a, b), name


def test_mapping_reads_every_dtype_and_unaligned_tensors(tmp_path: Path) -> None:
    import json
    import struct

    from polyvox.models.pocket.weights import map_safetensors

    tensors = {"half": torch.arange(3, dtype=torch.float16),
               "single": torch.linspace(-1, 1, 6).reshape(2, 3),
               "brain": torch.ones(2, dtype=torch.bfloat16), "index": torch.arange(2),
               "flag": torch.tensor([True, False])}
    aligned = tmp_path / "aligned.safetensors"
    safetensors.torch.save_file(tensors, str(aligned))
    for key, value in map_safetensors(aligned).items():
        assert value.dtype == tensors[key].dtype and torch.equal(value, tensors[key]), key
    # by hand: the float32 tensor starts 6 bytes in (after 3 halves), off its alignment
    data = tensors["half"].numpy().tobytes() + tensors["single"].numpy().tobytes()
    header = json.dumps({"half": {"dtype": "F16", "shape": [3], "data_offsets": [0, 6]},
                         "single": {"dtype": "F32", "shape": [2, 3],
                                    "data_offsets": [6, 30]}}).encode()
    header += b" " * (-len(header) % 8)
    unaligned = tmp_path / "unaligned.safetensors"
    unaligned.write_bytes(struct.pack("<Q", len(header)) + header + data)
    read = map_safetensors(unaligned)
    assert torch.equal(read["single"], tensors["single"]) and torch.equal(read["half"],
                                                                         tensors["half"])
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    from polyvox.models.pocket.weights import load_checkpoint

    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        load_checkpoint(PocketModules(get_config("english_2m")), broken)
