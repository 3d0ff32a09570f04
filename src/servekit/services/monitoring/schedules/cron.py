"""When a monitoring schedule runs: SageMaker Model Monitor's schedule expressions and analysis windows, as pure
functions of epoch seconds (the clock is the caller's).

SageMaker accepts only a few expressions (its ``ScheduleConfig`` reference), all of them whole hours, UTC:

- ``cron(0 * ? * * *)``: every hour;
- ``cron(0 H ? * * *)``, ``H`` in 0-23 (``00`` too): daily at that hour;
- ``cron(0 H/N ? * * *)``, ``N`` in 1-24: hours H, H+N, H+2N… up to 23 of each day (a cron step does not wrap past
  midnight, so ``cron(0 17/12 ? * * *)`` fires at 17:00 only — SageMaker's docs call that "every 12 hours starting
  at 5 PM"; what the service does past midnight is unverified);
- ``NOW``: once, when the schedule is created (its ``DataAnalysisStartTime``/``EndTime`` are then required).

Anything else is refused with the list above. No ``ScheduleConfig`` at all means daily (SageMaker picks the hour;
servekit picks midnight UTC). An accepted expression's hours are read by the shared grammar
(:mod:`servekit._utils.cron`); its fire times are this module's, for time compression (below) puts them on a
timeline of compressed hours that no calendar holds.

**Time compression** (servekit's, for tests and demos): with ``hour_s`` shorter than 3600, every hour of the
expression lasts ``hour_s`` seconds — fires are at ``day·24·hour_s + H·hour_s`` since the epoch, and analysis
offsets scale the same way, so ``cron(0 * ? * * *)`` with ``hour_s=2`` runs every two seconds over the last two
seconds of capture.

**Analysis window** of an execution scheduled at ``t``: ``[t + start, t + end)`` with the ISO 8601 offsets
``DataAnalysisStartTime``/``DataAnalysisEndTime`` (``-PT1H``, ``-P1D``…; never after ``t``, at most 24 hours
long), or, without a start, from the schedule's previous fire time to ``t`` (both shifted by the end offset, if
any): the windows tile the timeline, an hourly schedule reads the last hour, a daily one the last day.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from servekit._utils.cron import parse_aws

HOUR_S = 3600
DAY_HOURS = 24
NOW = "NOW"
MAX_WINDOW_HOURS = 24

_CRON = re.compile(r"^cron\((.*)\)$")
_OFFSET = re.compile(r"^([-+]?)P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$")
SUPPORTED = (
    "cron(0 * ? * * *) (hourly), cron(0 H ? * * *) (daily at hour H, 0-23), cron(0 H/N ? * * *) (hours H, H+N, ... "
    "of each day, N 1-24) or NOW (once)"
)


class ScheduleExpressionError(ValueError):
    """An expression or offset SageMaker would refuse; the API answers ValidationException with this message."""


@dataclass(frozen=True, slots=True)
class MonitoringCron:
    """A parsed schedule: the hours of the day it fires at (UTC), or ``once`` for ``NOW``."""

    expression: str
    hours: tuple[int, ...]  # sorted; empty when once
    once: bool = False


DAILY = MonitoringCron("cron(0 0 ? * * *)", (0,))


def parse_expression(expression: str | None) -> MonitoringCron:
    """``expression`` as SageMaker reads it (None: daily); :class:`ScheduleExpressionError` for the rest."""
    if expression is None:
        return DAILY
    text = expression.strip()
    if text == NOW:
        return MonitoringCron(text, (), once=True)
    m = _CRON.match(text)
    fields = m.group(1).split() if m else []
    if len(fields) != 6 or fields[0] != "0" or fields[2:] != ["?", "*", "*", "*"]:
        raise ScheduleExpressionError(f"Invalid ScheduleExpression {expression!r}: use {SUPPORTED}.")
    _check_hours(fields[1], expression)
    return MonitoringCron(text, tuple(sorted(parse_aws(" ".join(fields)).hours)))


def _check_hours(field: str, expression: str) -> None:
    """The hours SageMaker allows: ``*``, ``H`` or ``H/N`` (N 1-24)."""
    if field == "*":
        return
    start_text, slash, step_text = field.partition("/")
    if not start_text.isdigit() or not 0 <= int(start_text) <= 23:
        raise ScheduleExpressionError(
            f"Invalid ScheduleExpression {expression!r}: the hour must be * or 0-23, not {start_text!r}; use "
            f"{SUPPORTED}."
        )
    if slash and (not step_text.isdigit() or not 1 <= int(step_text) <= 24):
        raise ScheduleExpressionError(
            f"Invalid ScheduleExpression {expression!r}: the step of the hours must be 1-24, not {step_text!r}; "
            f"use {SUPPORTED}."
        )


def _fires_of_day(cron: MonitoringCron, hour_s: float, day: int) -> list[float]:
    base = day * DAY_HOURS * hour_s
    return [base + h * hour_s for h in cron.hours]


def fire_at_or_before(cron: MonitoringCron, hour_s: float, t: float) -> float | None:
    """The newest fire time ≤ ``t`` of a recurring schedule (None for ``NOW``)."""
    if cron.once:
        return None
    day = math.floor(t / (DAY_HOURS * hour_s))
    for d in (day, day - 1):
        candidates = [f for f in _fires_of_day(cron, hour_s, d) if f <= t]
        if candidates:
            return candidates[-1]
    raise AssertionError("a recurring schedule fires at least once a day")  # pragma: no cover


def next_fire(cron: MonitoringCron, hour_s: float, t: float) -> float | None:
    """The first fire time strictly after ``t`` (None for ``NOW``)."""
    if cron.once:
        return None
    day = math.floor(t / (DAY_HOURS * hour_s))
    for d in (day, day + 1):
        candidates = [f for f in _fires_of_day(cron, hour_s, d) if f > t]
        if candidates:
            return candidates[0]
    raise AssertionError("a recurring schedule fires at least once a day")  # pragma: no cover


def due(cron: MonitoringCron, hour_s: float, since: float, handled_until: float | None, now: float) -> float | None:
    """The scheduled time to run now, if any: the newest fire in ``(max(since, handled_until), now]``, ``since``
    being when the schedule's configuration took effect (its creation or last update).

    Fires missed while nothing looked (servekit up was down, the previous execution still ran) are not run one by
    one: only the newest is, as a scheduler that wakes late runs the job once. ``NOW`` fires once, at ``since``.
    """
    if cron.once:
        fresh = handled_until is None or handled_until < since
        return since if fresh and since <= now else None
    after = since if handled_until is None else max(since, handled_until)
    fire = fire_at_or_before(cron, hour_s, now)
    return fire if fire is not None and fire > after else None


def previous_fire(cron: MonitoringCron, hour_s: float, fire: float) -> float:
    """The fire before ``fire`` (``fire`` minus a day for ``NOW``, which has none)."""
    before = fire_at_or_before(cron, hour_s, fire - 1e-6 * hour_s)
    return fire - DAY_HOURS * hour_s if before is None else before


def parse_offset(text: str, field: str) -> float:
    """An ISO 8601 duration offset (``-PT1H``, ``-P1D``, ``-PT30M``, ``-PT0H``) in seconds, ≤ 0."""
    m = _OFFSET.match(text.strip())
    if m is None or not any(m.group(i) for i in range(2, 6)):
        raise ScheduleExpressionError(
            f"{field} {text!r} is not an ISO 8601 duration offset such as -PT1H, -PT30M or -P1D."
        )
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in range(2, 6))
    value = days * 86400 + hours * 3600 + minutes * 60 + seconds
    if value and m.group(1) != "-":
        raise ScheduleExpressionError(
            f"{field} {text!r} lies after the scheduled time: offsets are negative (e.g. -PT1H) or zero (-PT0H)."
        )
    return -float(value)


@dataclass(frozen=True, slots=True)
class Offsets:
    """The analysis window relative to a fire, in real (uncompressed) seconds; None: from the previous fire."""

    start: float | None
    end: float


def parse_offsets(start: str | None, end: str | None, cron: MonitoringCron, where: str = "") -> Offsets:
    """The window offsets, checked: start before end, at most 24 hours apart, and both given for ``NOW``."""
    prefix = f"{where}." if where else ""
    if cron.once and (start is None or end is None):
        raise ScheduleExpressionError(
            f"A schedule with ScheduleExpression NOW needs {prefix}DataAnalysisStartTime and "
            f"{prefix}DataAnalysisEndTime (e.g. -PT1H and -PT0H)."
        )
    s = None if start is None else parse_offset(start, f"{prefix}DataAnalysisStartTime")
    e = 0.0 if end is None else parse_offset(end, f"{prefix}DataAnalysisEndTime")
    if s is not None:
        if s >= e:
            raise ScheduleExpressionError(
                f"{prefix}DataAnalysisStartTime ({start}) must be before {prefix}DataAnalysisEndTime "
                f"({end or '-PT0H'})."
            )
        if e - s > MAX_WINDOW_HOURS * HOUR_S:
            raise ScheduleExpressionError(
                f"{prefix}DataAnalysisEndTime must not follow {prefix}DataAnalysisStartTime by more than 24 hours."
            )
    return Offsets(s, e)


def analysis_window(cron: MonitoringCron, hour_s: float, fire: float, offsets: Offsets) -> tuple[float, float]:
    """``[since, until)`` of the capture an execution scheduled at ``fire`` reads (offsets compressed with
    ``hour_s``)."""
    scale = hour_s / HOUR_S
    until = fire + offsets.end * scale
    if offsets.start is None:  # the span since the previous fire, shifted by the end offset
        return previous_fire(cron, hour_s, fire) + offsets.end * scale, until
    return fire + offsets.start * scale, until
