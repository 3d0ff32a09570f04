"""Where a request runs: the inline decision over measured seconds, and the service following it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit._utils.threads import ModelThreads
from servekit.config.models import BatchingConfig, ModelConfig
from servekit.serving.batching.scheduler import BatchScheduler
from servekit.serving.core.admission import Admission
from servekit.serving.core.manager import ModelManager
from servekit.serving.core.service import InferenceService
from servekit.serving.runtime.base import Concurrency
from servekit.serving.runtime.inline import MIN_RUNS, OVERRUN, RETRY_AFTER, RunCost, observe, runs_inline, size_class
from servekit.serving.schema import InferenceRequest
from servekit.testing import FakeServable
from servekit.types import TensorMap

LIMIT = 50e-6


def thread_runs(cost: RunCost, seconds: float, n: int) -> None:
    for _ in range(n):
        observe(cost, seconds, False, LIMIT)


def test_a_class_runs_inline_after_enough_fast_thread_runs() -> None:
    cost = RunCost()
    thread_runs(cost, 20e-6, MIN_RUNS - 1)
    assert not runs_inline(cost, LIMIT)
    thread_runs(cost, 20e-6, 1)
    assert runs_inline(cost, LIMIT)


def test_the_fastest_thread_run_counts_because_waits_for_the_gil_only_add() -> None:
    cost = RunCost()
    for i in range(MIN_RUNS):
        observe(cost, 5e-3 if i % 2 else 30e-6, False, LIMIT)  # every other run waited out a switch interval
    assert runs_inline(cost, LIMIT)


def test_a_model_slower_than_the_limit_stays_on_the_threads() -> None:
    cost = RunCost()
    thread_runs(cost, 51e-6, 10 * MIN_RUNS)
    assert not runs_inline(cost, LIMIT)


def test_a_zero_limit_never_inlines() -> None:
    cost = RunCost()
    for _ in range(MIN_RUNS):
        observe(cost, 1e-9, False, 0.0)
    assert not runs_inline(cost, 0.0)


def inline_cost() -> RunCost:
    cost = RunCost()
    thread_runs(cost, 10e-6, MIN_RUNS)
    assert runs_inline(cost, LIMIT)
    return cost


def test_scattered_slow_inline_runs_keep_it_inline() -> None:
    cost = inline_cost()
    for i in range(10_000):
        observe(cost, 3e-3 if i % 10 == 0 else 20e-6, True, LIMIT)  # one run in ten descheduled for 3 ms
    assert runs_inline(cost, LIMIT)
    for _ in range(10_000):
        observe(cost, 3 * LIMIT, True, LIMIT)  # a busy machine: every run slower than the limit, not by OVERRUN
    assert runs_inline(cost, LIMIT)


def test_a_model_turned_slow_goes_back_to_the_threads_within_a_few_dozen_runs() -> None:
    cost = inline_cost()
    runs = 0
    while runs_inline(cost, LIMIT):
        observe(cost, OVERRUN * LIMIT * 1.01, True, LIMIT)
        runs += 1
        assert runs <= 40
    assert runs == 22
    assert cost.returns == 1 and cost.wait == RETRY_AFTER


def test_after_a_return_it_waits_then_measures_again_and_backs_off_each_time() -> None:
    cost = inline_cost()
    for returns in (1, 2, 3):
        while runs_inline(cost, LIMIT):
            observe(cost, 2e-3, True, LIMIT)
        assert cost.wait == RETRY_AFTER << (returns - 1)
        thread_runs(cost, 10e-6, cost.wait)  # the waiting requests are not measured
        assert cost.runs == 0 and not runs_inline(cost, LIMIT)
        thread_runs(cost, 10e-6, MIN_RUNS)
        assert runs_inline(cost, LIMIT)


def test_size_classes_are_powers_of_two() -> None:
    assert [size_class(n) for n in (1, 2, 3, 4, 7, 8, 4096)] == [1, 2, 2, 3, 3, 4, 13]


# ---- the service follows the decision --------------------------------------------------------------------------
class Recorder(FakeServable):
    """The fake servable (adds 1), recording the thread each run happened on; ``compute_only`` declares a native
    framework."""

    def __init__(self, compute_only: bool) -> None:
        super().__init__(1.0)
        self.threads: list[int] = []
        if compute_only:
            self.concurrency = Concurrency(releases_gil=True, threads=1)

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]:
        self.threads.append(threading.get_ident())
        return super().predict(signature, inputs)


def serve(
    servable: Recorder,
    limit_s: float,
    sizes: list[int],
    batching: BatchingConfig | None = None,
    alone: bool = False,
) -> list[bool]:
    """Run one request per entry of ``sizes`` (rows) through an InferenceService, one after another, with a batch
    queue when ``batching`` is given and each request marked ``alone`` in the server or not; whether each ran on
    the loop."""

    async def main() -> list[bool]:
        manager = ModelManager(lambda path, cfg: servable, max_load_retries=0, retry_interval=0.0)
        manager.set_models([ModelConfig("m", "/unused")])
        manager.set_aspired_versions("m", {1: "/unused/1"})
        await manager.wait_idle()
        threads = ModelThreads(2)
        scheduler = BatchScheduler(threads, lambda _: batching) if batching is not None else None
        service = InferenceService(
            manager, threads, scheduler, admission=Admission(threads, 2, 8), inline_limit_s=limit_s
        )
        loop_thread = threading.get_ident()
        on_loop = []
        try:
            for rows in sizes:
                x = np.full((rows, 2), 1.0, dtype=np.float32)
                resp = await service.infer(InferenceRequest("m", {"x": x}, alone=alone))
                assert np.array_equal(resp.outputs["y"], x + 1)
                on_loop.append(servable.threads[-1] == loop_thread)
        finally:
            if scheduler is not None:
                await scheduler.close()
            threads.shutdown()
            await manager.close()
        return on_loop

    return asyncio.run(main())


def test_a_fast_native_model_moves_onto_the_loop_after_its_measured_runs() -> None:
    on_loop = serve(Recorder(compute_only=True), limit_s=1.0, sizes=[1] * (MIN_RUNS + 4))
    assert on_loop == [False] * MIN_RUNS + [True] * 4


def test_a_larger_request_is_measured_on_the_threads_first() -> None:
    on_loop = serve(Recorder(compute_only=True), limit_s=1.0, sizes=[1] * MIN_RUNS + [1, 64, 1])
    assert on_loop[MIN_RUNS:] == [True, False, True]


def test_a_python_model_always_runs_on_a_thread() -> None:
    assert not any(serve(Recorder(compute_only=False), limit_s=1.0, sizes=[1] * (MIN_RUNS + 8)))


def test_no_limit_and_a_limit_below_every_run_keep_the_threads() -> None:
    assert not any(serve(Recorder(compute_only=True), limit_s=0.0, sizes=[1] * (MIN_RUNS + 8)))
    assert not any(serve(Recorder(compute_only=True), limit_s=1e-12, sizes=[1] * (MIN_RUNS + 8)))


BATCHING = BatchingConfig(max_batch_size=64, batch_timeout_micros=1000, num_batch_threads=1)


def test_with_batching_a_request_alone_in_the_server_moves_onto_the_loop_as_its_own_batch() -> None:
    on_loop = serve(Recorder(compute_only=True), limit_s=1.0, sizes=[1] * (MIN_RUNS + 4), batching=BATCHING, alone=True)
    assert on_loop == [False] * MIN_RUNS + [True] * 4  # measured as lone batches on the batch thread first


def test_with_batching_requests_with_others_pending_always_queue() -> None:
    # Under load a request run on the loop would keep the next from joining its batch: never, however cheap.
    sizes = [1] * (MIN_RUNS + 8)
    assert not any(serve(Recorder(compute_only=True), limit_s=1.0, sizes=sizes, batching=BATCHING, alone=False))
    assert not any(serve(Recorder(compute_only=False), limit_s=1.0, sizes=sizes, batching=BATCHING, alone=True))
    assert not any(serve(Recorder(compute_only=True), limit_s=0.0, sizes=sizes, batching=BATCHING, alone=True))
