"""Reduced-precision weights for the matmul-bound layers.

On CPUs with AVX512-BF16 (and on GPUs), a bfloat16 matmul reads half the weight bytes and
runs on faster units: 3-4x an fp32 one at the small batch sizes a streaming engine sees
(docs/perf-history.md). `lower_precision` stores the weights of every linear and convolution of a
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


def weight_key(weight: torch.Tensor) -> tuple[object, ...]:
    """Changes whenever a weight's values may have: a new tensor (another dtype or device
    included) or an in-place update. Keys caches of tensors derived from a weight."""
    return weight.data_ptr(), weight._version, weight.dtype, weight.device


class PackedLinear(nn.Linear):
    """An nn.Linear that, on CPU and outside autograd, multiplies by a copy of its weight
    kept in oneDNN's blocked layout (made once, rebuilt when the weight changes).

    `F.linear` re-reads the weight in its plain layout on every call; at a streaming
    engine's small batches (1-16 rows) the prepacked products run ~1.5x faster in
    bfloat16 and 1.5-2.5x in float32 on the project's CPU (docs/perf-history.md). The results
    are the same products summed in another order (float32: ~1e-6 relative). The plain
    weight stays the parameter, so state dicts, training and other devices are
    unchanged; the packed copy costs the layer's weight memory once more."""

    _packed: tuple[tuple[object, ...], torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self._packed_weight()
        if packed is not None and x.dtype == self.weight.dtype:
            return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def _packed_weight(self) -> torch.Tensor | None:
        weight = self.weight
        if (weight.device.type != "cpu" or not _CAN_PACK.get(weight.dtype, False)
                or (torch.is_grad_enabled() and weight.requires_grad)):
            return None
        key = weight_key(weight)
        if self._packed is None or self._packed[0] != key:
            self._packed = (key, _pack_linear(weight.detach()))
        return self._packed[1]


class LowPrecisionLinear(PackedLinear):
    """A linear layer whose weight (and bias) live in a lower dtype; inputs are cast to it
    and outputs cast back to the input's dtype (prepacked on CPU, as PackedLinear)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.to(self.weight.dtype)).to(x.dtype)


def prepack_linears(root: nn.Module) -> int:
    """Run every plain nn.Linear under `root` as a PackedLinear (in place); returns how
    many changed. For inference on CPU: elsewhere, or with autograd on, they run as
    before."""
    count = 0
    for module in root.modules():
        if type(module) is nn.Linear:
            module.__class__ = PackedLinear
            count += 1
    return count


def _pack_linear(weight: torch.Tensor) -> torch.Tensor:
    # NOTE: the batch size is only a hint for the blocked layout; any batch runs with it.
    return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_BATCH_HINT)


def _probe_packing(dtype: torch.dtype) -> bool:
    """Whether this torch build has oneDNN's prepacked linear for `dtype` and it agrees
    with F.linear (an internal op: checked, not assumed)."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        weight = torch.linspace(-1, 1, 48 * 32).reshape(48, 32).to(dtype)
        x = torch.linspace(-2, 2, 3 * 32).reshape(3, 32).to(dtype)
        out = torch.ops.mkldnn._linear_pointwise(x, _pack_linear(weight), None, "none", [], "")
        tolerance = 1e-5 if dtype == torch.float32 else 1e-2
        return bool(torch.allclose(out.float(), F.linear(x, weight).float(), rtol=tolerance,
                                   atol=tolerance))
    except Exception:  # noqa: BLE001 - missing or broken op in this build: plain F.linear
        return False


PACK_BATCH_HINT = 16
_CAN_PACK = {dtype: _probe_packing(dtype) for dtype in (torch.float32, torch.bfloat16)}


class LowPrecisionConv1d(nn.Conv1d):
    """An nn.Conv1d with its weight (and bias) in a lower dtype, fp32 in and out."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = self.weight.dtype
        return self._conv_forward(x.to(dtype), self.weight, self.bias).to(x.dtype)


LOWERED: dict[type, type] = {nn.Linear: LowPrecisionLinear, PackedLinear: LowPrecisionLinear,
                             nn.Conv1d: LowPrecisionConv1d}


def lower_precision(root: nn.Module, dtype: torch.dtype,
                    kinds: tuple[type, ...] = (nn.Linear, nn.Conv1d, nn.ConvTranspose1d)) -> int:
    """Store the weights of every layer of `kinds` under `root` in `dtype` (in place) and
    run those layers in it; returns how many layers changed. Transposed convolutions are
    run by their owners (pocket's streaming ones cast their input to the weight's dtype).
    Load weights before calling this: the state dict changes dtype."""
    count = 0
    for module in root.modules():
        kind = type(module)
        base = nn.Linear if kind is PackedLinear else kind
        if base not in kinds and not any(kind is LOWERED.get(k) for k in kinds):
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
