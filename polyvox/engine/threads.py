"""OpenMP worker pools: only the engine thread should keep one.

libgomp, PyTorch's OpenMP runtime on Linux, gives every thread that runs a parallel
region its own pool of worker threads, alive as long as that thread. Once the process
holds more OpenMP threads than CPUs, libgomp stops spinning between parallel regions and
every region pays for waking its workers from sleep. A served model meets exactly that:
the thread that loaded the model keeps a pool, and the engine thread builds a second one.
On 2 cores, 8 Pocket streams through AsyncEngine took 35-41 ms per AR step with both
pools alive and 27-31 ms with the loading thread's pool freed (docs/perf-history.md, session 8).

`single_threaded_openmp` frees the calling thread's workers and runs its later parallel
regions on itself alone. It changes only that thread: PyTorch's own thread setting, which
new threads (the engine's) start from, is untouched. Where the runtime is not libgomp
(macOS, Windows, LLVM's libomp) it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_OMP_PAUSE_HARD = 2


def loaded_libgomps() -> list[ctypes.CDLL]:
    """Every libgomp already mapped into this process (torch's, and any a wheel bundles)."""
    paths: set[str] = set()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and "libgomp" in os.path.basename(fields[5].strip()):
                    paths.add(fields[5].strip())
    except OSError:
        return []
    libraries = []
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except (OSError, AttributeError):
            continue
        library.omp_get_max_threads.restype = ctypes.c_int
        library.omp_set_num_threads.argtypes = [ctypes.c_int]
        library.omp_pause_resource_all.argtypes = [ctypes.c_int]
        library.omp_pause_resource_all.restype = ctypes.c_int
        libraries.append(library)
    return libraries


def single_threaded_openmp() -> Callable[[], None]:
    """Free the calling thread's OpenMP workers; its parallel regions run on it alone from
    now on. Returns a function that gives the thread its former thread count back (its
    workers are rebuilt on its next parallel region); call it from the same thread."""
    saved: list[tuple[ctypes.CDLL, int]] = []
    for library in loaded_libgomps():
        saved.append((library, library.omp_get_max_threads()))
        library.omp_pause_resource_all(_OMP_PAUSE_HARD)  # this thread's pool only
        library.omp_set_num_threads(1)
    owner = threading.get_ident()

    def restore() -> None:
        if threading.get_ident() != owner:
            raise RuntimeError("restore OpenMP threads from the thread that released them")
        for library, count in saved:
            library.omp_set_num_threads(count)

    return restore


def run_single_threaded(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run model code on a helper thread (e.g. under asyncio.to_thread) without leaving an
    OpenMP pool behind that would slow the engine thread's parallel regions."""
    single_threaded_openmp()
    return function(*args, **kwargs)
