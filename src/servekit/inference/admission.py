"""Admission for requests that run on the model threads without a batch queue: a bound on the requests a model
may have waiting, and work that is dropped, not run, once its deadline passes or its client has gone.

A batch queue bounds itself (``max_enqueued_batches``) and expires its own requests; this is the same promise
for the plain path, so overload is a fast 503 and a backlog never outlives the load that made it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from servekit._utils.threads import ModelThreads
from servekit.errors import ErrorCode, ServekitError

T = TypeVar("T")


class _Claim:
    """Who got to a waiting request first: a model thread (it runs) or its deadline / departed client (it is
    dropped). Exactly one side wins."""

    __slots__ = ("_lock", "winner")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.winner: str | None = None

    def take(self, who: str) -> bool:
        with self._lock:
            if self.winner is None:
                self.winner = who
                return True
            return False


class Admission:
    def __init__(self, threads: ModelThreads, num_threads: int, max_queued: int) -> None:
        self._threads = threads
        self._num_threads = num_threads
        self._limit = num_threads + max_queued
        self._in_flight: dict[str, int] = {}

    def in_flight(self, model: str) -> int:
        return self._in_flight.get(model, 0)

    def submit(
        self,
        model: str,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        timeout: float | None = None,
        disconnected: Callable[[], Awaitable[object]] | None = None,
    ) -> asyncio.Future[T]:
        """``fn(*args)`` on a model thread, or a 503 at once when ``model`` already has its limit in flight.

        While it waits for a thread, the returned future fails with DEADLINE_EXCEEDED at ``timeout`` seconds, or
        is cancelled when ``disconnected()`` completes (the client went away); either way ``fn`` never runs."""
        n = self._in_flight.get(model, 0)
        if n >= self._limit:
            raise ServekitError(
                ErrorCode.UNAVAILABLE,
                f"model '{model}' has {n} requests in flight, its limit ({self._num_threads} threads + "
                f"{self._limit - self._num_threads} waiting, --max_queued_requests); retry later",
            )
        self._in_flight[model] = n + 1
        loop = asyncio.get_running_loop()
        claim = _Claim()

        def run(*a: Any) -> T:
            if not claim.take("thread"):
                raise ServekitError(ErrorCode.DEADLINE_EXCEEDED, "dropped before it ran")  # nobody waits for it
            return fn(*a)

        work = self._threads.submit(run, *args)
        expiry: asyncio.TimerHandle | None = None
        watcher: asyncio.Future[object] | None = None
        if timeout is not None:

            def expire() -> None:
                if claim.take("deadline") and not work.done():
                    work.set_exception(
                        ServekitError(
                            ErrorCode.DEADLINE_EXCEEDED,
                            f"request waited {timeout * 1e3:.0f} ms for a model thread of '{model}' without "
                            "starting (its deadline)",
                        )
                    )

            expiry = loop.call_later(timeout, expire)

        def gone(_: object) -> None:
            if claim.take("client") and not work.done():
                work.set_exception(ServekitError(ErrorCode.CANCELLED, "the client went away before the model ran"))

        if disconnected is not None and n >= self._num_threads:  # only a request that must wait is watched
            watcher = asyncio.ensure_future(disconnected())
            watcher.add_done_callback(gone)

        def finished(_: object) -> None:
            self._in_flight[model] -= 1
            if expiry is not None:
                expiry.cancel()
            if watcher is not None and not watcher.done():
                watcher.remove_done_callback(gone)
                watcher.cancel()

        work.add_done_callback(finished)
        return work
