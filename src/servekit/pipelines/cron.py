"""Standard 5-field cron expressions (minute hour day-of-month month day-of-week, in UTC) for pipeline schedules.

Pure functions over datetimes the caller gives (the clock is never read here). Fields take ``*``, numbers, ranges
``a-b``, lists ``a,b`` and steps ``*/n`` / ``a-b/n``; months and weekdays also take names (``jan``, ``mon``), and
weekday 7 is Sunday like 0. As in cron, when both day-of-month and day-of-week are restricted a day matching either
fires. (The monitoring schedules' parser in the control plane reads SageMaker's hourly/daily forms only, and this
package may not import the control plane.)
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from servekit.pipelines.errors import PipelineError

_MONTHS = {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
_DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _DAYS),
)
FORM = "five fields 'minute hour day-of-month month day-of-week' (UTC), e.g. '0 3 * * *' or '*/15 * * * mon-fri'"
_SEARCH_DAYS = 366 * 5  # a valid expression fires within any 5 years (Feb 29 included)


@dataclass(frozen=True, slots=True)
class Cron:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day-of-month is '*'
    any_weekday: bool  # day-of-week is '*'

    def day_matches(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        by_date = day.day in self.days
        by_weekday = (day.isoweekday() % 7) in self.weekdays
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return by_weekday
        if self.any_weekday:
            return by_date
        return by_date or by_weekday  # cron's rule: either restricted field matches


def _value(text: str, name: str, names: dict[str, int], expression: str) -> int:
    key = text.lower()
    if key in names:
        return names[key]
    if not text.isdigit():
        raise PipelineError(f"cron {expression!r}: {name} {text!r} is not a number{' or a name' if names else ''}")
    return int(text)


def _field(text: str, name: str, low: int, high: int, names: dict[str, int], expression: str) -> frozenset[int]:
    out: set[int] = set()
    for item in text.split(","):
        body, _, step_text = item.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise PipelineError(f"cron {expression!r}: {name} step {step_text!r} must be a positive number")
            step = int(step_text)
        if body == "*":
            start, end = low, high
        elif "-" in body:
            a, _, b = body.partition("-")
            start, end = _value(a, name, names, expression), _value(b, name, names, expression)
        else:
            start = _value(body, name, names, expression)
            end = high if step_text else start
        if not low <= start <= end <= high:
            raise PipelineError(f"cron {expression!r}: {name} {item!r} must lie within {low}-{high}")
        out.update(range(start, end + 1, step))
    return frozenset(out)


def parse_cron(expression: str) -> Cron:
    """The parsed expression; :class:`PipelineError` naming the expected form otherwise."""
    parts = expression.split()
    if len(parts) != 5:
        raise PipelineError(f"cron {expression!r}: expected {FORM}")
    sets = [_field(p, name, lo, hi, names, expression) for p, (name, lo, hi, names) in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[4])
    cron = Cron(expression, sets[0], sets[1], sets[2], sets[3], weekdays, parts[2] == "*", parts[4] == "*")
    if next_fire(cron, dt.datetime(2000, 1, 1, tzinfo=dt.UTC)) is None:
        raise PipelineError(f"cron {expression!r} never fires (no such day)")
    return cron


def _utc(t: dt.datetime) -> dt.datetime:
    if t.tzinfo is None:
        raise PipelineError("cron times are timezone-aware (UTC)")
    return t.astimezone(dt.UTC)


def next_fire(cron: Cron, after: dt.datetime) -> dt.datetime | None:
    """The first fire strictly after ``after`` (None: none within five years)."""
    t = _utc(after).replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    day = t.date()
    for _ in range(_SEARCH_DAYS):
        if cron.day_matches(day):
            first = t if day == t.date() else None
            for hour in sorted(cron.hours):
                for minute in sorted(cron.minutes):
                    fire = dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=dt.UTC)
                    if first is None or fire >= first:
                        return fire
        day += dt.timedelta(days=1)
    return None


def last_fire(cron: Cron, at_or_before: dt.datetime) -> dt.datetime | None:
    """The newest fire at or before ``at_or_before`` (None: none within five years)."""
    t = _utc(at_or_before).replace(second=0, microsecond=0)
    day = t.date()
    for _ in range(_SEARCH_DAYS):
        if cron.day_matches(day):
            for hour in sorted(cron.hours, reverse=True):
                for minute in sorted(cron.minutes, reverse=True):
                    fire = dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=dt.UTC)
                    if fire <= t:
                        return fire
        day -= dt.timedelta(days=1)
    return None
