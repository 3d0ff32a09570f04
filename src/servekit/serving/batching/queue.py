"""An event-driven, bounded batch queue whose batches run on model threads.

Requests are queued with their rows; a batch leaves when :func:`policy.decide` says so (full, idle model,
timeout, latency target). There is no polling loop: decisions run when a request arrives, when a batch
finishes, and at the one timer the policy asks for. The queue is bounded in rows; a request that does not
fit is refused at once. Each request may carry a deadline; one still queued at its deadline is failed.
Merging, padding, the model call and splitting run on a model thread; the loop only hands over and delivers.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy.typing as npt

from servekit._utils.threads import ModelThreads
from servekit.config.models import BatchingConfig
from servekit.errors import ErrorCode, ServekitError, invalid, unavailable
from servekit.serving.batching.policy import CostModel, QueueView, ReleaseReason, decide
from servekit.serving.batching.tensors import Tensors, concat, pad_to, padded_size, rows_of, slice_rows, split

PredictFn = Callable[[dict[str, npt.NDArray[Any]]], dict[str, npt.NDArray[Any]]]


def _work(
    predict: PredictFn, parts: list[Tensors], counts: list[int], target: int
) -> tuple[list[dict[str, npt.NDArray[Any]]], float]:
    """One batch on a worker thread: merge, pad, run, split. Returns the pieces and the model time."""
    merged = pad_to(concat(parts), sum(counts), target)
    t0 = time.perf_counter()
    outputs = predict(merged)
    seconds = time.perf_counter() - t0
    return split(outputs, counts, target), seconds


class BatchObserver(Protocol):
    """Port for metrics: told about every batch that ran."""

    def on_batch(
        self, key: tuple[str, str], rows: int, padded_rows: int, reason: ReleaseReason, seconds: float
    ) -> None: ...


@dataclass(slots=True)
class BatchResult:
    outputs: dict[str, npt.NDArray[Any]]
    queue_s: float  # from enqueue until the (first) batch holding it started
    model_s: float  # execution time of that batch
    batch_rows: int


@dataclass(eq=False, slots=True)
class _Task:
    inputs: Tensors
    rows: int
    enqueued: float
    future: asyncio.Future[BatchResult]
    taken: int = 0  # rows already handed to batches (splitting)
    parts: dict[int, dict[str, npt.NDArray[Any]]] = field(default_factory=dict)
    done_rows: int = 0
    started: float = 0.0
    model_s: float = 0.0
    batch_rows: int = 0
    expiry: asyncio.TimerHandle | None = None


class BatchQueue:
    def __init__(
        self,
        predict: PredictFn,
        cfg: BatchingConfig,
        *,
        threads: ModelThreads,
        key: tuple[str, str] = ("", ""),
        observer: BatchObserver | None = None,
    ) -> None:
        """``predict`` is the blocking model call; each batch runs it on one of ``threads``."""
        self._predict = predict
        self._threads = threads
        self._idle: asyncio.Event | None = None
        self.cfg = cfg
        self._key = key
        self._observer = observer
        self._queue: deque[_Task] = deque()
        self._queued_rows = 0
        self._executing = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._cost = CostModel()
        self._rate = 0.0  # rows/s, exponentially weighted
        self._last_arrival = 0.0
        self._closed = False

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    @property
    def executing(self) -> int:
        return self._executing

    async def submit(self, inputs: Tensors, timeout: float | None = None) -> BatchResult:
        if self._closed:
            raise ServekitError(ErrorCode.UNAVAILABLE, "the model version is unloading; retry")
        try:
            rows = rows_of(inputs)
        except ValueError as exc:
            raise invalid(str(exc)) from None
        cfg = self.cfg
        if rows > cfg.queue_capacity_rows:  # would never fit, so a 503 ("retry") would be a lie
            raise invalid(
                f"request of {rows} rows exceeds the batch queue's capacity of {cfg.queue_capacity_rows} rows "
                f"(max_enqueued_batches x max_batch_size); send it in smaller requests"
            )
        if not cfg.enable_large_batch_splitting and rows > cfg.max_batch_size:
            raise invalid(f"Task size {rows} is larger than maximum input batch size {cfg.max_batch_size}")
        if self._queued_rows + rows > cfg.queue_capacity_rows:
            raise unavailable(
                "The batch scheduling queue to which this task was submitted is full "
                f"(queued rows {self._queued_rows}, task size {rows}, capacity {cfg.queue_capacity_rows} = "
                f"max_enqueued_batches {cfg.max_enqueued_batches} x max_batch_size {cfg.max_batch_size})",
                full=True,
            )
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._note_arrival(now, rows)
        task = _Task(inputs, rows, now, loop.create_future())
        if timeout is not None:
            task.expiry = loop.call_at(now + timeout, self._expire, task)
        self._queue.append(task)
        self._queued_rows += rows
        self._pump()
        try:
            return await task.future
        finally:
            if task.expiry is not None:
                task.expiry.cancel()

    def run_alone(self, inputs: Tensors) -> BatchResult | None:
        """Run a request at once on the calling thread (the event loop) when the queue is idle: nothing queued,
        nothing executing. Its batch would be itself alone, released as IDLE at once, so skipping the hand-over
        to a batch thread and back changes no batch. Counted as that batch (cost model, batch metrics).

        None, and nothing run, when the queue is busy, closing, pads batches (``allowed_batch_sizes``: a model
        may need those exact sizes) or the request would be split: the caller then submits it. Only for a
        request the caller knows to be cheap and alone in the server (see ``InferenceService``): while it
        runs, the loop takes no other request, so none can join."""
        cfg = self.cfg
        if self._executing or self._queue or self._closed or cfg.allowed_batch_sizes:
            return None
        try:
            rows = rows_of(inputs)
        except ValueError:
            return None  # submit refuses it with the message
        if not 0 < rows <= cfg.execution_batch_size:
            return None
        self._note_arrival(asyncio.get_running_loop().time(), rows)
        t0 = time.perf_counter()
        outputs = self._predict(dict(inputs))
        seconds = time.perf_counter() - t0
        self._cost.observe(rows, seconds)
        if self._observer is not None:
            self._observer.on_batch(self._key, rows, rows, ReleaseReason.IDLE, seconds)
        return BatchResult(outputs, 0.0, seconds, rows)

    def _note_arrival(self, now: float, rows: int) -> None:
        gap = now - self._last_arrival if self._last_arrival else 0.0
        self._last_arrival = now
        if gap > 0:
            inst = rows / gap
            self._rate = inst if self._rate == 0 else 0.9 * self._rate + 0.1 * inst

    def _expire(self, task: _Task) -> None:
        if task.taken == 0 and not task.future.done():
            try:
                self._queue.remove(task)
            except ValueError:
                return
            self._queued_rows -= task.rows
            task.future.set_exception(
                ServekitError(ErrorCode.DEADLINE_EXCEEDED, "request timed out while waiting in the batching queue")
            )

    def _drop_abandoned(self) -> None:
        """Requests whose caller went away (cancelled futures) leave the queue untouched by the model."""
        while self._queue and self._queue[0].future.done() and self._queue[0].taken == 0:
            t = self._queue.popleft()
            self._queued_rows -= t.rows

    def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        slots = self.cfg.num_batch_threads
        while True:
            # Nothing can leave while every slot is busy; the batch that frees one pumps again.
            if self._executing >= slots or not self._queue:
                return
            self._drop_abandoned()
            oldest = self._queue[0].enqueued if self._queue else 0.0
            view = QueueView(
                now=loop.time(),
                oldest_enqueued=oldest,
                queued_rows=self._queued_rows,
                executing=self._executing,
                free_slots=self.cfg.num_batch_threads - self._executing,
                arrival_rate=self._rate,
            )
            decision = decide(view, self.cfg, self._cost if self.cfg.target_p99_ms is not None else None)
            if decision.release is None:
                if decision.wake_at is not None:
                    self._arm(decision.wake_at)
                return
            self._start(self._take(), decision.release)

    def _arm(self, when: float) -> None:
        if self._timer is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = asyncio.get_running_loop().call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        self._pump()

    def _take(self) -> list[tuple[_Task, int, int]]:
        room = self.cfg.execution_batch_size
        batch: list[tuple[_Task, int, int]] = []
        while self._queue and room > 0:
            task = self._queue[0]
            if task.future.done() and task.taken == 0:
                self._queue.popleft()
                self._queued_rows -= task.rows
                continue
            left = task.rows - task.taken
            if left > room and not self.cfg.enable_large_batch_splitting:
                break  # does not fit; it heads the next batch
            n = min(left, room)
            batch.append((task, task.taken, task.taken + n))
            task.taken += n
            room -= n
            self._queued_rows -= n
            if task.taken == task.rows:
                self._queue.popleft()
        return batch

    def _start(self, batch: list[tuple[_Task, int, int]], reason: ReleaseReason) -> None:
        self._executing += 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        for task, start, _ in batch:
            if start == 0:
                task.started = started
        counts = [stop - start for _, start, stop in batch]
        parts = [t.inputs if (a == 0 and b == t.rows) else slice_rows(t.inputs, a, b) for t, a, b in batch]
        target = padded_size(sum(counts), self.cfg.allowed_batch_sizes)
        self._threads.call(
            loop,
            _work,
            (self._predict, parts, counts, target),
            lambda result, exc: self._finish(batch, counts, target, reason, exc if exc is not None else result),
        )

    def _finish(
        self,
        batch: list[tuple[_Task, int, int]],
        counts: list[int],
        target: int,
        reason: ReleaseReason,
        result: tuple[list[dict[str, npt.NDArray[Any]]], float] | BaseException,
    ) -> None:
        try:
            if isinstance(result, BaseException):
                self._fail(batch, result)
                return
            pieces, seconds = result
            self._cost.observe(target, seconds)
            if self._observer is not None:
                self._observer.on_batch(self._key, sum(counts), target, reason, seconds)
            for (task, start, _), piece, n in zip(batch, pieces, counts, strict=True):
                self._deliver(task, start, piece, n, seconds, target)
        finally:
            self._executing -= 1
            if self._executing == 0 and self._idle is not None:
                self._idle.set()
            if not self._closed or self._queue:
                self._pump()

    def _deliver(
        self, task: _Task, start: int, piece: dict[str, npt.NDArray[Any]], rows: int, seconds: float, batch_rows: int
    ) -> None:
        if task.future.done():
            return
        if rows == task.rows:  # the whole request rode in one batch: the usual case, no reassembly
            task.future.set_result(BatchResult(piece, task.started - task.enqueued, seconds, batch_rows))
            return
        task.parts[start] = piece
        task.done_rows += rows
        task.model_s = max(task.model_s, seconds)
        task.batch_rows = max(task.batch_rows, batch_rows)
        if task.done_rows < task.rows:
            return
        ordered = [task.parts[k] for k in sorted(task.parts)]
        task.future.set_result(
            BatchResult(concat(ordered), task.started - task.enqueued, task.model_s, task.batch_rows)
        )

    @staticmethod
    def _fail(batch: list[tuple[_Task, int, int]], exc: BaseException) -> None:
        for task, _, _ in batch:
            if not task.future.done():
                if isinstance(exc, Exception):
                    task.future.set_exception(exc)
                else:
                    task.future.cancel()

    async def close(self) -> None:
        """Refuse new work, let queued and running batches finish."""
        self._closed = True
        while self._queue or self._executing:
            if self._executing:
                self._idle = asyncio.Event()
                await self._idle.wait()
            else:
                self._pump()
                if not self._executing:
                    break
        if self._timer is not None:
            self._timer.cancel()
