"""glibc's heap, tuned or trimmed through ctypes: what the allocator keeps of freed memory. No-ops without glibc."""

from __future__ import annotations

import ctypes
import functools

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def trim() -> None:
    """Hand what is free in the heap back to the system (``malloc_trim(0)``)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def keep_freed_pages(mmap_threshold: int, trim_threshold: int) -> None:
    """Serve blocks under ``mmap_threshold`` bytes from the heap and give its top back only past
    ``trim_threshold``: a process that makes and frees the same large buffers over and over then reuses their
    pages instead of faulting them in again each time. Fixed values also end glibc's own adjustment of both."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
        libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold)
