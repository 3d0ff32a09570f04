"""An asyncio event loop on virtual time: timers fire in order without waiting, so tests of time-driven code
(batch timeouts, deadlines, pollers) are exact and instant. Only for code whose waiting is asyncio timers:
work handed to threads still runs in real time.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    def __init__(self, loop_ref: list[VirtualTimeLoop]) -> None:
        super().__init__()
        self._loop_ref = loop_ref

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if events or timeout is None:
            return events if events else super().select(timeout)
        if timeout > 0:
            self._loop_ref[0].advance(timeout)  # nothing to do until the next timer: jump to it
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 1000.0) -> None:
        ref: list[VirtualTimeLoop] = []
        super().__init__(_VirtualSelector(ref))
        ref.append(self)
        self._now = start

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def run_virtual(main: Callable[[], Awaitable[T]]) -> T:
    """Run ``main()`` to completion on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(_wrap(main))
    finally:
        loop.close()


async def _wrap(main: Callable[[], Awaitable[T]]) -> T:
    return await main()


__all__ = ["VirtualTimeLoop", "run_virtual"]
