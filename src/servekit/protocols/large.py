"""Large bodies leave the event loop: decoding a 50 MB JSON body takes seconds of CPU, and on the loop every other
request (health checks included) waits that long. Bodies from ``threshold`` bytes up are decoded, and their
answers encoded, on one thread of their own, one at a time, so the loop keeps answering (the GIL is handed
back every few milliseconds) and the memory a decode takes (tens of times the body, as Python objects) is
spent by one large request at a time, not by all of them at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from servekit._utils.threads import ModelThreads

T = TypeVar("T")

LARGE_BODY_BYTES = 1 << 20


class DecodeLane:
    def __init__(self, threshold: int = LARGE_BODY_BYTES) -> None:
        self.threshold = threshold
        self._thread: ModelThreads | None = None

    def is_large(self, size: int) -> bool:
        return size >= self.threshold

    async def run(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``: inline for a small body, on the lane's thread for a large one."""
        if size < self.threshold:
            return fn(*args)
        if self._thread is None:
            self._thread = ModelThreads(1, name="servekit-large-body")
        return await self._thread.submit(fn, *args)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown()
