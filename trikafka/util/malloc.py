"""How the process's C allocator keeps memory it was given back (glibc's ``mallopt``).

A broker allocates and frees buffers of a request's size all the time: a
Produce of 1 MB is received into one buffer, decoded into another and
numbered in a third.  By default glibc hands a freed buffer of that size back
to the kernel (``munmap``, or trimming the heap's top), so the next one faults
in every 4 KiB page again: about 360 minor page faults per 1 MB Produce,
measured, the larger part of the broker's time for it.  ``keep_freed_memory``
makes such buffers come from the heap and keeps up to
``TRIM_THRESHOLD_BYTES`` of freed memory for the next ones.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Allocations below this come from the heap (glibc's largest allowed value on 64 bits, 32 MiB);
# larger ones are mapped and unmapped as before.
MMAP_THRESHOLD_BYTES = 32 << 20
# Freed memory at the heap's top is kept up to this much before it goes back to the kernel.
TRIM_THRESHOLD_BYTES = 64 << 20


def keep_freed_memory() -> bool:
    """Set the thresholds above for this process; False (nothing changed) where the C library is not
    glibc or refuses them.  Call once at process start, before the event loop runs."""
    if platform.libc_ver()[0] != "glibc":
        return False
    path = ctypes.util.find_library("c")
    if path is None:
        return False
    libc = ctypes.CDLL(path)
    # mallopt returns 1 on success; the mmap threshold first: setting either fixes both (no dynamic threshold).
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and \
        bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
