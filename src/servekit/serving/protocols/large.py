"""Large bodies leave the event loop and the server's GIL: decoding a 50 MB JSON body is seconds of CPU in single
C calls (orjson, numpy) that hold the GIL throughout, so neither the loop nor a thread of this process could
answer anything meanwhile. Bodies from ``threshold`` bytes up are decoded, and their answers encoded, in one
child process, one at a time: the server keeps answering (health checks included) while it works, and the
memory a decode takes (tens of times the body, as Python objects) is spent there, by one request at a time.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from servekit._utils import heap

T = TypeVar("T")

LARGE_BODY_BYTES = 1 << 20


def _run_and_trim(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    """In the child: run, then hand the heap the decode grew back to the OS (glibc keeps freed memory otherwise,
    and the child would sit on the peak of its largest request for good)."""
    try:
        return fn(*args)
    finally:
        heap.trim()


class DecodeLane:
    def __init__(self, threshold: int = LARGE_BODY_BYTES, trimmer: heap.TrimWhenQuiet | None = None) -> None:
        self.threshold = threshold
        self._pool: ProcessPoolExecutor | None = None
        # This process's heap too keeps what a large request's body, tensors and answer took: trimmed in the
        # pause after them (every large body passes through here).
        self._trimmer = trimmer or heap.TrimWhenQuiet()

    def is_large(self, size: int) -> bool:
        return size >= self.threshold

    async def run(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``: inline for a small body, in the lane's process for a large one (``fn`` and its
        arguments must pickle: module-level functions of ``servekit.serving.codecs``)."""
        if size < self.threshold:
            return fn(*args)
        if self._pool is None:
            # spawn: a fork of a server with running threads and an event loop is not safe to use
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, _run_and_trim, fn, args)
        finally:
            self._trimmer.after_large()

    def answered(self, size: int) -> None:
        """A request whose body of ``size`` bytes did not come through :meth:`run` last (a model that takes raw
        bodies) has its answer: its buffers count towards the trim too."""
        if size >= self.threshold:
            self._trimmer.after_large()

    def close(self) -> None:
        self._trimmer.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
