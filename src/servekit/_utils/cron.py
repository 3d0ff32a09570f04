"""Cron expressions, one grammar for every schedule servekit reads: parsed, then asked "when does it fire?" — pure
functions of epoch seconds (the clock is the caller's), in any IANA time zone.

Two forms share the field grammar:

- **AWS's six fields** (:func:`parse_aws`; EventBridge, Application Auto Scaling, SageMaker ``cron(…)``):
  ``minutes hours day-of-month month day-of-week year``. Day-of-week 1 = Sunday … 7 = Saturday; exactly one of
  day-of-month and day-of-week is ``?``; day-of-month ``L`` is the month's last day. ``W``, ``#`` and day-of-week
  ``L`` are refused (not implemented). ``?`` also reads as ``*`` inside any field.
- **crontab's five fields** (:func:`parse_crontab`; pipeline schedules): ``minute hour day-of-month month
  day-of-week``. Day-of-week 0 and 7 are Sunday; no year (every year fires); when both day fields are restricted, a
  day matching either fires (cron's rule).

A field is a ``,`` list of items; an item is ``*`` (every value), a value, or a range ``a-b``, each with an optional
``/step`` (a value with a step runs to the field's end: ``5/20`` is 5, 25, 45). Months and days of the week also take
names (``JAN``, ``MON``; any case).

A cron fires at the whole minutes whose local time in the zone matches every field: a wall time skipped by a
daylight-saving jump never fires, one repeated by a fall-back fires twice. :func:`last_fire` and :func:`next_fire`
search at most :data:`SEARCH_DAYS` days.

Errors are :class:`CronError`: its message is AWS's wording (Application Auto Scaling answers with it); a service
with wording of its own reads its ``problem``, ``field``, ``item`` and ``token``.
"""

from __future__ import annotations

import calendar
import datetime as dt
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

SEARCH_DAYS = 366 * 5  # a valid expression fires within any 5 years (Feb 29 included)
MINUTE_S = 60
DAY_S = 86400


class Problem(StrEnum):
    FIELDS = "fields"  # not the form's number of fields
    QUESTION_MARK = "question-mark"  # AWS: not exactly one of day-of-month and day-of-week is '?'
    UNSUPPORTED = "unsupported"  # AWS: W, # or day-of-week L
    VALUE = "value"  # neither a number nor one of the field's names
    RANGE = "range"  # a value outside the field's bounds
    BACKWARDS = "backwards"  # a range whose start lies after its end
    STEP = "step"  # a step that is not a positive integer


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a form: its name (as the form's documentation spells it), bounds and names of values."""

    name: str
    low: int
    high: int
    names: Mapping[str, int] = field(default_factory=dict)  # upper case

    def value(self, token: str) -> int | None:
        """The value a token names (a number or a name; bounds not checked), else None."""
        named = self.names.get(token.upper())
        if named is not None:
            return named
        return int(token) if token.isdigit() else None


class CronError(ValueError):
    """An expression the grammar refuses: ``problem``, the ``field`` (None for the expression's shape), the list
    ``item`` and the ``token`` at fault, the ``value`` out of range, the ``count`` of fields."""

    def __init__(
        self,
        message: str,
        problem: Problem,
        field: Field | None = None,
        item: str = "",
        token: str = "",
        value: int | None = None,
        count: int = 0,
    ) -> None:
        super().__init__(message)
        self.problem = problem
        self.field = field
        self.item = item
        self.token = token
        self.value = value
        self.count = count


_MONTHS = {m.upper(): i for i, m in enumerate(calendar.month_abbr) if m}
_WEEK = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")

AWS_MINUTES = Field("minutes", 0, 59)
AWS_HOURS = Field("hours", 0, 23)
AWS_DAY_OF_MONTH = Field("day-of-month", 1, 31)
AWS_MONTH = Field("month", 1, 12, _MONTHS)
AWS_DAY_OF_WEEK = Field("day-of-week", 1, 7, {d: i + 1 for i, d in enumerate(_WEEK)})  # 1 = Sunday
AWS_YEAR = Field("year", 1970, 2199)
AWS_FIELDS = (AWS_MINUTES, AWS_HOURS, AWS_DAY_OF_MONTH, AWS_MONTH, AWS_DAY_OF_WEEK, AWS_YEAR)
AWS_WILDCARDS = ("*", "?")

CRONTAB_FIELDS = (
    Field("minute", 0, 59),
    Field("hour", 0, 23),
    Field("day-of-month", 1, 31),
    Field("month", 1, 12, _MONTHS),
    Field("day-of-week", 0, 7, {d: i for i, d in enumerate(_WEEK)}),  # 0 and 7 = Sunday
)


def parse_field(text: str, spec: Field, wildcards: tuple[str, ...] = ("*",)) -> frozenset[int]:
    """The values one field's text selects. Each item is checked in order: its step, then its values (a number or
    a name), then their bounds, then that a range runs forwards."""
    out: set[int] = set()
    for item in text.split(","):
        base, _, step_text = item.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) < 1:
                raise CronError(
                    f"{item!r}: the step of {spec.name} must be a positive integer.",
                    Problem.STEP,
                    spec,
                    item,
                    step_text,
                )
            step = int(step_text)
        if base in wildcards:
            first, last = spec.low, spec.high
        else:
            ends = base.split("-", 1)
            values = [_value(token, spec, item) for token in ends]
            for token, value in zip(ends, values, strict=True):
                if not spec.low <= value <= spec.high:
                    raise CronError(
                        f"{value} is out of range for {spec.name} ({spec.low}-{spec.high}).",
                        Problem.RANGE,
                        spec,
                        item,
                        token,
                        value,
                    )
            first = values[0]
            last = values[1] if len(values) == 2 else spec.high if step_text else first
            if first > last:
                raise CronError(
                    f"{item!r}: the range of {spec.name} runs backwards.", Problem.BACKWARDS, spec, item, base
                )
        out.update(range(first, last + 1, step))
    return frozenset(out)


def _value(token: str, spec: Field, item: str) -> int:
    value = spec.value(token)
    if value is None:
        raise CronError(f"{token!r} is not a valid value for {spec.name}.", Problem.VALUE, spec, item, token)
    return value


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression, either form. Day sets are full when their field is unrestricted (``*``/``?``)."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]  # day-of-month
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday … 6 = Saturday, whichever the form's numbering
    any_day: bool  # day-of-month is '*' or '?'
    any_weekday: bool  # day-of-week is '*' or '?'
    last_day: bool = False  # day-of-month 'L'
    years: frozenset[int] | None = None  # None: every year (crontab's form)

    def day_matches(self, day: dt.date) -> bool:
        if day.month not in self.months or (self.years is not None and day.year not in self.years):
            return False
        if self.any_day and self.any_weekday:
            return True
        by_weekday = (day.isoweekday() % 7) in self.weekdays
        if self.any_day:
            return by_weekday
        by_date = day.day == calendar.monthrange(day.year, day.month)[1] if self.last_day else day.day in self.days
        if self.any_weekday:
            return by_date
        return by_date or by_weekday  # cron's rule: either restricted field matches

    def matches(self, local: dt.datetime) -> bool:
        """Whether the wall time ``local`` (seconds ignored) is a fire."""
        return local.minute in self.minutes and local.hour in self.hours and self.day_matches(local.date())


def parse_aws(body: str) -> Cron:
    """AWS's six fields (the text inside ``cron(…)``)."""
    fields = body.split()
    if len(fields) != 6:
        raise CronError(
            f"cron({body}) needs six fields (minutes hours day-of-month month day-of-week year), not {len(fields)}.",
            Problem.FIELDS,
            count=len(fields),
        )
    minute, hour, dom, month, dow, year = fields
    if (dom == "?") == (dow == "?"):
        raise CronError(
            "In a cron expression exactly one of day-of-month and day-of-week must be '?'.", Problem.QUESTION_MARK
        )
    for text, spec in ((dom, AWS_DAY_OF_MONTH), (dow, AWS_DAY_OF_WEEK)):
        if any(c in text for c in "W#") or (spec is AWS_DAY_OF_WEEK and "L" in text):
            raise CronError(
                f"servekit does not support {text!r} in a cron expression (W, # and weekday L).",
                Problem.UNSUPPORTED,
                spec,
                text,
                text,
            )
    every_day = frozenset(range(1, 32))
    sets = [
        parse_field(minute, AWS_MINUTES, AWS_WILDCARDS),
        parse_field(hour, AWS_HOURS, AWS_WILDCARDS),
        every_day if dom in ("?", "L") else parse_field(dom, AWS_DAY_OF_MONTH, AWS_WILDCARDS),
        parse_field(month, AWS_MONTH, AWS_WILDCARDS),
        frozenset(range(1, 8)) if dow == "?" else parse_field(dow, AWS_DAY_OF_WEEK, AWS_WILDCARDS),
        parse_field(year, AWS_YEAR, AWS_WILDCARDS),
    ]
    return Cron(
        body,
        minutes=sets[0],
        hours=sets[1],
        days=frozenset() if dom == "L" else sets[2],
        months=sets[3],
        weekdays=frozenset(d - 1 for d in sets[4]),
        any_day=dom in AWS_WILDCARDS,
        any_weekday=dow in AWS_WILDCARDS,
        last_day=dom == "L",
        years=sets[5],
    )


def parse_crontab(expression: str) -> Cron:
    """crontab's five fields."""
    parts = expression.split()
    if len(parts) != 5:
        raise CronError(
            f"{expression!r} needs five fields (minute hour day-of-month month day-of-week), not {len(parts)}.",
            Problem.FIELDS,
            count=len(parts),
        )
    sets = [parse_field(text, spec) for text, spec in zip(parts, CRONTAB_FIELDS, strict=True)]
    return Cron(
        expression,
        minutes=sets[0],
        hours=sets[1],
        days=sets[2],
        months=sets[3],
        weekdays=frozenset(d % 7 for d in sets[4]),
        any_day=parts[2] == "*",
        any_weekday=parts[4] == "*",
    )


# ---- when it fires ------------------------------------------------------------------------------------------------


def _day_span(day: dt.date, tz: dt.tzinfo) -> tuple[float, float]:
    """``[first, end)`` in epoch seconds of the instants whose local date is ``day``: from its midnight (after a
    jump forward over midnight, the jump) to the next day's midnight (after a fall-back over midnight, its second
    one)."""
    nxt = day + dt.timedelta(days=1)
    start = dt.datetime(day.year, day.month, day.day, tzinfo=tz).timestamp()
    end = max(dt.datetime(nxt.year, nxt.month, nxt.day, fold=f, tzinfo=tz).timestamp() for f in (0, 1))
    return start, end


def _fires_on(
    cron: Cron, day: dt.date, tz: dt.tzinfo, span: tuple[float, float], latest_first: bool
) -> Iterator[float]:
    """The fires whose local date is ``day`` (a day ``cron`` matches), in order of time."""
    start, end = span
    offsets = {dt.datetime.fromtimestamp(start + h * 3600, tz).utcoffset() for h in range(24)}
    offsets.add(dt.datetime.fromtimestamp(end - 1, tz).utcoffset())
    if end - start == DAY_S and len(offsets) == 1 and start % MINUTE_S == 0:  # one whole-minute offset all day
        minutes = sorted(cron.minutes, reverse=latest_first)
        for hour in sorted(cron.hours, reverse=latest_first):
            for minute in minutes:
                yield start + hour * 3600 + minute * MINUTE_S
        return
    # a day with a change of offset: each whole UTC minute whose local time matches
    scan = range(math.ceil(start / MINUTE_S) * MINUTE_S, math.ceil(end), MINUTE_S)
    for t in reversed(scan) if latest_first else scan:
        local = dt.datetime.fromtimestamp(t, tz)
        if local.date() == day and local.hour in cron.hours and local.minute in cron.minutes:
            yield float(t)


def _local_date(t: float, tz: dt.tzinfo) -> dt.date:
    return dt.datetime.fromtimestamp(t, tz).date()


def last_fire(cron: Cron, at_or_before: float, tz: dt.tzinfo = dt.UTC, after: float | None = None) -> float | None:
    """The newest fire in ``(after, at_or_before]`` (None: none, or none within :data:`SEARCH_DAYS` days)."""
    day = _local_date(at_or_before, tz) + dt.timedelta(days=1)  # a fall-back over midnight interleaves two dates
    bottom = day - dt.timedelta(days=SEARCH_DAYS + 1)
    if after is not None:
        bottom = max(bottom, _local_date(after, tz) - dt.timedelta(days=1))
    best: float | None = None
    while day >= bottom:
        if best is not None or cron.day_matches(day):
            span = _day_span(day, tz)
            if best is not None and span[1] <= best:
                return best  # this day and every earlier one end before the fire found
            if cron.day_matches(day) and span[0] <= at_or_before and (after is None or span[1] > after):
                for fire in _fires_on(cron, day, tz, span, latest_first=True):
                    if fire <= at_or_before:
                        if (after is None or fire > after) and (best is None or fire > best):
                            best = fire
                        break
        day -= dt.timedelta(days=1)
    return best


def next_fire(cron: Cron, after: float, tz: dt.tzinfo = dt.UTC) -> float | None:
    """The first fire strictly after ``after`` (None: none within :data:`SEARCH_DAYS` days)."""
    day = _local_date(after, tz) - dt.timedelta(days=1)  # a fall-back over midnight interleaves two dates
    top = day + dt.timedelta(days=SEARCH_DAYS + 1)
    best: float | None = None
    while day <= top:
        if best is not None or cron.day_matches(day):
            span = _day_span(day, tz)
            if best is not None and span[0] >= best:
                return best  # this day and every later one start after the fire found
            if cron.day_matches(day) and span[1] > after:
                for fire in _fires_on(cron, day, tz, span, latest_first=False):
                    if fire > after:
                        if best is None or fire < best:
                            best = fire
                        break
        day += dt.timedelta(days=1)
    return best
