"""What this machine can do, measured in the run that uses it (../shared/BENCHMARKS.md).

- The matmul ceiling: GFLOP/s of a large square matmul (compute bound), measured in every
  precision the run's rows ran in, because efficiency divides a row's model FLOP/s by the
  ceiling **in that row's precision** (a bfloat16 run by the bfloat16 ceiling).
- 1-row and 16-row GEMMs against a large fp32 weight: bound by memory bandwidth.

A ceiling is the best of a few timed runs after a warm-up: noise only slows a machine
down, so the best run is the closest to what it can do.

NOTE: float32 means what the run's float32 matmuls do. torch leaves TF32 off for CUDA
matmuls unless a program turns it on (`torch.backends.cuda.matmul.allow_tf32`, or
`torch.set_float32_matmul_precision`); polyvox does not, so a float32 row is divided by a
true-fp32 ceiling. The ceiling is measured under the process's setting, whatever it is,
and the setting is recorded (`float32_matmul_precision`, `cuda_matmul_tf32`), so the
numerator and the denominator always ran the same arithmetic. (cuDNN convolutions follow
their own flag, `cudnn_tf32`, recorded too: on by default in torch.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch


@contextmanager
def _num_threads(threads: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _best_seconds(fn: Callable[[], Any], repeats: int, min_seconds: float = 0.05) -> float:
    """Seconds per call of `fn`, best of `repeats` timings of enough calls to last
    `min_seconds` each (so timer resolution and call overhead do not matter)."""
    fn()  # warm up: allocation, thread pool start
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-9)
    calls = max(1, math.ceil(min_seconds / once))
    best = math.inf
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def _timed(fn: Callable[[], Any], device: str) -> Callable[[], Any]:
    """`fn` that returns only when its work is done (GPU work runs asynchronously)."""
    if torch.device(device).type != "cuda":
        return fn

    def synced() -> Any:
        out = fn()
        torch.cuda.synchronize(device)
        return out

    return synced


def matmul_ceiling(threads: int, size: int = 2048, repeats: int = 5,
                   dtype: torch.dtype = torch.float32, device: str = "cpu") -> float:
    """GFLOP/s of a [size, size] @ [size, size] matmul in `dtype` on `threads` threads
    (or on a GPU, with a larger matrix: a 2048 one is too small to fill it)."""
    if torch.device(device).type == "cuda":
        size = max(size, 8192)
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    out = torch.empty(size, size, dtype=dtype, device=device)
    with _num_threads(threads), torch.no_grad():
        seconds = _best_seconds(_timed(lambda: torch.mm(a, b, out=out), device), repeats)
    return 2 * size**3 / seconds / 1e9


def _gemm_seconds(threads: int, rows: int, size: int, repeats: int,
                  device: str = "cpu") -> float:
    weight = torch.randn(size, size, device=device)
    x = torch.randn(rows, size, device=device)
    with _num_threads(threads), torch.no_grad():
        return _best_seconds(_timed(lambda: torch.nn.functional.linear(x, weight), device),
                             repeats)


def gemv_ceiling(threads: int, rows: int = 1, size: int = 4096, repeats: int = 5,
                 device: str = "cpu") -> float:
    """GFLOP/s of x [rows, size] through a [size, size] fp32 weight (as nn.Linear runs):
    with few rows the weight is read once per call, so memory bandwidth bounds it."""
    return 2 * rows * size * size / _gemm_seconds(threads, rows, size, repeats, device) / 1e9


@dataclass(frozen=True)
class MachineCeilings:
    """The measured limits of this machine on `threads` threads (or one GPU)."""

    threads: int
    matmul_gflops: dict[str, float]  # precision name -> large square matmul GFLOP/s
    gemm16_gflops: float  # 16 rows x 4096x4096 fp32 weight
    gemv_gflops: float  # 1 row x 4096x4096 fp32 weight
    weight_bandwidth_gbs: float  # weight bytes streamed per second by the 1-row case
    float32_matmul_precision: str = "highest"  # torch's setting: "highest" = no TF32/bf32
    cuda_matmul_tf32: bool | None = None  # CUDA only: float32 matmuls ran as TF32
    cudnn_tf32: bool | None = None  # CUDA only: float32 convolutions may run as TF32

    def ceiling_gflops(self, precision: str) -> float:
        """The matmul ceiling in `precision`; an error if this run did not measure it (a
        figure against another precision's ceiling would not be an efficiency)."""
        try:
            return self.matmul_gflops[precision]
        except KeyError:
            raise ValueError(f"no {precision} matmul ceiling was measured in this run "
                             f"(measured: {sorted(self.matmul_gflops)})") from None

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "matmul_gflops": dict(self.matmul_gflops)}


def measure_ceilings(threads: int, precisions: Iterable[str] = ("float32",),
                     repeats: int = 5, weight_size: int = 4096,
                     device: str = "cpu") -> MachineCeilings:
    """The ceilings on `threads` threads (or on the GPU `device`): the big matmul in each
    of `precisions` (names of polyvox.models.layers.precision.PRECISIONS), the GEMV and
    16-row GEMM in float32."""
    from polyvox.models.layers.precision import parse_precision

    gemv_seconds = _gemm_seconds(threads, 1, weight_size, repeats, device)
    is_cuda = torch.device(device).type == "cuda"
    return MachineCeilings(
        threads=threads,
        matmul_gflops={name: matmul_ceiling(threads, repeats=repeats,
                                            dtype=parse_precision(name), device=device)
                       for name in dict.fromkeys(precisions)},
        gemm16_gflops=gemv_ceiling(threads, 16, weight_size, repeats, device),
        gemv_gflops=2 * weight_size**2 / gemv_seconds / 1e9,
        weight_bandwidth_gbs=4 * weight_size**2 / gemv_seconds / 1e9,
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        cuda_matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32) if is_cuda else None,
        cudnn_tf32=bool(torch.backends.cudnn.allow_tf32) if is_cuda else None,
    )
