"""Stopping a tuning job's training jobs while they run, from the objective metric each one prints once per epoch.
Pure: the values come in (read from the logs by the API), decisions come out; no clock, no file.

- :func:`median_rule`: SageMaker's early stopping (``TrainingJobEarlyStoppingType: Auto``): after each epoch, the
  job's objective is compared with the median of the earlier jobs' running averages up to the same epoch; worse
  (lower when maximizing, higher when minimizing) stops it.
- :class:`MedianStopping`: that rule over a search's jobs in launch order.
- Hyperband's decisions are its strategy's (:class:`servekit.services.tuning.space.HyperbandSearch`), which has the same
  :class:`Stopper` face."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Protocol


class Stopper(Protocol):
    """Told of each training job as it is launched, then of its objective values so far (answering the reason to
    stop it now, at most once per job), then of all its values once it has ended."""

    def launched(self, job: str) -> None: ...

    def progress(self, job: str, values: Sequence[float]) -> str | None: ...

    def ended(self, job: str, values: Sequence[float]) -> None: ...


def median_rule(current: Sequence[float], earlier: Sequence[Sequence[float]], maximize: bool) -> float | None:
    """SageMaker's early-stopping test at epoch ``len(current)``: the median of the running averages (the mean of
    the first ``n`` values) of the earlier jobs that reached epoch ``n``; returned when ``current[-1]`` is worse
    than it (the job should stop), else None. No earlier job at that epoch: nothing to compare, None."""
    n = len(current)
    if n == 0:
        return None
    averages = [statistics.fmean(curve[:n]) for curve in earlier if len(curve) >= n]
    if not averages:
        return None
    median = statistics.median(averages)
    worse = current[-1] < median if maximize else current[-1] > median
    return median if worse else None


class MedianStopping:
    """:func:`median_rule` after every epoch of every job, each job compared with the jobs launched before it (their
    values as far as they are known, the ended ones' in full)."""

    def __init__(self, maximize: bool) -> None:
        self.maximize = maximize
        self.curves: dict[str, list[float]] = {}  # in launch order
        self.checked: dict[str, int] = {}
        self.stopped: set[str] = set()

    def launched(self, job: str) -> None:
        self.curves.setdefault(job, [])

    def progress(self, job: str, values: Sequence[float]) -> str | None:
        self.launched(job)
        self.curves[job] = list(values)
        if job in self.stopped:
            return None
        names = list(self.curves)
        earlier = [self.curves[j] for j in names[: names.index(job)]]
        for n in range(self.checked.get(job, 0) + 1, len(values) + 1):
            self.checked[job] = n
            median = median_rule(values[:n], earlier, self.maximize)
            if median is not None:
                self.stopped.add(job)
                return (
                    f"Early stopping: its objective {values[n - 1]:g} after epoch {n} is worse than the median "
                    f"{median:g} of the earlier training jobs' running averages"
                )
        return None

    def ended(self, job: str, values: Sequence[float]) -> None:
        self.launched(job)
        self.curves[job] = list(values)
