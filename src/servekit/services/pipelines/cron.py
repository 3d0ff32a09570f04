"""Standard 5-field cron expressions (minute hour day-of-month month day-of-week, in UTC) for pipeline schedules.

The grammar is the shared one (:mod:`servekit._utils.cron`, crontab's form): fields take ``*``, numbers, ranges
``a-b``, lists ``a,b`` and steps ``*/n`` / ``a-b/n``; months and weekdays also take names (``jan``, ``mon``), and
weekday 7 is Sunday like 0. As in cron, when both day-of-month and day-of-week are restricted a day matching either
fires. What is the pipelines' own: their wording of errors (:class:`PipelineError`), refusing an expression that
never fires, and datetimes in UTC (the clock is never read here).
"""

from __future__ import annotations

import datetime as dt

from servekit._utils import cron as grammar
from servekit._utils.cron import Cron, CronError, Problem
from servekit.services.pipelines.errors import PipelineError

__all__ = ["FORM", "Cron", "last_fire", "next_fire", "parse_cron"]

FORM = "five fields 'minute hour day-of-month month day-of-week' (UTC), e.g. '0 3 * * *' or '*/15 * * * mon-fri'"


def _message(exc: CronError, expression: str) -> str:
    spec = exc.field
    if exc.problem is Problem.FIELDS or spec is None:
        return f"cron {expression!r}: expected {FORM}"
    if exc.problem is Problem.VALUE:
        return f"cron {expression!r}: {spec.name} {exc.token!r} is not a number{' or a name' if spec.names else ''}"
    if exc.problem is Problem.STEP:
        return f"cron {expression!r}: {spec.name} step {exc.token!r} must be a positive number"
    return f"cron {expression!r}: {spec.name} {exc.item!r} must lie within {spec.low}-{spec.high}"


def parse_cron(expression: str) -> Cron:
    """The parsed expression; :class:`PipelineError` naming the expected form otherwise."""
    try:
        cron = grammar.parse_crontab(expression)
    except CronError as exc:
        raise PipelineError(_message(exc, expression)) from None
    if next_fire(cron, dt.datetime(2000, 1, 1, tzinfo=dt.UTC)) is None:
        raise PipelineError(f"cron {expression!r} never fires (no such day)")
    return cron


def _epoch(t: dt.datetime) -> float:
    if t.tzinfo is None:
        raise PipelineError("cron times are timezone-aware (UTC)")
    return t.timestamp()


def _utc(t: float | None) -> dt.datetime | None:
    return None if t is None else dt.datetime.fromtimestamp(t, dt.UTC)


def next_fire(cron: Cron, after: dt.datetime) -> dt.datetime | None:
    """The first fire strictly after ``after`` (None: none within five years)."""
    return _utc(grammar.next_fire(cron, _epoch(after)))


def last_fire(cron: Cron, at_or_before: dt.datetime) -> dt.datetime | None:
    """The newest fire at or before ``at_or_before`` (None: none within five years)."""
    return _utc(grammar.last_fire(cron, _epoch(at_or_before)))
