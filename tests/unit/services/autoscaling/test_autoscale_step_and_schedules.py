"""Step scaling's validation and decision, and schedule expressions (at, rate, AWS's six-field cron), as pure
functions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from servekit.services.autoscaling.scheduled import ScheduleError, last_fire, parse
from servekit.services.autoscaling.step import StepConfigError, StepPolicy, step_desired, step_run


def steps(*bounds: tuple[float | None, float | None, int], kind: str = "ChangeInCapacity", **kw: Any) -> StepPolicy:
    config: dict[str, Any] = {
        "AdjustmentType": kind,
        "StepAdjustments": [
            {
                **({} if lo is None else {"MetricIntervalLowerBound": lo}),
                **({} if hi is None else {"MetricIntervalUpperBound": hi}),
                "ScalingAdjustment": adj,
            }
            for lo, hi, adj in bounds
        ],
        **kw,
    }
    return StepPolicy.from_config("p", config)


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ([(0, 10, 1), (20, None, 2)], "gap"),
        ([(0, 20, 1), (10, None, 2)], "overlap"),
        ([(None, None, 1)], "cannot both be null"),
        ([(None, 0, -1), (None, -5, -2)], "Only one step adjustment can have a null lower bound"),
        ([(0, None, 1), (5, None, 2)], "Only one step adjustment can have a null upper bound"),
        ([(0, 10, 1)], "positive upper bound"),
        ([(-10, 0, -1)], "negative lower bound"),
        ([(10, 5, 1)], "must be less than"),
    ],
)
def test_invalid_step_intervals(bounds: list[tuple[float | None, float | None, int]], message: str) -> None:
    with pytest.raises(StepConfigError, match=message):
        steps(*bounds)


def test_other_invalid_configs() -> None:
    with pytest.raises(StepConfigError, match="only supported with PercentChangeInCapacity"):
        steps((0, None, 1), MinAdjustmentMagnitude=2)
    with pytest.raises(StepConfigError, match="cannot be negative"):
        steps((0, None, -1), kind="ExactCapacity")
    with pytest.raises(StepConfigError, match="AdjustmentType"):
        steps((0, None, 1), kind="Double")


def test_interval_edges_depend_on_the_side_of_the_threshold() -> None:
    p = steps((None, -10, -2), (-10, 0, -1), (0, 10, 1), (10, None, 3))
    assert [step_desired(p, off, 5, 1, 20).desired for off in (-20, -10, -5, 0, 5, 10, 50)] == [3, 3, 4, 6, 6, 8, 8]
    # above: [lower, upper), so 10 is in the +3 step; below: (lower, upper], so -10 is in the -2 step


def test_adjustment_types_rounding_magnitude_and_clamps() -> None:
    pct = steps((0, None, 25), kind="PercentChangeInCapacity")
    assert step_desired(pct, 1, 10, 1, 20).desired == 12  # 2.5 toward zero
    assert step_desired(pct, 1, 3, 1, 20).desired == 3  # 0.75 toward zero: no change
    mag = steps((None, 0, -10), kind="PercentChangeInCapacity", MinAdjustmentMagnitude=2)
    assert step_desired(mag, -1, 10, 1, 20).desired == 8  # 1 raised to the magnitude
    exact = steps((0, None, 9), kind="ExactCapacity")
    assert step_desired(exact, 5, 2, 1, 6).desired == 6  # clamped to Max
    change = steps((None, 0, -5))
    assert step_desired(change, -1, 3, 2, 10).desired == 2  # clamped to Min
    assert step_desired(steps((0, None, 1)), -1, 3, 1, 10).desired is None  # no step below the threshold


def test_cooldown_counts_the_capacity_already_added_and_holds_scale_in() -> None:
    p = steps((None, 0, -1), (0, 10, 1), (10, None, 4), Cooldown=100)
    # the last run took 2 -> 3 at t=0
    assert step_run(p, 5, 3, 1, 20, 0.0, 2, 3, 50.0).desired is None  # same step: already added
    assert step_run(p, 15, 3, 1, 20, 0.0, 2, 3, 50.0).desired == 6  # bigger step: from the base 2
    assert step_run(p, -5, 3, 1, 20, 0.0, 2, 3, 50.0).desired is None  # scale-in waits
    assert step_run(p, -5, 3, 1, 20, 0.0, 2, 3, 150.0).desired == 2  # after the cooldown


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_at_in_a_timezone() -> None:
    s = parse("at(2024-03-01T09:30:00)", "America/New_York")
    fire = ts("2024-03-01T14:30:00")  # EST is UTC-5
    assert last_fire(s, fire - 60, fire + 60) == fire
    assert last_fire(s, fire, fire + 60) is None  # (after, upto]: seen once
    assert last_fire(s, fire - 60, fire + 60, end=fire - 1) is None


def test_rate_from_start_time_or_from_creation() -> None:
    s = parse("rate(5 minutes)")
    start = ts("2024-01-01T00:00:00")
    assert last_fire(s, start - 1, start + 1, start=start) == start  # StartTime itself fires
    assert last_fire(s, start + 1, start + 299, start=start) is None
    assert last_fire(s, start + 1, start + 310, start=start) == start + 300
    assert last_fire(s, start, start + 299, created=start) is None  # without StartTime the first is a rate later
    assert last_fire(s, start, start + 300, created=start) == start + 300
    assert parse("rate(1 day)").every_s == 86400


def test_cron_fields_names_question_mark_last_day_and_year() -> None:
    weekdays = parse("cron(0 9 ? * MON-FRI *)")
    friday, saturday = ts("2024-03-01T09:00:00"), ts("2024-03-02T09:00:00")
    assert last_fire(weekdays, friday - 60, friday) == friday
    assert last_fire(weekdays, saturday - 3600, saturday + 3600) is None
    numeric = parse("cron(0 9 ? * 2-6 *)")  # 1 = Sunday, so 2-6 = MON-FRI
    assert last_fire(numeric, friday - 60, friday) == friday
    steps_ = parse("cron(*/15 * * * ? 2024)")
    t = ts("2024-05-05T10:44:00")
    assert last_fire(steps_, t - 3600, t) == ts("2024-05-05T10:30:00")
    assert last_fire(parse("cron(0 0 * * ? 2023)"), t - 86400, t) is None  # another year
    last = parse("cron(30 23 L FEB ? *)")
    assert last_fire(last, ts("2024-02-01T00:00:00"), ts("2024-03-01T00:00:00")) == ts("2024-02-29T23:30:00")
    paris = parse("cron(0 8 * * ? *)", "Europe/Paris")  # 08:00 in Paris is 07:00 UTC in winter
    assert last_fire(paris, ts("2024-01-10T06:00:00"), ts("2024-01-10T08:00:00")) == ts("2024-01-10T07:00:00")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("cron(0 9 * * MON *)", "exactly one"),
        ("cron(0 9 ? * MON#2 *)", "does not support"),
        ("cron(61 9 * * ? *)", "out of range"),
        ("cron(0 9 * FOO ? *)", "not a valid value"),
        ("at(2024-13-01T00:00:00)", "not a valid date"),
        ("rate(5 weeks)", "is not valid"),
    ],
)
def test_invalid_schedules(expression: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        parse(expression)
    with pytest.raises(ScheduleError, match="time zone"):
        parse("rate(1 hour)", "Mars/Olympus")
