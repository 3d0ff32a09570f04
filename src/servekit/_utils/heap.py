"""glibc's heap, tuned or trimmed through ctypes: what the allocator keeps of freed memory. No-ops without glibc."""

from __future__ import annotations

import asyncio
import ctypes
import functools
from collections.abc import Callable

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


class TrimWhenQuiet:
    """Trims the heap once large requests have stopped for ``quiet_s`` seconds: glibc keeps what a large body's
    buffers and tensors took (its mmap threshold rises after each large free, so the next ones come from the heap
    and stay there), and a server would sit on its peak for good (issue 30: 252 -> ~600 MB after a few 15 MB
    requests). Never on the request path: each large request only pushes the deadline back (so a stream of them
    trims nothing while it lasts, and at most once per pause), and the trim, milliseconds on a large heap, runs on
    the loop's default executor, not the loop. ``trim_fn`` is for tests."""

    def __init__(self, quiet_s: float = 1.0, trim_fn: Callable[[], None] = trim) -> None:
        self._quiet_s = quiet_s
        self._trim = trim_fn
        self._due = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def after_large(self) -> None:
        """A large request just went through (called on the event loop)."""
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self._quiet_s
        if self._timer is None:
            self._timer = loop.call_at(self._due, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop.time() < self._due:  # another large request came meanwhile: wait for the pause after it
            self._timer = loop.call_at(self._due, self._fire, loop)
            return
        self._timer = None
        loop.run_in_executor(None, self._trim)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
