"""Triggers that start runs: data arrival (new partitions under a prefix) and a cron schedule.

Exactly once: every partition or fire is a :class:`~servekit.services.pipelines.runs.repo.Claim` recorded in the same
SQLite transaction that creates its run, so a restarted watcher, or two watchers over the same prefix, never start one
twice — the loser of a race gets ``AlreadyClaimed`` and moves on. A claimed partition whose run failed is not
started again (``servekit pipeline resume RUN`` continues it).

The loops take their clock and sleep as arguments; what is due is decided by pure functions.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from servekit.services.pipelines.access.guard import normalize
from servekit.services.pipelines.cron import Cron, last_fire, next_fire
from servekit.services.pipelines.definition.pipeline import Pipeline
from servekit.services.pipelines.engine.runner import PipelineRunner, RunResult
from servekit.services.pipelines.errors import PipelineError
from servekit.services.pipelines.runs.repo import AlreadyClaimed, Claim
from servekit.storage import ObjectStorage, join

DEFAULT_PARTITION_PARAM = "Partition"
MAX_SCHEDULE_SLEEP_S = 60.0  # re-read the clock at least this often (a suspended machine, a clock step)


@dataclass(frozen=True, slots=True)
class Started:
    """One run a trigger started: the partition or fire that claimed it, and how it ended."""

    key: str
    result: RunResult


@dataclass(frozen=True, slots=True)
class Watch:
    """Watch ``prefix`` for partitions (its immediate sub-folders). With ``marker`` (e.g. ``_SUCCESS``) a partition
    is ready once that file is in it; without, once it holds any file. Each run gets the partition's URI as the
    pipeline parameter ``parameter``."""

    prefix: str
    marker: str | None = None
    parameter: str = DEFAULT_PARTITION_PARAM

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", normalize(self.prefix))
        if self.marker is not None and (not self.marker or "/" in self.marker):
            raise PipelineError(f"--marker must be a file name such as _SUCCESS, got {self.marker!r}")

    @property
    def trigger(self) -> str:
        return f"watch:{self.prefix}"


def is_ready(storage: ObjectStorage, watch: Watch, name: str) -> bool:
    """Whether partition ``name`` is complete (see :class:`Watch`)."""
    uri = join(watch.prefix, name)
    if watch.marker is not None:
        return storage.exists(join(uri, watch.marker))
    return bool(storage.list(uri, recursive=True))


def ready_partitions(storage: ObjectStorage, watch: Watch, skip: Iterable[str] = ()) -> list[str]:
    """Names of the complete partitions under the prefix, sorted; those in ``skip`` (claimed already) are not
    looked into, so a look costs one listing plus one check per new partition."""
    fresh = unclaimed(storage.list_dirs(watch.prefix), skip)
    return sorted(name for name in fresh if is_ready(storage, watch, name))


def unclaimed(ready: Iterable[str], claimed: Iterable[str]) -> list[str]:
    taken = set(claimed)
    return [p for p in ready if p not in taken]


def due_fire(cron: Cron, handled: dt.datetime | None, now: dt.datetime) -> dt.datetime | None:
    """The newest fire at or before ``now`` and after ``handled`` (None: nothing due). Fires missed while the
    scheduler was down are not made up one by one: only the newest is due."""
    fire = last_fire(cron, now)
    if fire is None or (handled is not None and fire <= handled):
        return None
    return fire


class TriggerRunner:
    """Starts claimed runs of one pipeline in this process, one after another (each in the foreground)."""

    def __init__(
        self,
        runner: PipelineRunner,
        pipeline: Pipeline,
        source: str,
        *,
        artifact_root: str,
        parameters: Mapping[str, Any] | None = None,
    ) -> None:
        self.runner = runner
        self.pipeline = pipeline
        self.source = source
        self.artifact_root = artifact_root
        self.parameters = dict(parameters or {})

    def claimed(self, trigger: str) -> list[str]:
        return [c.key for c in self.runner.store.repo.claims(self.pipeline.name, trigger)]

    def start(self, trigger: str, key: str, extra: Mapping[str, Any]) -> RunResult | None:
        """Run the pipeline for ``key`` unless someone claimed it first (None then)."""
        try:
            return self.runner.start(
                self.pipeline,
                self.source,
                artifact_root=self.artifact_root,
                parameters=self.parameters | dict(extra),
                claim=Claim(trigger, key),
            )
        except AlreadyClaimed:
            return None


def _check_parameter(pipeline: Pipeline, name: str) -> None:
    if name not in {p.name for p in pipeline.parameters}:
        raise PipelineError(
            f"pipeline {pipeline.name!r} has no parameter {name!r} to receive the partition's URI; declare one "
            f"(parameter({name!r}, '')) or name yours with --partition-param"
        )


def watch(
    trigger: TriggerRunner,
    spec: Watch,
    storage: ObjectStorage,
    *,
    every_s: float,
    once: bool = False,
    until_idle: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    on_start: Callable[[Started], None] = lambda _: None,
) -> list[Started]:
    """Poll the prefix every ``every_s`` seconds and run each new partition once. ``once``: one look;
    ``until_idle``: stop after a look that started nothing. Returns the runs this watcher started."""
    _check_parameter(trigger.pipeline, spec.parameter)
    trigger.pipeline.bind(trigger.parameters | {spec.parameter: spec.prefix})  # bad --param fails now, not later
    if every_s <= 0:
        raise PipelineError(f"--every must be positive, got {every_s}")
    started: list[Started] = []
    while True:
        fresh = ready_partitions(storage, spec, skip=trigger.claimed(spec.trigger))
        count = 0
        for name in fresh:
            result = trigger.start(spec.trigger, name, {spec.parameter: join(spec.prefix, name)})
            if result is not None:  # None: another watcher claimed it between our look and our claim
                count += 1
                started.append(Started(name, result))
                on_start(started[-1])
        if once or (until_idle and count == 0):
            return started
        sleep(every_s)


def schedule(
    trigger: TriggerRunner,
    cron: Cron,
    *,
    now: Callable[[], dt.datetime],
    sleep: Callable[[float], None] = time.sleep,
    once: bool = False,
    max_runs: int | None = None,
    on_start: Callable[[Started], None] = lambda _: None,
) -> list[Started]:
    """Run the pipeline at each fire of ``cron`` (UTC), from now on. ``once``: run the newest fire at or before
    now (if no scheduler ran it) and return; ``max_runs``: return after that many fires were handled."""
    trigger.pipeline.bind(trigger.parameters)
    key = f"cron:{cron.expression}"
    handled: dt.datetime | None = None if once else now()
    started: list[Started] = []
    fires = 0
    while True:
        t = now()
        fire = due_fire(cron, handled, t)
        if fire is not None:
            handled = fire
            fires += 1
            result = trigger.start(key, fire.isoformat(), {})
            if result is not None:
                started.append(Started(fire.isoformat(), result))
                on_start(started[-1])
        if once or (max_runs is not None and fires >= max_runs):
            return started
        if fire is None:
            upcoming = next_fire(cron, t)
            if upcoming is None:
                return started
            sleep(min(MAX_SCHEDULE_SLEEP_S, max(0.0, (upcoming - t).total_seconds())))
