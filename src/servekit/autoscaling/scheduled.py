"""Application Auto Scaling's schedule expressions, parsed and asked "when did it last fire?": pure, on epoch seconds.

- ``at(yyyy-mm-ddThh:mm:ss)``: once, at that local time of the action's Timezone.
- ``rate(N minute|minutes|hour|hours|day|days)``: every N units from StartTime (which fires too) or, without
  one, from when the action was put (which does not).
- ``cron(minutes hours day-of-month month day-of-week year)``: AWS's six fields, in the Timezone. Each field
  takes ``*``, numbers, ``a-b`` ranges, ``,`` lists and ``/`` steps; month and day-of-week also names
  (``JAN``…, ``SUN``…; day-of-week 1 = Sunday as in AWS); day-of-month ``L`` is the month's last day; one of
  day-of-month and day-of-week must be ``?``. ``W``, ``#`` and day-of-week ``L`` are refused (not implemented).

:func:`last_fire` answers the newest fire time in ``(after, upto]`` inside [StartTime, EndTime]; the scaler calls
it each tick with ``after`` = its previous tick, so a fire is seen once, even across a restart.
"""

from __future__ import annotations

import calendar
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
_RATE = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")
_CRON = re.compile(r"^cron\((.+)\)$")
_UNITS = {"minute": 60, "hour": 3600, "day": 86400}
_MONTHS = {m.upper(): i for i, m in enumerate(calendar.month_abbr) if m}
_DAYS = {d: i + 1 for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
MAX_SCAN_S = 7 * 86400  # how far back a cron is searched for a fire (a longer outage runs only the newest one)


class ScheduleError(ValueError):
    """A schedule expression AAS (or servekit) does not accept; the API answers ValidationException."""


@dataclass(frozen=True, slots=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int] | None  # None: '?'
    last_day: bool  # day-of-month 'L'
    months: frozenset[int]
    weekdays: frozenset[int] | None  # 1 = Sunday … 7 = Saturday; None: '?'
    years: frozenset[int]

    def matches(self, t: datetime) -> bool:
        if t.minute not in self.minutes or t.hour not in self.hours or t.month not in self.months:
            return False
        if t.year not in self.years:
            return False
        if self.weekdays is not None:
            return (t.isoweekday() % 7) + 1 in self.weekdays  # isoweekday: Monday 1 … Sunday 7
        if self.last_day:
            return t.day == calendar.monthrange(t.year, t.month)[1]
        return self.days is None or t.day in self.days


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
        return Schedule(expression, tz, cron=_cron(m.group(1)))
    raise ScheduleError(
        f"Schedule {expression!r} is not valid: use at(yyyy-mm-ddThh:mm:ss), rate(value unit) or "
        "cron(minutes hours day-of-month month day-of-week year)."
    )


def _cron(body: str) -> Cron:
    fields = body.split()
    if len(fields) != 6:
        raise ScheduleError(
            f"cron({body}) needs six fields (minutes hours day-of-month month day-of-week year), not {len(fields)}."
        )
    minute, hour, dom, month, dow, year = fields
    if (dom == "?") == (dow == "?"):
        raise ScheduleError("In a cron expression exactly one of day-of-month and day-of-week must be '?'.")
    for field in (dom, dow):
        if any(c in field for c in "W#") or (field is dow and "L" in field):
            raise ScheduleError(f"servekit does not support {field!r} in a cron expression (W, # and weekday L).")
    last_day = dom == "L"
    return Cron(
        minutes=_field(minute, 0, 59, "minutes"),
        hours=_field(hour, 0, 23, "hours"),
        days=None if dom in ("?", "L") else _field(dom, 1, 31, "day-of-month"),
        last_day=last_day,
        months=_field(month, 1, 12, "month", _MONTHS),
        weekdays=None if dow == "?" else _field(dow, 1, 7, "day-of-week", _DAYS),
        years=_field(year, 1970, 2199, "year"),
    )


def _field(text: str, lo: int, hi: int, what: str, names: dict[str, int] | None = None) -> frozenset[int]:
    def number(s: str) -> int:
        value = names.get(s.upper()) if names else None
        if value is None:
            if not s.isdigit():
                raise ScheduleError(f"{s!r} is not a valid value for {what}.")
            value = int(s)
        if not lo <= value <= hi:
            raise ScheduleError(f"{value} is out of range for {what} ({lo}-{hi}).")
        return value

    out: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) < 1:
                raise ScheduleError(f"{part!r}: the step of {what} must be a positive integer.")
            step = int(step_text)
        if base in ("*", "?"):
            first, last = lo, hi
        elif "-" in base:
            a, b = base.split("-", 1)
            first, last = number(a), number(b)
            if first > last:
                raise ScheduleError(f"{part!r}: the range of {what} runs backwards.")
        else:
            first = number(base)
            last = hi if step_text else first
        out.update(range(first, last + 1, step))
    return frozenset(out)


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
    minute = math.floor(hi / 60) * 60
    floor = max(lo, hi - MAX_SCAN_S)
    while minute > floor:
        local = datetime.fromtimestamp(minute, UTC).astimezone(schedule.tz)
        if schedule.cron.matches(local):
            return float(minute)
        minute -= 60
    return None
