"""The shared cron grammar (servekit._utils.cron): both forms, its errors, and fire times on epoch seconds in UTC and
across daylight-saving changes (pure: times are given, the clock is never read)."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from servekit._utils.cron import (
    AWS_DAY_OF_WEEK,
    AWS_MINUTES,
    CRONTAB_FIELDS,
    Cron,
    CronError,
    Problem,
    last_fire,
    next_fire,
    parse_aws,
    parse_crontab,
    parse_field,
)

PARIS = ZoneInfo("Europe/Paris")
HAVANA = ZoneInfo("America/Havana")  # changes its clocks at midnight


def ts(text: str, tz: dt.tzinfo = dt.UTC, fold: int = 0) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=tz, fold=fold).timestamp()


def brute_last(cron: Cron, t: float, tz: dt.tzinfo, span_s: int = 3 * 86400) -> float | None:
    """The reference: every whole UTC minute back from ``t`` whose local time matches."""
    m = t // 60 * 60
    while m > t - span_s:
        if cron.matches(dt.datetime.fromtimestamp(m, tz)):
            return m
        m -= 60
    return None


def brute_next(cron: Cron, t: float, tz: dt.tzinfo, span_s: int = 3 * 86400) -> float | None:
    m = t // 60 * 60 + 60
    while m < t + span_s:
        if cron.matches(dt.datetime.fromtimestamp(m, tz)):
            return m
        m += 60
    return None


# ---- the field grammar --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("*", range(60)),
        ("5", [5]),
        ("5,10-12", [5, 10, 11, 12]),
        ("*/15", [0, 15, 30, 45]),
        ("5/20", [5, 25, 45]),  # a value with a step runs to the field's end
        ("10-30/10", [10, 20, 30]),
        ("7/", [7]),  # an empty step is no step
        ("?", range(60)),  # AWS: '?' reads as '*' inside a field
    ],
)
def test_items_lists_ranges_and_steps(text: str, values: range | list[int]) -> None:
    assert parse_field(text, AWS_MINUTES, ("*", "?")) == frozenset(values)


def test_names_in_any_case() -> None:
    assert parse_field("mon-FRI", AWS_DAY_OF_WEEK) == frozenset(range(2, 7))  # AWS: 1 = Sunday
    assert parse_field("sun,7", CRONTAB_FIELDS[4]) == frozenset({0, 7})  # crontab: 0 and 7 = Sunday


@pytest.mark.parametrize(
    ("text", "problem", "item", "token", "message"),
    [
        ("*/0", Problem.STEP, "*/0", "0", "'*/0': the step of minutes must be a positive integer."),
        ("1/x", Problem.STEP, "1/x", "x", "the step of minutes"),
        ("foo", Problem.VALUE, "foo", "foo", "'foo' is not a valid value for minutes."),
        ("1-", Problem.VALUE, "1-", "", "'' is not a valid value for minutes."),
        ("61", Problem.RANGE, "61", "61", "61 is out of range for minutes (0-59)."),
        ("5,1-70", Problem.RANGE, "1-70", "70", "70 is out of range"),
        ("30-10", Problem.BACKWARDS, "30-10", "30-10", "'30-10': the range of minutes runs backwards."),
        ("70-x", Problem.VALUE, "70-x", "x", "not a valid value"),  # an item's values are read before their bounds
        ("?", Problem.VALUE, "?", "?", "'?' is not a valid value"),  # '*' only, unless the form allows '?'
    ],
)
def test_field_errors_say_what_and_where(text: str, problem: Problem, item: str, token: str, message: str) -> None:
    with pytest.raises(CronError) as err:
        parse_field(text, AWS_MINUTES)
    assert (err.value.problem, err.value.field, err.value.item, err.value.token) == (problem, AWS_MINUTES, item, token)
    assert message in str(err.value)


# ---- the two forms ------------------------------------------------------------------------------------------------


def test_aws_form() -> None:
    c = parse_aws("0 9 ? * MON-FRI *")
    assert c.expression == "0 9 ? * MON-FRI *"
    assert c.weekdays == frozenset(range(1, 6)) and not c.any_weekday and c.any_day  # 0 = Sunday inside
    assert parse_aws("0 9 ? * 2-6 *").weekdays == c.weekdays
    last = parse_aws("30 23 L FEB ? 2024")
    assert last.last_day and last.months == {2} and last.years == frozenset({2024})
    assert last.day_matches(dt.date(2024, 2, 29)) and not last.day_matches(dt.date(2024, 2, 28))
    assert not last.day_matches(dt.date(2025, 2, 28))  # another year
    assert parse_aws("0 0 1,15 * ? *").day_matches(dt.date(2024, 5, 15))


@pytest.mark.parametrize(
    ("body", "problem", "message"),
    [
        ("0 9 * * ?", Problem.FIELDS, "cron(0 9 * * ?) needs six fields"),
        ("0 9 * * MON *", Problem.QUESTION_MARK, "exactly one of day-of-month and day-of-week must be '?'"),
        ("0 9 ? * ? *", Problem.QUESTION_MARK, "exactly one"),
        ("0 9 ? * MON#2 *", Problem.UNSUPPORTED, "servekit does not support 'MON#2'"),
        ("0 9 15W * ? *", Problem.UNSUPPORTED, "does not support '15W'"),
        ("0 9 ? * 6L *", Problem.UNSUPPORTED, "(W, # and weekday L)"),
        ("0 9 * * ? 1969", Problem.RANGE, "1969 is out of range for year (1970-2199)."),
        ("0 9 * FOO ? *", Problem.VALUE, "'FOO' is not a valid value for month."),
    ],
)
def test_aws_form_errors(body: str, problem: Problem, message: str) -> None:
    with pytest.raises(CronError) as err:
        parse_aws(body)
    assert err.value.problem is problem and message in str(err.value)


def test_crontab_form() -> None:
    c = parse_crontab("*/15 9-17 * * mon-fri")
    assert sorted(c.minutes) == [0, 15, 30, 45] and c.hours == frozenset(range(9, 18))
    assert c.weekdays == frozenset(range(1, 6)) and c.any_day and not c.any_weekday and c.years is None
    assert parse_crontab("0 0 * * 7").weekdays == {0}
    either = parse_crontab("0 0 13 * fri")  # both restricted: a day matching either fires
    assert either.day_matches(dt.date(2026, 2, 6)) and either.day_matches(dt.date(2026, 3, 13))
    assert not either.day_matches(dt.date(2026, 2, 7))
    with pytest.raises(CronError) as err:
        parse_crontab("* * * *")
    assert err.value.problem is Problem.FIELDS and err.value.count == 4
    with pytest.raises(CronError) as err:
        parse_crontab("0 0 ? * *")  # '?' is AWS's
    assert err.value.problem is Problem.VALUE and err.value.field is CRONTAB_FIELDS[2]


# ---- when it fires ------------------------------------------------------------------------------------------------


def test_last_and_next_fire_in_utc() -> None:
    c = parse_crontab("*/15 9-17 * * mon-fri")
    assert next_fire(c, ts("2026-01-02T17:50:00")) == ts("2026-01-05T09:00:00")  # Friday evening -> Monday
    assert next_fire(c, ts("2026-01-05T09:00:00")) == ts("2026-01-05T09:15:00")  # strictly after
    assert next_fire(c, ts("2026-01-05T09:00:30")) == ts("2026-01-05T09:15:00")
    assert last_fire(c, ts("2026-01-05T09:14:59")) == ts("2026-01-05T09:00:00")  # at or before
    assert last_fire(c, ts("2026-01-05T09:15:00")) == ts("2026-01-05T09:15:00")
    assert last_fire(c, ts("2026-01-04T12:00:00")) == ts("2026-01-02T17:45:00")  # back over the weekend
    # (after, at_or_before]
    assert last_fire(c, ts("2026-01-05T09:20:00"), after=ts("2026-01-05T09:15:00")) is None
    assert last_fire(c, ts("2026-01-05T09:20:00"), after=ts("2026-01-05T09:14:00")) == ts("2026-01-05T09:15:00")
    assert last_fire(c, ts("2026-01-04T12:00:00"), after=ts("2026-01-03T00:00:00")) is None


def test_rare_and_never() -> None:
    leap = parse_crontab("0 0 29 2 *")
    assert next_fire(leap, ts("2026-03-01T00:00:00")) == ts("2028-02-29T00:00:00")
    assert last_fire(leap, ts("2026-03-01T00:00:00")) == ts("2024-02-29T00:00:00")
    assert next_fire(parse_crontab("0 0 31 2 *"), ts("2000-01-01T00:00:00")) is None  # searched 5 years, no Feb 31
    assert next_fire(parse_aws("0 0 * * ? 2024"), ts("2025-01-01T00:00:00")) is None  # its year is past
    assert last_fire(parse_aws("0 0 * * ? 2030"), ts("2025-01-01T00:00:00")) is None


def test_a_time_zone_moves_the_fires() -> None:
    eight = parse_aws("0 8 * * ? *")  # 08:00 in Paris: 07:00 UTC in winter, 06:00 in summer
    assert last_fire(eight, ts("2024-01-10T08:00:00"), PARIS) == ts("2024-01-10T07:00:00")
    assert next_fire(eight, ts("2024-07-10T00:00:00"), PARIS) == ts("2024-07-10T06:00:00")
    # the calendar day is Paris's: 23:30 UTC on Jan 31 is Feb 1 there
    first = parse_aws("30 0 1 * ? *")
    assert next_fire(first, ts("2024-01-31T00:00:00"), PARIS) == ts("2024-01-31T23:30:00")


def test_daylight_saving_gaps_skip_and_folds_repeat() -> None:
    half_past_two = parse_aws("30 2 * * ? *")
    # 2024-03-31 02:00 -> 03:00 in Paris: no 02:30 that day
    assert next_fire(half_past_two, ts("2024-03-30T12:00:00"), PARIS) == ts("2024-04-01T02:30:00", PARIS)
    # 2024-10-27 03:00 -> 02:00: 02:30 happens twice, both fire
    first = ts("2024-10-27T02:30:00", PARIS)
    second = ts("2024-10-27T02:30:00", PARIS, fold=1)
    assert second - first == 3600
    assert next_fire(half_past_two, ts("2024-10-26T12:00:00"), PARIS) == first
    assert next_fire(half_past_two, first, PARIS) == second
    assert last_fire(half_past_two, second + 60, PARIS) == second
    assert last_fire(half_past_two, second - 60, PARIS) == first


@pytest.mark.parametrize(
    ("tz", "around"),
    [
        (PARIS, "2024-03-31T01:00:00"),
        (PARIS, "2024-10-27T01:00:00"),
        (HAVANA, "2024-03-10T05:00:00"),  # 00:00 -> 01:00
        (HAVANA, "2024-11-03T05:00:00"),  # 01:00 -> 00:00
        (ZoneInfo("Australia/Lord_Howe"), "2024-04-06T15:00:00"),  # a half-hour change
    ],
)
@pytest.mark.parametrize("body", ["*/20 * * * ? *", "15,45 0,1,2,23 * * ? *", "0 0 ? * * *", "59 23 L * ? *"])
def test_fires_around_a_change_are_the_minutes_whose_local_time_matches(tz: ZoneInfo, around: str, body: str) -> None:
    cron = parse_aws(body)
    for hours in range(-30, 31, 5):
        t = ts(around) + hours * 3600 + 17
        assert last_fire(cron, t, tz, after=t - 3 * 86400) == brute_last(cron, t, tz)
        upcoming = next_fire(cron, t, tz)
        assert upcoming == brute_next(cron, t, tz) or (upcoming or 0) >= t + 3 * 86400
