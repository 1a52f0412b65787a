"""Compiled CPU kernels for what torch has no fast path for, each with a plain-torch reference.

Built from the C++ below with `torch.utils.cpp_extension.load_inline` (gcc, OpenMP,
ninja; ~30 s the first time, well under a second to load after). Where the build is not
possible (no compiler, another OS, a GPU-only install) or `POLYVOX_CPU_KERNELS=0`, the
getters return None and callers keep the plain-torch path. The engine builds them when it
is constructed (`Runner`), never in the middle of a request.

The build is cached once per machine and torch version, shared by every virtual
environment: `$POLYVOX_KERNEL_CACHE` if set, else `$XDG_CACHE_HOME/polyvox/kernels`
(`~/.cache/polyvox/kernels`), then `torch-<version>-<python abi>/polyvox_cpu_kernels_<digest>`,
the digest covering the source, the CPU's feature flags, the compiler and its flags.

- A build runs in a fresh `<name>.build-*` directory next to that one and is renamed into
  place only once it has built and loaded, with a `BUILT` marker: a directory without the
  marker is never loaded, and torch's own `lock` file stays in the discarded temporary.
- Builders hold `fcntl.flock` on `<name>.lock` (which records their pid). The kernel drops
  it when the holder dies, so a build interrupted by Ctrl-C or a kill blocks nothing: the
  next start takes the lock, clears the leftovers and builds again.
- While another live process builds, a start does not wait: the getters return None (one
  warning names the builder) and this process keeps the plain-torch paths to its end; the
  next start loads the kernels. NOTE: the outcome is decided once per process, because the
  `Runner` takes its kernel at construction and `ELU` asks on every call: picking the
  kernels up later would load a library mid-request and change bf16 rounding mid-stream.

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
import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

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
    Where this holds and a getter still returns None, the build failed or another live
    process was building it at this process's start (both logged)."""
    return (os.environ.get("POLYVOX_CPU_KERNELS", "1") != "0"
            and sys.platform.startswith("linux") and shutil.which("g++") is not None)


_FUNCTIONS = ["paged_decode", "elu_bf16"]
_CFLAGS = ["-O3", "-march=native", "-fopenmp"]
_LDFLAGS = ["-fopenmp"]
_MARKER = "BUILT"  # written last, before the rename; holds the module's name
_first_call = threading.Lock()


def cache_directory() -> Path:
    """Where this machine's build of the kernels lives (see the module docstring); its
    name is also the extension module's name."""
    root = os.environ.get("POLYVOX_KERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "polyvox", "kernels")
    # NOTE: built for this CPU (-march=native) by this compiler: the digest carries both,
    # so a cache shared with another kind of machine is never reused.
    key = "\0".join([_SOURCE, _cpu_flags(), _compiler_version(), *_CFLAGS, *_LDFLAGS])
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    abi = f"torch-{torch.__version__}-{sys.implementation.cache_tag}"
    return Path(root) / abi / f"polyvox_cpu_kernels_{digest}"


def _module() -> object | None:
    with _first_call:  # one outcome per process, even when threads ask at once
        return _module_once()


@functools.cache
def _module_once() -> object | None:
    if not can_build():
        return None
    if not _ninja_on_path():
        log.warning("compiled CPU kernels unavailable (ninja not found): plain torch paths")
        return None
    directory = None
    try:
        directory = cache_directory()
        return _load_or_build(directory)
    except Exception as error:  # any build problem: keep the plain path, say why once
        log.warning("compiled CPU kernels unavailable (%s): plain torch paths; the cache is "
                    "%s (POLYVOX_KERNEL_CACHE moves it; deleting it rebuilds)", error, directory)
        return None


def _load_or_build(directory: Path) -> object | None:
    """The finished build in `directory`, else a fresh one built under the lock, or None
    while another live process holds the lock."""
    if (directory / _MARKER).is_file():
        return _load(directory)
    import fcntl  # Linux only, as can_build() is

    directory.parent.mkdir(parents=True, exist_ok=True)
    # "a+": create if missing, never truncate what a live holder wrote.
    with open(directory.with_name(directory.name + ".lock"), "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            owner = lock.read().strip() or "another process"
            log.warning("compiled CPU kernels are being built by %s (%s): plain torch paths in "
                        "this process, the next start loads them", owner, directory)
            return None
        if (directory / _MARKER).is_file():  # finished between our check and the lock
            return _load(directory)
        lock.truncate(0)
        lock.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        lock.flush()
        # NOTE: the kernel drops a flock when its holder dies, so while we hold it no one
        # else builds: an unmarked directory or a temporary next to it is an interrupted
        # build's.
        for leftover in directory.parent.glob(directory.name + ".build-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)
        return _build(directory)


def _build(directory: Path) -> object:
    """Builds in a fresh temporary next to `directory` (so torch's own `lock` file never
    outlives an interrupted build) and renames it into place once built and loaded."""
    from torch.utils.cpp_extension import load_inline

    log.info("building the compiled CPU kernels into %s (~30 s, once per machine)", directory)
    staging = tempfile.mkdtemp(prefix=directory.name + ".build-", dir=directory.parent)
    try:
        module = load_inline(directory.name, cpp_sources=_SOURCE, functions=_FUNCTIONS,
                             extra_cflags=_CFLAGS, extra_ldflags=_LDFLAGS,
                             build_directory=staging)
        Path(staging, _MARKER).write_text(module.__name__ + "\n")
        os.chmod(staging, 0o755)  # mkdtemp's 0o700 would hide it from a shared cache's users
        os.replace(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already when the rename happened
    return module


def _load(directory: Path) -> object:
    name = (directory / _MARKER).read_text().strip()
    spec = importlib.util.spec_from_file_location(name, directory / f"{name}.so")
    if spec is None or spec.loader is None:
        raise ImportError(f"no extension module {name} in {directory}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return ""


def _compiler_version() -> str:
    compiler = os.environ.get("CXX", "c++")  # the compiler torch builds with
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.partition("\n")[0]
    except (OSError, subprocess.SubprocessError):
        return compiler


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
