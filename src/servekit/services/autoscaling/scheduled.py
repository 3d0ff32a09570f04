"""Application Auto Scaling's schedule expressions, parsed and asked "when did it last fire?": pure, on epoch seconds.

- ``at(yyyy-mm-ddThh:mm:ss)``: once, at that local time of the action's Timezone.
- ``rate(N minute|minutes|hour|hours|day|days)``: every N units from StartTime (which fires too) or, without
  one, from when the action was put (which does not).
- ``cron(minutes hours day-of-month month day-of-week year)``: AWS's six fields, in the Timezone, read by the
  shared grammar (:mod:`servekit._utils.cron`: ``*``, numbers, ``a-b`` ranges, ``,`` lists and ``/`` steps;
  month and day-of-week names; day-of-week 1 = Sunday as in AWS; day-of-month ``L``; one of day-of-month and
  day-of-week must be ``?``; ``W``, ``#`` and day-of-week ``L`` are refused).

:func:`last_fire` answers the newest fire time in ``(after, upto]`` inside [StartTime, EndTime]; the scaler calls
it each tick with ``after`` = its previous tick, so a fire is seen once, even across a restart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from servekit._utils.cron import Cron, CronError, parse_aws
from servekit._utils.cron import last_fire as last_cron_fire

_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
_RATE = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")
_CRON = re.compile(r"^cron\((.+)\)$")
_UNITS = {"minute": 60, "hour": 3600, "day": 86400}
MAX_SCAN_S = 7 * 86400  # how far back a cron is searched for a fire (a longer outage runs only the newest one)


class ScheduleError(ValueError):
    """A schedule expression AAS (or servekit) does not accept; the API answers ValidationException."""


@dataclass(frozen=True, slots=True)
class Schedule:
    expression: str
    tz: ZoneInfo
    at: float | None = None
    every_s: int | None = None
    cron: Cron | None = None


def _zone(timezone: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"Timezone {timezone!r} is not a valid IANA time zone (e.g. UTC, Europe/Paris).") from None


def parse(expression: str, timezone: str | None = None) -> Schedule:
    tz = _zone(timezone)
    text = expression.strip()
    if m := _AT.match(text):
        try:
            local = datetime.fromisoformat(m.group(1)).replace(tzinfo=tz)
        except ValueError:
            raise ScheduleError(f"{expression!r} is not a valid date and time.") from None
        return Schedule(expression, tz, at=local.timestamp())
    if m := _RATE.match(text):
        n, unit = int(m.group(1)), m.group(2).rstrip("s")
        if n < 1:
            raise ScheduleError("The rate value must be a positive integer.")
        return Schedule(expression, tz, every_s=n * _UNITS[unit])
    if m := _CRON.match(text):
        try:
            return Schedule(expression, tz, cron=parse_aws(m.group(1)))
        except CronError as exc:
            raise ScheduleError(str(exc)) from None
    raise ScheduleError(
        f"Schedule {expression!r} is not valid: use at(yyyy-mm-ddThh:mm:ss), rate(value unit) or "
        "cron(minutes hours day-of-month month day-of-week year)."
    )


def last_fire(
    schedule: Schedule,
    after: float,
    upto: float,
    start: float | None = None,
    end: float | None = None,
    created: float | None = None,
) -> float | None:
    """The newest time in ``(after, upto]`` (and in [start, end]) at which ``schedule`` fires, else None."""
    lo = after if start is None else max(after, start - 1e-6)
    hi = upto if end is None else min(upto, end)
    if hi <= lo:
        return None
    if schedule.at is not None:
        return schedule.at if lo < schedule.at <= hi else None
    if schedule.every_s is not None:
        anchor = start if start is not None else created
        if anchor is None:
            return None
        k = math.floor((hi - anchor) / schedule.every_s)
        first_k = 0 if start is not None else 1
        if k < first_k:
            return None
        t = anchor + k * schedule.every_s
        return t if t > lo else None
    assert schedule.cron is not None
    return last_cron_fire(schedule.cron, hi, schedule.tz, after=max(lo, hi - MAX_SCAN_S))
