"""Keep pack's memory flat: pin glibc's mmap threshold so large buffers go back to the OS.

Pack moves megabyte-sized strings and arrays through every process. glibc raises its mmap threshold
each time such a block is freed, after which large blocks come from the heap, fragment it, and resident
memory creeps up with the corpus size. A fixed threshold (4 MiB) keeps every large block in its own
mapping, returned on free. No-op where glibc's `mallopt` is unavailable.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["pin_malloc_thresholds"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def pin_malloc_thresholds(mmap_threshold: int = 4 << 20) -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, mmap_threshold) == 1
    mallopt(_M_TRIM_THRESHOLD, 4 * mmap_threshold)
    return ok
