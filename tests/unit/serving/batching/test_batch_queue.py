"""The batch queue, as the server runs it: batches merge, run and split through model threads.

Most tests run on virtual time with ``VirtualThreads`` standing in for the model threads: each model call takes
``cost`` virtual seconds, timers fire exactly, nothing sleeps. The last tests use real ``ModelThreads``, held
open with gates, for what only real threads can show.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from servekit._utils.threads import ModelThreads
from servekit.config.models import BatchingConfig
from servekit.errors import ErrorCode, ServekitError
from servekit.serving.batching.policy import ReleaseReason
from servekit.serving.batching.queue import BatchQueue, BatchResult
from servekit.testing.clock import run_virtual


class VirtualThreads:
    """``ModelThreads.call`` on virtual time: the work (the queue's merge, model call and split) runs on the loop
    ``cost`` virtual seconds after it is handed over, then ``done`` gets its result or exception."""

    def __init__(self, cost: float) -> None:
        self.cost = cost

    def call(
        self,
        loop: asyncio.AbstractEventLoop,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        done: Callable[[Any, BaseException | None], None],
    ) -> None:
        def finish() -> None:
            try:
                result, exc = fn(*args), None
            except Exception as e:
                result, exc = None, e
            done(result, exc)

        loop.call_later(self.cost, finish)


class Model:
    """Doubles its input; each call takes ``cost`` virtual seconds; records batch sizes."""

    def __init__(self, cost: float = 0.010, fail_on: int | None = None) -> None:
        self.cost = cost
        self.calls: list[int] = []
        self.fail_on = fail_on

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(len(inputs["x"]))
        if self.fail_on is not None and len(self.calls) == self.fail_on:
            raise RuntimeError("model exploded")
        return {"y": inputs["x"] * 2}


def queue(model: Model, config: BatchingConfig, **kw: Any) -> BatchQueue:
    return BatchQueue(model, config, threads=VirtualThreads(model.cost), **kw)  # type: ignore[arg-type]


class Reasons:
    def __init__(self) -> None:
        self.seen: list[tuple[int, int, ReleaseReason]] = []

    def on_batch(self, key: Any, rows: int, padded: int, reason: ReleaseReason, seconds: float) -> None:
        self.seen.append((rows, padded, reason))


def x(*values: float) -> dict[str, np.ndarray]:
    return {"x": np.array(values, dtype=np.float32).reshape(-1, 1)}


def cfg(**kw: Any) -> BatchingConfig:
    base: dict[str, Any] = {"max_batch_size": 4, "batch_timeout_micros": 5000, "num_batch_threads": 1}
    return BatchingConfig(**{**base, **kw})


def test_lone_request_runs_at_once() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        model, reasons = Model(), Reasons()
        q = queue(model, cfg(batch_timeout_micros=1_000_000), observer=reasons)
        t0 = loop.time()
        r = await q.submit(x(1))
        assert loop.time() - t0 == pytest.approx(0.010)  # model time only; no batch window paid
        assert r.queue_s == 0
        assert r.outputs["y"].ravel().tolist() == [2]
        assert reasons.seen == [(1, 1, ReleaseReason.IDLE)]

    run_virtual(main)


def test_a_request_alone_in_an_idle_queue_can_run_on_the_callers_thread_as_its_batch() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        model, reasons = Model(), Reasons()
        q = queue(model, cfg(), observer=reasons)
        t0 = loop.time()
        r = q.run_alone(x(1, 2))
        assert r is not None and loop.time() == t0  # ran now, on this thread: no virtual model thread was used
        assert r.outputs["y"].ravel().tolist() == [2, 4]
        assert (r.queue_s, r.batch_rows) == (0.0, 2)
        assert model.calls == [2]
        assert reasons.seen == [(2, 2, ReleaseReason.IDLE)]  # counted as the batch it would have been

    run_virtual(main)


def test_a_busy_closed_padding_or_oversized_queue_runs_nothing_alone() -> None:
    async def main() -> None:
        model = Model()
        q = queue(model, cfg(max_batch_size=2))
        running = asyncio.ensure_future(q.submit(x(1)))
        await asyncio.sleep(0)
        assert q.executing == 1 and q.run_alone(x(2)) is None  # a batch is executing
        queued = asyncio.ensure_future(q.submit(x(3)))
        await asyncio.sleep(0)
        assert q.queued_rows == 1 and q.run_alone(x(4)) is None  # one is waiting: the next would join it
        await asyncio.gather(running, queued)
        assert q.run_alone(x(5, 6, 7)) is None  # over the batch size: submit splits or refuses it
        assert q.run_alone({"x": np.zeros((1, 1)), "z": np.zeros((2, 1))}) is None  # submit says why
        assert model.calls == [1, 1]  # only the two submitted batches ran
        padded = queue(model, cfg(max_batch_size=4, allowed_batch_sizes=(2, 4)))
        assert padded.run_alone(x(1)) is None  # a model given fixed batch sizes gets only those
        await q.close()
        assert q.run_alone(x(8)) is None

    run_virtual(main)


def test_batches_form_while_the_model_is_busy() -> None:
    async def main() -> None:
        model, reasons = Model(), Reasons()
        q = queue(model, cfg(max_batch_size=4), observer=reasons)
        results = await asyncio.gather(*(q.submit(x(i)) for i in range(9)))
        assert [r.outputs["y"].item() for r in results] == [2.0 * i for i in range(9)]  # order kept
        # first request alone (idle), the rest in full batches of 4 as the model frees up
        assert model.calls == [1, 4, 4]
        assert [s[2] for s in reasons.seen] == [ReleaseReason.IDLE, ReleaseReason.FULL, ReleaseReason.FULL]

    run_virtual(main)


def test_release_on_timeout_with_two_slots() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        model, reasons = Model(cost=1.0), Reasons()
        q = queue(model, cfg(max_batch_size=8, batch_timeout_micros=5000, num_batch_threads=2), observer=reasons)
        first = asyncio.ensure_future(q.submit(x(0)))  # takes slot 1 for 1 s
        await asyncio.sleep(0)
        t0 = loop.time()
        second = await asyncio.gather(q.submit(x(1)), q.submit(x(2)))
        # slot 2 was free but the model busy: wait the 5 ms window, then run both together
        assert loop.time() - t0 == pytest.approx(0.005 + 1.0)
        assert [r.queue_s for r in second] == pytest.approx([0.005, 0.005])
        assert [r.batch_rows for r in second] == [2, 2]
        await first
        assert reasons.seen[1][2] is ReleaseReason.TIMEOUT

    run_virtual(main)


def test_padding_to_allowed_sizes_is_stripped() -> None:
    async def main() -> None:
        model, reasons = Model(cost=0.0), Reasons()
        q = queue(model, cfg(max_batch_size=8, allowed_batch_sizes=(2, 4, 8)), observer=reasons)
        r = await q.submit(x(1, 2, 3))
        assert model.calls == [4]  # padded up
        assert r.outputs["y"].ravel().tolist() == [2, 4, 6]  # padding removed
        assert reasons.seen == [(3, 4, ReleaseReason.IDLE)]

    run_virtual(main)


def test_large_request_is_split_and_reassembled() -> None:
    async def main() -> None:
        model = Model(cost=0.001)
        q = queue(model, cfg(max_batch_size=4, max_enqueued_batches=4))
        r = await q.submit(x(*range(10)))
        assert model.calls == [4, 4, 2]
        assert r.outputs["y"].ravel().tolist() == [2.0 * i for i in range(10)]

    run_virtual(main)


def test_without_splitting_large_request_is_refused() -> None:
    async def main() -> None:
        q = queue(Model(), cfg(max_batch_size=4, enable_large_batch_splitting=False))
        with pytest.raises(ServekitError) as info:
            await q.submit(x(*range(5)))
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
        assert "Task size 5 is larger than maximum input batch size 4" in info.value.message

    run_virtual(main)


def test_queue_full_is_refused_at_once() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        q = queue(Model(cost=1.0), cfg(max_batch_size=2, max_enqueued_batches=2))
        running = asyncio.ensure_future(q.submit(x(0)))  # executing, not queued
        await asyncio.sleep(0)
        queued = [asyncio.ensure_future(q.submit(x(i))) for i in range(4)]  # fills 2 x 2 rows
        await asyncio.sleep(0)
        assert q.queued_rows == 4
        t0 = loop.time()
        with pytest.raises(ServekitError) as info:
            await q.submit(x(9))
        assert loop.time() == t0  # no waiting
        assert info.value.code is ErrorCode.UNAVAILABLE
        assert "queue to which this task was submitted is full" in info.value.message
        await asyncio.gather(running, *queued)

    run_virtual(main)


def test_deadline_expires_in_queue() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        model = Model(cost=1.0)
        q = queue(model, cfg())
        busy = asyncio.ensure_future(q.submit(x(0)))
        await asyncio.sleep(0)
        t0 = loop.time()
        with pytest.raises(ServekitError) as info:
            await q.submit(x(1), timeout=0.2)
        assert info.value.code is ErrorCode.DEADLINE_EXCEEDED
        assert loop.time() - t0 == pytest.approx(0.2)  # answered at its deadline, not when the model frees
        await busy
        assert q.queued_rows == 0
        assert model.calls == [1]  # the expired request never reached the model

    run_virtual(main)


def test_model_exception_fails_exactly_that_batch() -> None:
    async def main() -> None:
        model = Model(cost=0.01, fail_on=2)
        q = queue(model, cfg(max_batch_size=2))
        results = await asyncio.gather(*(q.submit(x(i)) for i in range(5)), return_exceptions=True)
        # batches: [0] ok, [1, 2] fails, [3, 4] ok
        assert model.calls == [1, 2, 2]
        assert isinstance(results[0], BatchResult)
        assert [isinstance(r, RuntimeError) for r in results] == [False, True, True, False, False]
        assert all(isinstance(r, BatchResult) for r in (results[3], results[4]))

    run_virtual(main)


def test_cancelled_request_never_reaches_the_model() -> None:
    async def main() -> None:
        model = Model(cost=1.0)
        q = queue(model, cfg())
        busy = asyncio.ensure_future(q.submit(x(0)))
        await asyncio.sleep(0)
        gone = asyncio.ensure_future(q.submit(x(1)))
        await asyncio.sleep(0)
        gone.cancel()
        kept = await q.submit(x(2))
        await busy
        assert kept.outputs["y"].item() == 4.0
        assert model.calls == [1, 1]

    run_virtual(main)


def test_model_returning_wrong_rows_is_an_error() -> None:
    def bad(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": np.zeros(1)}

    async def main() -> None:
        q = BatchQueue(bad, cfg(), threads=VirtualThreads(0.0))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="must return 3 rows"):
            await q.submit(x(1, 2, 3))

    run_virtual(main)


def test_close_finishes_queued_work_then_refuses() -> None:
    async def main() -> None:
        model = Model(cost=0.1)
        q = queue(model, cfg(max_batch_size=2))
        pending = [asyncio.ensure_future(q.submit(x(i))) for i in range(5)]
        await asyncio.sleep(0)
        await q.close()
        assert all(p.done() and not p.exception() for p in pending)
        with pytest.raises(ServekitError, match="unloading"):
            await q.submit(x(1))

    run_virtual(main)


def test_request_larger_than_the_whole_queue_is_a_400_not_a_503() -> None:
    async def main() -> None:
        q = queue(Model(), cfg(max_batch_size=2, max_enqueued_batches=2))
        with pytest.raises(ServekitError) as info:
            await q.submit(x(*range(5)))
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
        assert "exceeds the batch queue's capacity of 4 rows" in info.value.message

    run_virtual(main)


# ---- real model threads ---------------------------------------------------------------------------------
class GatedModel:
    """Triples its input on a model thread; while ``gate`` is clear, calls wait on it. Records each call's values
    and thread."""

    def __init__(self, fail_if: float | None = None) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.fail_if = fail_if
        self.calls: list[list[float]] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.gate.wait(timeout=30), "the test never opened the gate"
        with self._lock:
            self.calls.append(inputs["x"].ravel().tolist())
            self.threads.add(threading.current_thread().name)
        if self.fail_if is not None and self.fail_if in inputs["x"]:
            raise RuntimeError("thread model exploded")
        return {"y": inputs["x"] * 3}


@pytest.fixture
def threads() -> Iterator[ModelThreads]:
    pool = ModelThreads(2, name="model")
    yield pool
    pool.shutdown()


def test_threads_merge_run_and_split_on_model_threads_in_order(threads: ModelThreads) -> None:
    model = GatedModel()

    async def main() -> None:
        q = BatchQueue(model, cfg(max_batch_size=8), threads=threads)
        results = await asyncio.gather(*(q.submit(x(i)) for i in range(20)))
        assert [r.outputs["y"].item() for r in results] == [3.0 * i for i in range(20)]
        assert max(r.batch_rows for r in results) > 1  # requests queued behind the first were merged

    asyncio.run(main())
    assert sorted(v for call in model.calls for v in call) == list(range(20))
    assert model.threads and all(t.startswith("model-") for t in model.threads)
    assert threading.current_thread().name not in model.threads


def test_threads_large_request_is_split_and_reassembled(threads: ModelThreads) -> None:
    model = GatedModel()

    async def main() -> None:
        q = BatchQueue(model, cfg(max_batch_size=4, max_enqueued_batches=4, num_batch_threads=2), threads=threads)
        r = await q.submit(x(*range(10)))
        assert r.outputs["y"].ravel().tolist() == [3.0 * i for i in range(10)]
        assert r.batch_rows == 4

    asyncio.run(main())
    assert sorted(len(c) for c in model.calls) == [2, 4, 4]


def test_threads_model_exception_fails_exactly_that_batch(threads: ModelThreads) -> None:
    model = GatedModel(fail_if=-1.0)

    async def main() -> None:
        q = BatchQueue(model, cfg(max_batch_size=2), threads=threads)
        model.gate.clear()
        first = asyncio.ensure_future(q.submit(x(0)))  # holds the only batch slot until the gate opens
        await asyncio.sleep(0)
        assert q.executing == 1
        rest = [asyncio.ensure_future(q.submit(x(v))) for v in (-1, 1, 2, 3)]  # batches [-1, 1] and [2, 3]
        await asyncio.sleep(0)
        assert q.queued_rows == 4
        model.gate.set()
        results = await asyncio.gather(first, *rest, return_exceptions=True)
        assert [isinstance(r, RuntimeError) for r in results] == [False, True, True, False, False]
        assert [r.outputs["y"].item() for r in results if isinstance(r, BatchResult)] == [0.0, 6.0, 9.0]

    asyncio.run(main())
    assert model.calls == [[0.0], [-1.0, 1.0], [2.0, 3.0]]


def test_threads_deadline_and_cancellation_while_the_model_is_held(threads: ModelThreads) -> None:
    model = GatedModel()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        q = BatchQueue(model, cfg(), threads=threads)
        model.gate.clear()
        busy = asyncio.ensure_future(q.submit(x(0)))
        await asyncio.sleep(0)
        gone = asyncio.ensure_future(q.submit(x(1)))
        await asyncio.sleep(0)
        gone.cancel()
        t0 = loop.time()
        with pytest.raises(ServekitError) as info:
            await q.submit(x(2), timeout=0.05)  # answered at its deadline, while the model is still held
        assert info.value.code is ErrorCode.DEADLINE_EXCEEDED
        assert loop.time() - t0 == pytest.approx(0.05)  # virtual time: the gate holds the model thread meanwhile
        assert not busy.done() and model.calls == []
        kept = asyncio.ensure_future(q.submit(x(3)))
        model.gate.set()
        assert (await busy).outputs["y"].item() == 0.0
        assert (await kept).outputs["y"].item() == 9.0
        assert q.queued_rows == 0

    run_virtual(main)
    assert model.calls == [[0.0], [3.0]]  # the cancelled and the expired request never reached the model


def test_threads_close_finishes_queued_work_then_refuses(threads: ModelThreads) -> None:
    model = GatedModel()

    async def main() -> None:
        q = BatchQueue(model, cfg(max_batch_size=2), threads=threads)
        model.gate.clear()
        pending = [asyncio.ensure_future(q.submit(x(i))) for i in range(5)]
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(q.close())
        await asyncio.sleep(0)
        assert not closing.done()  # waits for the held batch and the queued ones
        model.gate.set()
        await closing
        assert [p.result().outputs["y"].item() for p in pending] == [3.0 * i for i in range(5)]
        assert q.executing == 0 and q.queued_rows == 0
        with pytest.raises(ServekitError, match="unloading"):
            await q.submit(x(1))

    asyncio.run(main())
    assert model.calls == [[0.0], [1.0, 2.0], [3.0, 4.0]]
