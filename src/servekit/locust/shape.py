"""``StepLoadShape``: Locust's load shape for stepped tests (levels of users or of a request rate, each held)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from locust import LoadTestShape

from servekit.locust.steps import SEED_RATES, Step, step_at, steps, users_for


class StepLoadShape(LoadTestShape):
    """Holds each of ``schedule``'s levels for its duration, then stops the test.

    Subclass it in a locustfile and set ``schedule`` (or ``levels`` and ``step_s``). With ``per_user_rate`` set the
    levels are requests/s, and the user class must pace itself to that rate (``wait_time =
    constant_throughput(per_user_rate)``); without it they are user counts. ``spawn_rate`` (users/s) defaults to
    reaching each step within a second. The default is the seed's 100 → 500 → 1,000 → 1,500 requests/s at 10
    requests/s per user, one minute each."""

    abstract: ClassVar[bool] = True
    levels: ClassVar[Sequence[float]] = SEED_RATES
    step_s: ClassVar[float] = 60.0
    schedule: ClassVar[Sequence[Step] | None] = None
    per_user_rate: ClassVar[float | None] = 10.0
    spawn_rate: ClassVar[float | None] = None

    def steps(self) -> Sequence[Step]:
        return self.schedule if self.schedule is not None else steps(self.levels, self.step_s)

    def tick(self) -> tuple[int, float] | None:
        schedule = self.steps()
        index = step_at(schedule, self.get_run_time())
        if index is None:
            return None
        users = users_for(schedule[index].level, self.per_user_rate)
        return users, float(self.spawn_rate or max(users, 1))
