"""Compiled CPU kernels for what torch has no fast path for, each with a plain-torch reference.

Built once per machine from the C++ below with `torch.utils.cpp_extension.load_inline`
(gcc, OpenMP, ninja; cached under torch's extension directory, ~30 s the first time, ~1 s
after). Where the build is not possible (no compiler, another OS, a GPU-only install) or
`POLYVOX_CPU_KERNELS=0`, the getters return None and callers keep the plain-torch path.
The engine builds them when it is constructed (`Runner`), never in the middle of a
request.

Kernels:

- `paged_decode`: attention of decode rows (one query per row) straight over the paged
  KV pool. The plain path gathers every key and value a row reads into a contiguous
  buffer, then SDPA reads them again with a 4 KB stride per head. Here each row walks its
  slots once, reading each slot's keys (all heads, one contiguous run) for the scores and
  then its values for the output: one pass over the keys and values, at memory speed.
  Rows are independent (parallel over rows), so a row's output never depends on its
  batch neighbours.
- `elu_bf16`: ELU of a bfloat16 tensor at memory speed. ATen's bfloat16 ELU runs its
  `expm1` at ~1 element per ns on this CPU (~13% of a Mimi decoder call); here exp is a
  vectorized polynomial (Cephes' expf, ~1 float32 ulp) and tiny inputs take the Taylor
  series, so the result rounds to ATen's except at a rare rounding boundary (1 bf16 ulp).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// q [B, H, D] float32; k, v: one layer of the pool [S, Hkv, D] float32, contiguous;
// slots [N] int64: row b reads slots[offsets[b] : offsets[b + 1]] (any order).
// Returns softmax(q k^T * scale) v per row and head, [B, H, D].
torch::Tensor paged_decode(torch::Tensor q, torch::Tensor k, torch::Tensor v,
                           torch::Tensor slots, torch::Tensor offsets, double scale) {
  TORCH_CHECK(q.dtype() == torch::kFloat32 && k.dtype() == torch::kFloat32
              && v.dtype() == torch::kFloat32, "paged_decode: float32 only");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous()
              && slots.is_contiguous() && offsets.is_contiguous(),
              "paged_decode: contiguous tensors only");
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t kv_heads = k.size(1), num_slots = k.size(0);
  TORCH_CHECK(k.size(2) == dim && heads % kv_heads == 0, "paged_decode: shapes");
  TORCH_CHECK(offsets.size(0) == rows + 1, "paged_decode: offsets");
  const int64_t group = heads / kv_heads, stride = kv_heads * dim;
  auto out = torch::zeros({rows, heads, dim}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t* op = offsets.data_ptr<int64_t>();
  float* outp = out.data_ptr<float>();
  const float fscale = static_cast<float>(scale);
  for (int64_t i = 0; i < slots.size(0); ++i) {
    TORCH_CHECK(sp[i] >= 0 && sp[i] < num_slots, "paged_decode: slot out of range");
  }
  at::parallel_for(0, rows, 1, [&](int64_t row_begin, int64_t row_end) {
  for (int64_t b = row_begin; b < row_end; ++b) {
    const int64_t first = op[b], count = op[b + 1] - op[b];
    std::vector<float> scores(static_cast<size_t>(count * heads));
    const float* qb = qp + b * heads * dim;
    for (int64_t i = 0; i < count; ++i) {
      const float* key = kp + sp[first + i] * stride;
      for (int64_t h = 0; h < heads; ++h) {
        const float* kh = key + (h / group) * dim;
        const float* qh = qb + h * dim;
        float acc = 0.f;
        #pragma omp simd reduction(+:acc)
        for (int64_t d = 0; d < dim; ++d) acc += qh[d] * kh[d];
        scores[h * count + i] = acc * fscale;
      }
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* s = scores.data() + h * count;
      float top = -INFINITY;
      for (int64_t i = 0; i < count; ++i) top = std::max(top, s[i]);
      float total = 0.f;
      for (int64_t i = 0; i < count; ++i) { s[i] = std::exp(s[i] - top); total += s[i]; }
      const float inverse = 1.f / total;
      for (int64_t i = 0; i < count; ++i) s[i] *= inverse;
    }
    float* ob = outp + b * heads * dim;
    for (int64_t i = 0; i < count; ++i) {
      const float* value = vp + sp[first + i] * stride;
      for (int64_t h = 0; h < heads; ++h) {
        const float p = scores[h * count + i];
        const float* vh = value + (h / group) * dim;
        float* oh = ob + h * dim;
        #pragma omp simd
        for (int64_t d = 0; d < dim; ++d) oh[d] += p * vh[d];
      }
    }
  }
  });
  return out;
}

// exp(x) - 1 for x <= 0 in float32: Cephes' expf polynomial after range reduction,
// Taylor terms near 0 (where exp(x) - 1 would cancel).
static inline float expm1_nonpositive(float x) {
  x = x < -87.f ? -87.f : x;
  const float shifter = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const float taylor = x * (1.f + x * (0.5f + x * (1.f / 6.f)));  // keeps -0 as -0
  return x > -1e-3f ? taylor : e * scale - 1.f;
}

// ELU (alpha 1) of a contiguous bfloat16 tensor, computed in float32 and rounded to
// nearest even, as ATen does.
torch::Tensor elu_bf16(torch::Tensor x) {
  TORCH_CHECK(x.dtype() == torch::kBFloat16 && x.is_contiguous(), "elu_bf16: bf16, contiguous");
  auto out = torch::empty_like(x);
  const uint16_t* in = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  uint16_t* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  at::parallel_for(0, x.numel(), 32768, [in, o](int64_t begin, int64_t end) {
    // NOTE: local restrict pointers: loads through the closure keep GCC from vectorizing.
    const uint16_t* __restrict src = in;
    uint16_t* __restrict dst = o;
    #pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
      float v;
      std::memcpy(&v, &bits, sizeof(v));
      const float y = v > 0.f ? v : expm1_nonpositive(v);
      uint32_t r;
      std::memcpy(&r, &y, sizeof(r));
      const bool nan = (r & 0x7fffffffu) > 0x7f800000u;
      r += 0x7fffu + ((r >> 16) & 1u);
      dst[i] = nan ? static_cast<uint16_t>(bits >> 16) : static_cast<uint16_t>(r >> 16);
    }
  });
  return out;
}
"""


def _ninja_on_path() -> bool:
    """torch builds extensions with ninja; the `ninja` wheel puts it next to the venv's
    python, which is not on PATH when the venv is not activated."""
    for directory in (os.path.dirname(sys.executable), _ninja_wheel_bin()):
        if directory and directory not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = directory + os.pathsep + os.environ.get("PATH", "")
    return shutil.which("ninja") is not None


def _ninja_wheel_bin() -> str | None:
    try:
        import ninja  # type: ignore[import-not-found]
    except ImportError:
        return None
    return getattr(ninja, "BIN_DIR", None)


def can_build() -> bool:
    """Whether this machine should build the kernels: Linux with g++, not switched off.
    Where this holds and a getter still returns None, the build failed (logged)."""
    return (os.environ.get("POLYVOX_CPU_KERNELS", "1") != "0"
            and sys.platform.startswith("linux") and shutil.which("g++") is not None)


@functools.cache
def _module() -> object | None:
    if not can_build():
        return None
    if not _ninja_on_path():
        log.warning("compiled CPU kernels unavailable (ninja not found): plain torch paths")
        return None
    from torch.utils.cpp_extension import load_inline

    # NOTE: built for this CPU (-march=native): the name carries the source and the CPU's
    # feature flags, so a cache shared with another kind of machine is never reused.
    digest = hashlib.sha1((_SOURCE + _cpu_flags()).encode()).hexdigest()[:12]
    try:
        return load_inline(f"polyvox_cpu_kernels_{digest}", cpp_sources=_SOURCE,
                           functions=["paged_decode", "elu_bf16"],
                           extra_cflags=["-O3", "-march=native", "-fopenmp"],
                           extra_ldflags=["-fopenmp"])
    except Exception as error:  # any build problem: keep the plain path, say why once
        log.warning("compiled CPU kernels unavailable (%s): plain torch paths", error)
        return None


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return ""


def paged_decode_attention() -> Callable[..., torch.Tensor] | None:
    """The compiled paged decode attention (see the module docstring), or None.

    (q [B, H, D], k_layer, v_layer [S, Hkv, D], slots [N], offsets [B + 1], scale) ->
    [B, H, D]; float32, CPU."""
    module = _module()
    return None if module is None else module.paged_decode  # type: ignore[attr-defined]


def elu_bf16() -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The compiled bfloat16 ELU (alpha 1; contiguous CPU input), or None."""
    module = _module()
    return None if module is None else module.elu_bf16  # type: ignore[attr-defined]
