"""When to release a batch: a pure decision over a snapshot of the queue, plus the learned cost model.

Rules, in order (a batch only leaves when an execution slot is free):
- FULL: the queue holds a whole batch;
- IDLE: nothing is executing, so waiting would only add latency (a lone request runs at once; batches
  form from what queues while earlier batches run);
- TIMEOUT: the oldest request has waited ``batch_timeout_micros``;
- TARGET (adaptive mode): waiting longer would put the oldest request's latency over half the p99 target
  (the other half is headroom for queueing behind busy slots), or so few rows arrive that waiting buys
  nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from servekit.config.models import BatchingConfig


class ReleaseReason(enum.Enum):
    FULL = "full"
    IDLE = "idle"
    TIMEOUT = "timeout"
    TARGET = "target"


@dataclass(frozen=True, slots=True)
class QueueView:
    now: float
    oldest_enqueued: float
    queued_rows: int
    executing: int
    free_slots: int
    arrival_rate: float = 0.0  # rows per second, recent


@dataclass(frozen=True, slots=True)
class Decision:
    release: ReleaseReason | None
    wake_at: float | None = None  # decide again at this time if nothing else happens first


class CostModel:
    """Batch execution time as ``a + b * rows``, fitted by exponentially weighted least squares."""

    def __init__(self, decay: float = 0.05, min_samples: int = 8) -> None:
        self._decay = decay
        self._min = min_samples
        self._n = 0
        self._s0 = self._sx = self._sy = self._sxx = self._sxy = 0.0

    def observe(self, rows: int, seconds: float) -> None:
        k = 1.0 - self._decay
        x, y = float(rows), seconds
        self._s0 = self._s0 * k + 1.0
        self._sx = self._sx * k + x
        self._sy = self._sy * k + y
        self._sxx = self._sxx * k + x * x
        self._sxy = self._sxy * k + x * y
        self._n += 1

    @property
    def ready(self) -> bool:
        return self._n >= self._min

    def coefficients(self) -> tuple[float, float]:
        if self._s0 == 0:
            return 0.0, 0.0
        mean_x, mean_y = self._sx / self._s0, self._sy / self._s0
        var = self._sxx / self._s0 - mean_x * mean_x
        if var <= 1e-12:  # every batch the same size: all cost is per-batch
            return mean_y, 0.0
        b = max(0.0, (self._sxy / self._s0 - mean_x * mean_y) / var)
        return max(0.0, mean_y - b * mean_x), b

    def predict(self, rows: int) -> float:
        a, b = self.coefficients()
        return a + b * rows


def decide(view: QueueView, cfg: BatchingConfig, cost: CostModel | None = None) -> Decision:
    if view.queued_rows == 0 or view.free_slots <= 0:
        return Decision(None)
    if view.queued_rows >= cfg.execution_batch_size:
        return Decision(ReleaseReason.FULL)
    if view.executing == 0:
        return Decision(ReleaseReason.IDLE)
    deadline = view.oldest_enqueued + cfg.batch_timeout_micros / 1e6
    if view.now >= deadline:
        return Decision(ReleaseReason.TIMEOUT)
    if cfg.target_p99_ms is not None and cost is not None and cost.ready:
        waited = view.now - view.oldest_enqueued
        slack = cfg.target_p99_ms / 1e3 * 0.5 - cost.predict(view.queued_rows) - waited
        if slack <= 0 or view.arrival_rate * slack < 1.0:
            return Decision(ReleaseReason.TARGET)
        return Decision(None, min(deadline, view.now + slack))
    return Decision(None, deadline)
