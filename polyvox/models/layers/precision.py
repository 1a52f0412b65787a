"""Reduced-precision weights for the matmul-bound layers.

On CPUs with AVX512-BF16 (and on GPUs), a bfloat16 matmul reads half the weight bytes and
runs on faster units: 3-4x an fp32 one at the small batch sizes a streaming engine sees
(docs/perf.md). `lower_precision` stores the weights of every linear and convolution of a
module tree in that dtype and runs those layers in it, with fp32 activations in and out,
so that everything around them (norms, attention, the KV cache, decoder states) is
untouched.

It changes numbers (bfloat16 keeps 8 bits of mantissa): parity with a float32 reference
holds to ~1e-2, not 1e-5; batched output still equals one-at-a-time output at the same
precision, which the engine tests check.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

PRECISIONS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class LowPrecisionLinear(nn.Linear):
    """An nn.Linear whose weight (and bias) live in a lower dtype; inputs are cast to it and
    outputs cast back to the input's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = self.weight.dtype
        return F.linear(x.to(dtype), self.weight, self.bias).to(x.dtype)


class LowPrecisionConv1d(nn.Conv1d):
    """An nn.Conv1d with its weight (and bias) in a lower dtype, fp32 in and out."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = self.weight.dtype
        return self._conv_forward(x.to(dtype), self.weight, self.bias).to(x.dtype)


LOWERED: dict[type, type] = {nn.Linear: LowPrecisionLinear, nn.Conv1d: LowPrecisionConv1d}


def lower_precision(root: nn.Module, dtype: torch.dtype,
                    kinds: tuple[type, ...] = (nn.Linear, nn.Conv1d, nn.ConvTranspose1d)) -> int:
    """Store the weights of every layer of `kinds` under `root` in `dtype` (in place) and
    run those layers in it; returns how many layers changed. Transposed convolutions are
    run by their owners (pocket's streaming ones cast their input to the weight's dtype).
    Load weights before calling this: the state dict changes dtype."""
    count = 0
    for module in root.modules():
        kind = type(module)
        if kind not in kinds and not any(kind is LOWERED.get(k) for k in kinds):
            continue
        if kind in LOWERED:
            module.__class__ = LOWERED[kind]
        for name in ("weight", "bias"):
            tensor = getattr(module, name, None)
            if tensor is not None:
                tensor.data = tensor.data.to(dtype)
        count += 1
    return count


def parse_precision(name: str) -> torch.dtype:
    """`float32`, `bfloat16` or `float16` -> the torch dtype; a clear error otherwise."""
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ValueError(f"unknown precision {name!r}: use one of {sorted(PRECISIONS)}") from None
