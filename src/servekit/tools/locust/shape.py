"""``StepLoadShape``: Locust's load shape for stepped tests (levels of users or of a request rate, each held), which
measures each step itself and reports the knee when the last step ends."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import orjson
from locust import LoadTestShape

from servekit.tools.bench.knee import Knee, LoadPoint, find_knee
from servekit.tools.locust.steps import SEED_RATES, Snapshot, Step, point_between, step_at, steps, users_for

log = logging.getLogger("servekit.locust")
REPORT_ENV = "SERVEKIT_LOCUST_KNEE_JSON"


class StepLoadShape(LoadTestShape):
    """Holds each of ``schedule``'s levels for its duration, then stops the test and reports the knee.

    Subclass it in a locustfile and set ``schedule`` (or ``levels`` and ``step_s``). With ``per_user_rate`` set the
    levels are requests/s, and the user class must pace itself to that rate (``wait_time =
    constant_throughput(per_user_rate)``); without it they are user counts. The default is the seed's 100 → 500 →
    1,000 → 1,500 requests/s at 10 requests/s per user, one minute each.

    Each step is measured from ``settle_s`` after it starts to its end (Locust's cumulative histogram, differenced:
    exact, where Locust's "current" figures are 10-second moving windows). At the end the knee (``percentile``
    leaving its low-load level by more than ``knee_factor``; the highest rate meeting ``slo_ms``) is logged and,
    with ``report_path`` or $SERVEKIT_LOCUST_KNEE_JSON, written as JSON."""

    abstract: ClassVar[bool] = True
    levels: ClassVar[Sequence[float]] = SEED_RATES
    step_s: ClassVar[float] = 60.0
    schedule: ClassVar[Sequence[Step] | None] = None
    per_user_rate: ClassVar[float | None] = 10.0
    spawn_rate: ClassVar[float | None] = None
    settle_s: ClassVar[float] = 2.0
    knee_factor: ClassVar[float] = 2.0
    slo_ms: ClassVar[float | None] = None
    percentile: ClassVar[str] = "p95"
    report_path: ClassVar[str | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.points: list[LoadPoint] = []
        self.knee: Knee | None = None
        self._index: int | None = -1
        self._start: Snapshot | None = None

    def steps(self) -> Sequence[Step]:
        return self.schedule if self.schedule is not None else steps(self.levels, self.step_s)

    def tick(self) -> tuple[int, float] | None:
        schedule = self.steps()
        run_time = self.get_run_time()
        index = step_at(schedule, run_time)
        if index != self._index:
            self._close_step()
            self._index = index
        if index is None:
            self._report()
            return None
        began = sum(s.duration_s for s in schedule[:index])
        if self._start is None and run_time >= began + min(self.settle_s, schedule[index].duration_s / 2):
            self._start = self._snapshot()
        users = users_for(schedule[index].level, self.per_user_rate)
        return users, float(self.spawn_rate or max(users, 1))

    def _snapshot(self) -> Snapshot:
        total = self.runner.stats.total  # set by Locust's runner before the first tick
        return Snapshot(time.monotonic(), total.num_requests, total.num_failures, dict(total.response_times))

    def _close_step(self) -> None:
        if self._start is None or self._index is None or self._index < 0:
            self._start = None
            return
        level = self.steps()[self._index].level
        label = f"{level:g}/s" if self.per_user_rate else f"u={level:g}"
        self.points.append(point_between(self._start, self._snapshot(), percentile=self.percentile, label=label))
        self._start = None

    def _report(self) -> None:
        if self.knee is not None:
            return
        self.knee = find_knee(self.points, factor=self.knee_factor, slo_ms=self.slo_ms, percentile=self.percentile)
        log.info("%s", self.knee.summary())
        path = self.report_path or os.environ.get(REPORT_ENV)
        if path:
            Path(path).write_bytes(orjson.dumps(self.knee.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
