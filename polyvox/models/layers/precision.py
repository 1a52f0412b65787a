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
    outputs cast back to the input's dtype.

    On CPU, bfloat16 weights are also kept reordered into oneDNN's blocked layout (a copy
    made once, rebuilt when the weight changes): `F.linear` reorders them on every call,
    and at a streaming engine's small batches that costs about a third of the layer's
    time (docs/perf.md). Same products, same results; the plain weight stays the
    parameter, so state dicts are unchanged."""

    _packed: tuple[tuple[object, ...], torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = self.weight.dtype
        packed = self._packed_weight(x)
        if packed is not None:
            return torch.ops.mkldnn._linear_pointwise(
                x.to(dtype), packed, self.bias, "none", [], "").to(x.dtype)
        return F.linear(x.to(dtype), self.weight, self.bias).to(x.dtype)

    def _packed_weight(self, x: torch.Tensor) -> torch.Tensor | None:
        weight = self.weight
        if (weight.dtype != torch.bfloat16 or weight.device.type != "cpu" or not _CAN_PACK
                or (torch.is_grad_enabled() and weight.requires_grad)):
            return None
        key = (weight.data_ptr(), weight._version)
        if self._packed is None or self._packed[0] != key:
            self._packed = (key, _pack_linear(weight.detach()))
        return self._packed[1]


def _pack_linear(weight: torch.Tensor) -> torch.Tensor:
    # NOTE: the batch size is only a hint for the blocked layout; any batch runs with it.
    return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_BATCH_HINT)


def _probe_packing() -> bool:
    """Whether this torch build has oneDNN's prepacked bf16 linear and it agrees with
    F.linear (an internal op: checked, not assumed)."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        weight = torch.linspace(-1, 1, 48 * 32).reshape(48, 32).to(torch.bfloat16)
        x = torch.linspace(-2, 2, 3 * 32).reshape(3, 32).to(torch.bfloat16)
        packed = _pack_linear(weight)
        out = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        return bool(torch.allclose(out.float(), F.linear(x, weight).float(), rtol=1e-2,
                                   atol=1e-2))
    except (AttributeError, RuntimeError):
        return False


PACK_BATCH_HINT = 16
_CAN_PACK = _probe_packing()


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
