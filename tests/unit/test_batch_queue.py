"""The batch queue on virtual time: model calls take simulated time, timers fire exactly, no sleeps."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from servekit.batching.policy import ReleaseReason
from servekit.batching.queue import BatchQueue, BatchResult
from servekit.config.models import BatchingConfig
from servekit.errors import ErrorCode, ServekitError
from servekit.testing.clock import run_virtual


class Model:
    """Doubles its input; each call takes ``cost`` virtual seconds; records batch sizes."""

    def __init__(self, cost: float = 0.010, fail_on: int | None = None) -> None:
        self.cost = cost
        self.calls: list[int] = []
        self.fail_on = fail_on

    async def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(len(inputs["x"]))
        await asyncio.sleep(self.cost)
        if self.fail_on is not None and len(self.calls) == self.fail_on:
            raise RuntimeError("model exploded")
        return {"y": inputs["x"] * 2}


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
        q = BatchQueue(model, cfg(batch_timeout_micros=1_000_000), observer=reasons)
        t0 = loop.time()
        r = await q.submit(x(1))
        assert loop.time() - t0 == pytest.approx(0.010)  # model time only; no batch window paid
        assert r.queue_s == 0
        assert r.outputs["y"].ravel().tolist() == [2]
        assert reasons.seen == [(1, 1, ReleaseReason.IDLE)]

    run_virtual(main)


def test_batches_form_while_the_model_is_busy() -> None:
    async def main() -> None:
        model, reasons = Model(), Reasons()
        q = BatchQueue(model, cfg(max_batch_size=4), observer=reasons)
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
        q = BatchQueue(model, cfg(max_batch_size=8, batch_timeout_micros=5000, num_batch_threads=2), observer=reasons)
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
        q = BatchQueue(model, cfg(max_batch_size=8, allowed_batch_sizes=(2, 4, 8)), observer=reasons)
        r = await q.submit(x(1, 2, 3))
        assert model.calls == [4]  # padded up
        assert r.outputs["y"].ravel().tolist() == [2, 4, 6]  # padding removed
        assert reasons.seen == [(3, 4, ReleaseReason.IDLE)]

    run_virtual(main)


def test_large_request_is_split_and_reassembled() -> None:
    async def main() -> None:
        model = Model(cost=0.001)
        q = BatchQueue(model, cfg(max_batch_size=4, max_enqueued_batches=4))
        r = await q.submit(x(*range(10)))
        assert model.calls == [4, 4, 2]
        assert r.outputs["y"].ravel().tolist() == [2.0 * i for i in range(10)]

    run_virtual(main)


def test_without_splitting_large_request_is_refused() -> None:
    async def main() -> None:
        q = BatchQueue(Model(), cfg(max_batch_size=4, enable_large_batch_splitting=False))
        with pytest.raises(ServekitError) as info:
            await q.submit(x(*range(5)))
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
        assert "Task size 5 is larger than maximum input batch size 4" in info.value.message

    run_virtual(main)


def test_queue_full_is_refused_at_once() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        q = BatchQueue(Model(cost=1.0), cfg(max_batch_size=2, max_enqueued_batches=2))
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
        q = BatchQueue(model, cfg())
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
        q = BatchQueue(model, cfg(max_batch_size=2))
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
        q = BatchQueue(model, cfg())
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
    async def bad(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": np.zeros(1)}

    async def main() -> None:
        q = BatchQueue(bad, cfg())
        with pytest.raises(ValueError, match="must return 3 rows"):
            await q.submit(x(1, 2, 3))

    run_virtual(main)


def test_close_finishes_queued_work_then_refuses() -> None:
    async def main() -> None:
        model = Model(cost=0.1)
        q = BatchQueue(model, cfg(max_batch_size=2))
        pending = [asyncio.ensure_future(q.submit(x(i))) for i in range(5)]
        await asyncio.sleep(0)
        await q.close()
        assert all(p.done() and not p.exception() for p in pending)
        with pytest.raises(ServekitError, match="unloading"):
            await q.submit(x(1))

    run_virtual(main)


def test_thread_mode_merges_runs_and_splits_on_the_executor() -> None:
    import threading

    from servekit._utils.threads import ModelThreads

    threads: set[str] = set()

    def predict(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        threads.add(threading.current_thread().name)
        return {"y": inputs["x"] * 3}

    def failing(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise RuntimeError("thread model exploded")

    async def main() -> None:
        ex = ModelThreads(2, name="model")
        try:
            q = BatchQueue(None, cfg(max_batch_size=8), predict=predict, threads=ex)
            results = await asyncio.gather(*(q.submit(x(i)) for i in range(20)))
            assert [r.outputs["y"].item() for r in results] == [3.0 * i for i in range(20)]
            assert max(r.batch_rows for r in results) > 1
            pending = [asyncio.ensure_future(q.submit(x(i))) for i in range(5)]
            await asyncio.sleep(0)
            await q.close()
            assert all(p.done() for p in pending)
            bad = BatchQueue(None, cfg(), predict=failing, threads=ex)
            with pytest.raises(RuntimeError, match="thread model exploded"):
                await bad.submit(x(1))
        finally:
            ex.shutdown()
        assert threads and all(t.startswith("model") for t in threads)

    asyncio.run(main())


def test_needs_exactly_one_way_to_run() -> None:
    with pytest.raises(ValueError, match="run_batch, or predict together with threads"):
        BatchQueue(None, cfg())


def test_request_larger_than_the_whole_queue_is_a_400_not_a_503() -> None:
    async def main() -> None:
        q = BatchQueue(Model(), cfg(max_batch_size=2, max_enqueued_batches=2))
        with pytest.raises(ServekitError) as info:
            await q.submit(x(*range(5)))
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
        assert "exceeds the batch queue's capacity of 4 rows" in info.value.message

    run_virtual(main)
