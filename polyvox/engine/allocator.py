"""Keep freed memory in the process heap for reuse.

Decoding allocates and frees multi-megabyte activations every step. glibc serves those
with fresh mmap'd pages by default and returns them on free, so every step pays page
faults for memory it just released (measured: ~20% of the Mimi decoder's time, ~half of
a paged decode step's gather). Raising the mmap and trim thresholds keeps the pages.
Linux/glibc only; elsewhere a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def keep_freed_memory() -> bool:
    """Applied once per process; True when the allocator accepted the settings."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)
                    and libc.mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1))
    except (OSError, AttributeError):
        return False
