"""Admission on the plain (unbatched) path: a bound per model, deadlines and departed clients drop waiting work."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import pytest

from servekit._utils.threads import ModelThreads
from servekit.errors import ErrorCode, ServekitError
from servekit.serving.core.admission import Admission
from servekit.testing.clock import run_virtual


class Model:
    """A model call that blocks until released, counting the calls that really ran."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.ran: list[str] = []

    def __call__(self, name: str) -> str:
        self.started.set()
        assert self.release.wait(10), "the test never released the model"
        self.ran.append(name)
        return name.upper()


def test_over_the_limit_is_refused_at_once() -> None:
    threads = ModelThreads(1)
    model = Model()

    async def main() -> None:
        adm = Admission(threads, num_threads=1, max_queued=2)
        works = [adm.submit("m", model, (f"r{i}",)) for i in range(3)]
        with pytest.raises(ServekitError) as err:
            adm.submit("m", model, ("r3",))
        assert err.value.code is ErrorCode.UNAVAILABLE and "--max_queued_requests" in err.value.message
        other = adm.submit("other", lambda: "fine", ())  # the bound is per model
        model.release.set()
        assert await asyncio.gather(*works, other) == ["R0", "R1", "R2", "fine"]
        assert adm.in_flight("m") == 0

    try:
        asyncio.run(main())
    finally:
        threads.shutdown()


def test_a_request_past_its_deadline_never_runs() -> None:
    threads = ModelThreads(1)
    model = Model()

    async def main() -> None:
        adm = Admission(threads, num_threads=1, max_queued=8)
        # no deadline on `first`: on a virtual clock its deadline could pass while a real thread is still
        # picking it up (the loop idles meanwhile); that a started request outlives its deadline is the
        # claim's rule, tested on its own below
        first = adm.submit("m", model, ("first",))
        await asyncio.to_thread(model.started.wait, 10)  # the only thread is busy with `first`
        late = adm.submit("m", model, ("late",), timeout=0.5)
        with pytest.raises(ServekitError) as err:
            await late  # virtual time: the deadline fires while the thread is held
        assert err.value.code is ErrorCode.DEADLINE_EXCEEDED
        model.release.set()
        assert await first == "FIRST"
        await threads.submit(lambda: None)  # one FIFO thread: `late` has been dequeued (and skipped) by now
        assert adm.in_flight("m") == 0

    try:
        run_virtual(main)
        threads.shutdown()
    finally:
        model.release.set()
    assert model.ran == ["first"]  # `late` was dropped, never run


def test_a_departed_client_drops_its_waiting_request() -> None:
    threads = ModelThreads(1)
    model = Model()

    async def main() -> None:
        adm = Admission(threads, num_threads=1, max_queued=8)
        client_gone = asyncio.Event()

        async def disconnected() -> object:
            await client_gone.wait()
            return {"type": "http.disconnect"}

        first = adm.submit("m", model, ("first",), disconnected=disconnected)  # runs at once: not watched
        await asyncio.to_thread(model.started.wait, 10)  # virtual time from here on: the thread stays held
        waiting = adm.submit("m", model, ("waiting",), disconnected=disconnected)
        client_gone.set()
        with pytest.raises(ServekitError) as err:
            await waiting  # watched once it has waited WATCH_AFTER_S: virtual seconds, not real ones
        assert err.value.code is ErrorCode.CANCELLED
        model.release.set()
        assert await first == "FIRST"
        await threads.submit(lambda: None)  # one FIFO thread: `waiting` has been dequeued (and skipped) by now
        assert adm.in_flight("m") == 0

    try:
        run_virtual(main)
    finally:
        model.release.set()
        threads.shutdown()
    assert model.ran == ["first"]


def test_a_started_request_outlives_its_deadline_and_a_dropped_one_never_starts() -> None:
    from servekit.serving.core.admission import _Claim

    started = _Claim()
    assert started.take("thread") and not started.take("deadline")  # the deadline fires too late: it runs on
    dropped = _Claim()
    assert dropped.take("deadline") and not dropped.take("thread")  # the thread finds it claimed: never runs


def test_a_client_is_watched_only_once_its_request_has_waited_a_while() -> None:
    """Watching costs a task per request, so a request is watched only after WATCH_AFTER_S without a thread; one
    that runs at once, or is settled sooner (here by its deadline), never is."""
    from servekit.serving.core.admission import WATCH_AFTER_S

    threads = ModelThreads(1)
    model = Model()
    asked: list[str] = []

    async def main() -> None:
        adm = Admission(threads, num_threads=1, max_queued=8)
        client_gone = asyncio.Event()

        def watcher(name: str) -> Callable[[], Awaitable[object]]:
            async def disconnected() -> object:
                asked.append(name)
                await client_gone.wait()
                return {"type": "http.disconnect"}

            return disconnected

        first = adm.submit("m", model, ("first",), disconnected=watcher("first"))
        await asyncio.to_thread(model.started.wait, 10)  # virtual time from here on: the thread stays held
        early = adm.submit("m", model, ("early",), timeout=WATCH_AFTER_S / 2, disconnected=watcher("early"))
        waiting = adm.submit("m", model, ("waiting",), disconnected=watcher("waiting"))
        with pytest.raises(ServekitError) as err:
            await early
        assert err.value.code is ErrorCode.DEADLINE_EXCEEDED
        assert asked == []
        await asyncio.sleep(WATCH_AFTER_S)
        assert asked == ["waiting"]  # not `first` (it ran at once), not `early` (settled before the sweep)
        client_gone.set()
        with pytest.raises(ServekitError) as err:
            await waiting
        assert err.value.code is ErrorCode.CANCELLED
        model.release.set()
        assert await first == "FIRST"
        await threads.submit(lambda: None)  # one FIFO thread: the dropped ones have been dequeued by now
        assert adm.in_flight("m") == 0

    try:
        run_virtual(main)
    finally:
        model.release.set()
        threads.shutdown()
    assert model.ran == ["first"]
