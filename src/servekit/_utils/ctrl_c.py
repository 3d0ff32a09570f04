"""Ctrl-C (SIGINT) as a request a long run reads when it is ready, not an exception raised wherever the main
thread happens to be.

Python's default handler raises KeyboardInterrupt at the next bytecode. Raised inside an at-fork callback (logging's
``_releaseLock`` runs after every ``os.fork`` in the parent), Python prints "Exception ignored" and drops it, and
logging's module lock stays held: the next logging call hangs forever. A transform job stopped while its run forked
its instances never ended Stopped that way (CI, twice). With :class:`CtrlC` installed, SIGINT only counts and wakes
a file descriptor the run can wait on; a region that must be interruptible (a library call that blocks without
a way to wake it) opts in with :meth:`CtrlC.raising`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any


class CtrlC:
    """Count SIGINTs for the ``with`` block (main thread only: elsewhere no handler can be set, and it counts none)."""

    def __init__(self) -> None:
        self.count = 0
        self._raising = 0
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_signal)
            self._installed = True
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
        os.close(self._read)
        os.close(self._write)

    @property
    def fd(self) -> int:
        """Readable after each SIGINT; call :meth:`drain` once woken."""
        return self._read

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 64):
                pass

    @contextlib.contextmanager
    def raising(self) -> Iterator[None]:
        """Inside, SIGINT raises KeyboardInterrupt as by default (at once when one came before the block)."""
        if self.count:
            raise KeyboardInterrupt
        self._raising += 1
        try:
            yield
        finally:
            self._raising -= 1

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        with contextlib.suppress(BlockingIOError):  # a full pipe already wakes the reader
            os.write(self._write, b"\0")
        if self._raising:
            raise KeyboardInterrupt
