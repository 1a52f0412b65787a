"""CUDA tests: skipped without a GPU. scripts/gpu_check.sh runs them on an H200."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def exact_float32():
    """float32 means float32: no TF32 in matmuls or convolutions while a test runs."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
