"""``monitor watch``: run the job on a schedule, carrying the alarm state from one run to the next.

Runs start on multiples of ``every`` (epoch-aligned, UTC). Each run judges only the windows that ended since
the last one (up to ``now - delay``, so late-arriving capture files are waited for), numbering them after
the previous run's and continuing its runs of exceedances, so a drift that lasts across runs still alarms
on its ``consecutive``-th window. The state lives in ``<out>/watch-state.json``; each run writes its files in
``<out>/<end of its last window>/``. Time is read and waited for through an injected clock.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import orjson

from servekit.services.monitoring.alerts.alarms import Key
from servekit.services.monitoring.alerts.webhooks import Notifier
from servekit.services.monitoring.baseline.store import BaselineError, dump, write_atomic
from servekit.services.monitoring.runs.job import JobSpec, run_job
from servekit.services.monitoring.runs.outputs import window_folder
from servekit.services.monitoring.stream.sources import SourceError
from servekit.services.monitoring.stream.windows import format_time

log = logging.getLogger(__name__)
STATE_FILE = "watch-state.json"


class Clock(Protocol):
    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(slots=True)
class WatchState:
    last_end: float | None = None
    next_index: int = 0
    streaks: dict[Key, int] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return dump(
            {
                "last_end": self.last_end,
                "next_index": self.next_index,
                "streaks": [[f, m, n] for (f, m), n in sorted(self.streaks.items())],
            }
        )

    @classmethod
    def load(cls, path: Path) -> WatchState:
        if not path.exists():
            return cls()
        data = orjson.loads(path.read_bytes())
        return cls(data["last_end"], int(data["next_index"]), {(f, m): int(n) for f, m, n in data["streaks"]})


def next_tick(now: float, every: int) -> float:
    """The first multiple of ``every`` strictly after ``now``."""
    return (math.floor(now / every) + 1) * every


def tick_range(now: float, state: WatchState, window: int, step: int, delay: int) -> tuple[float, float] | None:
    """``(since, until)`` covering exactly the windows that ended since the last run; None if there are none."""
    until = math.floor((now - delay) / step) * step
    since = until - window if state.last_end is None else state.last_end + step - window
    if since + window > until:
        return None
    return float(since), float(until)


def tick(spec: JobSpec, notifier: Notifier, now: float, delay: int = 0) -> bool:
    """One scheduled run; False when no window had ended since the last one."""
    state_path = spec.out / STATE_FILE
    state = WatchState.load(state_path)
    span = tick_range(now, state, spec.cfg.window, spec.cfg.step_seconds, delay)
    if span is None:
        return False
    since, until = span
    result = run_job(
        spec,
        notifier,
        since=since,
        until=until,
        streaks=state.streaks,
        first_index=state.next_index,
        out=spec.out / window_folder(until),
    )
    for warning in result.warnings:
        log.warning("monitor run up to %s: %s", format_time(until), warning)
    last = result.windows[-1] if result.windows else None
    new = WatchState(
        last.window.end if last else until, last.window.index + 1 if last else state.next_index, result.streaks
    )
    write_atomic(state_path, new.to_json())
    return True


def watch(
    spec: JobSpec,
    notifier: Notifier,
    every: int,
    clock: Clock,
    delay: int = 0,
    max_runs: int | None = None,
    on_run: Callable[[bool], None] | None = None,
) -> int:
    """Run now, then at every multiple of ``every``; returns the number of runs made (``max_runs`` stops it).
    ``on_run(ok)`` is called after each run (the live metrics endpoint, ``exporter.WatchExporter``)."""
    runs = 0
    while max_runs is None or runs < max_runs:
        now = clock.time()
        ok = True
        try:
            tick(spec, notifier, now, delay)
        except (BaselineError, SourceError, OSError, ValueError) as exc:
            log.error("monitor run at %s failed: %s", now, exc)  # the schedule goes on; the next run may succeed
            ok = False
        if on_run is not None:
            on_run(ok)
        runs += 1
        if max_runs is not None and runs >= max_runs:
            break
        clock.sleep(max(0.0, next_tick(clock.time(), every) - clock.time()))
    return runs
