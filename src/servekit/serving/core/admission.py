"""Admission for requests that run on the model threads without a batch queue: a bound on the requests a model
may have waiting, and work that is dropped, not run, once its deadline passes or its client has gone.

A batch queue bounds itself (``max_enqueued_batches``) and expires its own requests; this is the same promise
for the plain path, so overload is a fast 503 and a backlog never outlives the load that made it.

Watching for a departed client costs a task per request (an ASGI ``receive()`` only says so by returning), about
15-20 us of event-loop CPU, more than a small model's run. Most waits for a thread are far shorter than that
matters for, so a request is watched only once it has waited ``WATCH_AFTER_S`` without starting: one timer per
admission sweeps the requests waiting that long, instead of a task for every request that finds the threads busy.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from servekit._utils.threads import ModelThreads
from servekit.errors import ErrorCode, ServekitError, unavailable

T = TypeVar("T")

# How long a request waits for a model thread before its client is watched. A client that leaves sooner still has
# its request dropped at this point if it has not started; one whose request starts sooner gets it run, as a
# client leaving after the start does today.
WATCH_AFTER_S = 0.005


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


class _Waiting:
    """A request that found every thread busy: watched for its client's departure once it has waited long."""

    __slots__ = ("claim", "disconnected", "due", "watcher", "work")

    def __init__(
        self,
        due: float,
        claim: _Claim,
        work: asyncio.Future[Any],
        disconnected: Callable[[], Awaitable[object]],
    ) -> None:
        self.due = due  # when to start watching
        self.claim = claim
        self.work = work
        self.disconnected = disconnected
        self.watcher: asyncio.Future[object] | None = None

    def watch(self) -> None:
        self.watcher = asyncio.ensure_future(self.disconnected())
        self.watcher.add_done_callback(self._gone)

    def _gone(self, _: object) -> None:
        if self.claim.take("client") and not self.work.done():
            self.work.set_exception(ServekitError(ErrorCode.CANCELLED, "the client went away before the model ran"))

    def unwatch(self) -> None:
        if self.watcher is not None and not self.watcher.done():
            self.watcher.remove_done_callback(self._gone)
            self.watcher.cancel()


class _Sweeper:
    """The requests waiting for a thread on one event loop, oldest first, and the one timer that watches those
    that have waited ``WATCH_AFTER_S``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._waiting: deque[_Waiting] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, waiting: _Waiting) -> None:
        self._waiting.append(waiting)
        if self._timer is None:
            self._schedule(waiting.due)

    def _schedule(self, when: float) -> None:
        self._timer = self.loop.call_at(when, self._sweep, when)

    def _sweep(self, when: float) -> None:
        # A loop may run a timer a clock tick before ``when``; comparing with ``when`` itself keeps that from
        # rescheduling the same instant over and over.
        now = max(self.loop.time(), when)
        waiting = self._waiting
        while waiting:
            oldest = waiting[0]
            if oldest.claim.winner is not None or oldest.work.done():  # started, or already settled: forget it
                waiting.popleft()
            elif oldest.due <= now:
                waiting.popleft().watch()
            else:
                break
        if waiting:
            self._schedule(waiting[0].due)
        else:
            self._timer = None


class Admission:
    def __init__(self, threads: ModelThreads, num_threads: int, max_queued: int) -> None:
        self._threads = threads
        self._num_threads = num_threads
        self._limit = num_threads + max_queued
        self._in_flight: dict[str, int] = {}
        self._sweeper: _Sweeper | None = None

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
            raise unavailable(
                f"model '{model}' has {n} requests in flight, its limit ({self._num_threads} threads + "
                f"{self._limit - self._num_threads} waiting, --max_queued_requests); retry later",
                full=True,
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
        waiting: _Waiting | None = None
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

        if disconnected is not None and n >= self._num_threads:  # only a request that may wait is watched
            waiting = _Waiting(loop.time() + WATCH_AFTER_S, claim, work, disconnected)
            if self._sweeper is None or self._sweeper.loop is not loop:
                self._sweeper = _Sweeper(loop)
            self._sweeper.add(waiting)

        def finished(_: object) -> None:
            self._in_flight[model] -= 1
            if expiry is not None:
                expiry.cancel()
            if waiting is not None:
                waiting.unwatch()

        work.add_done_callback(finished)
        return work
