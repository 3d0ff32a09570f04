"""SageMaker Model Monitor's schedule expressions and analysis windows: pure functions of epoch seconds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from servekit.errors import IllegalTransition
from servekit.services.monitoring.schedules.cron import (
    DAILY,
    Offsets,
    ScheduleExpressionError,
    analysis_window,
    due,
    next_fire,
    parse_expression,
    parse_offset,
    parse_offsets,
)
from servekit.services.monitoring.schedules.lifecycle import (
    ExecutionStatus,
    ScheduleStatus,
    check_execution_transition,
    check_schedule_transition,
)

H = 3600


def t(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("expression", "hours"),
    [
        ("cron(0 * ? * * *)", tuple(range(24))),
        ("cron(0 12 ? * * *)", (12,)),
        ("cron(0 00 ? * * *)", (0,)),
        ("cron(0 0/6 ? * * *)", (0, 6, 12, 18)),
        ("cron(0 0/2 ? * * *)", tuple(range(0, 24, 2))),
        ("cron(0 17/12 ? * * *)", (17,)),  # a cron step does not wrap past midnight
        ("cron(0 3/24 ? * * *)", (3,)),
        (" cron(0 * ? * * *) ", tuple(range(24))),
    ],
)
def test_the_expressions_sagemaker_accepts(expression: str, hours: tuple[int, ...]) -> None:
    cron = parse_expression(expression)
    assert cron.hours == hours and not cron.once


def test_now_and_no_expression() -> None:
    assert parse_expression("NOW").once
    assert parse_expression(None) == DAILY and DAILY.hours == (0,)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("cron(5 * ? * * *)", "Invalid ScheduleExpression"),  # minutes must be 0
        ("cron(0 * * * ? *)", "Invalid ScheduleExpression"),  # day-of-month must be ?
        ("cron(0 * ? * MON *)", "Invalid ScheduleExpression"),
        ("cron(0 * ? * *)", "Invalid ScheduleExpression"),  # five fields
        ("cron(0 24 ? * * *)", "the hour must be * or 0-23"),
        ("cron(0 */2 ? * * *)", "the hour must be * or 0-23"),
        ("cron(0 1-5 ? * * *)", "the hour must be * or 0-23"),
        ("cron(0 1/0 ? * * *)", "the step of the hours must be 1-24"),
        ("cron(0 1/25 ? * * *)", "the step of the hours must be 1-24"),
        ("rate(1 hour)", "Invalid ScheduleExpression"),
        ("now", "Invalid ScheduleExpression"),
        ("", "Invalid ScheduleExpression"),
    ],
)
def test_other_expressions_are_refused_with_what_is_accepted(expression: str, words: str) -> None:
    with pytest.raises(ScheduleExpressionError) as err:
        parse_expression(expression)
    assert words in str(err.value)
    assert "cron(0 * ? * * *) (hourly)" in str(err.value)


def test_hourly_fires_on_the_hour_after_creation() -> None:
    hourly = parse_expression("cron(0 * ? * * *)")
    created = t("2026-11-30T10:30:00")
    assert due(hourly, H, created, None, t("2026-11-30T10:59:59")) is None
    assert due(hourly, H, created, None, t("2026-11-30T11:00:00")) == t("2026-11-30T11:00:00")
    assert due(hourly, H, created, t("2026-11-30T11:00:00"), t("2026-11-30T11:30:00")) is None  # handled
    # five hours without a look: only the newest fire runs
    assert due(hourly, H, created, t("2026-11-30T11:00:00"), t("2026-11-30T16:10:00")) == t("2026-11-30T16:00:00")
    # a schedule created exactly on a fire waits for the next one
    assert due(hourly, H, t("2026-11-30T10:00:00"), None, t("2026-11-30T10:00:00")) is None


def test_daily_and_stepped_hours_across_midnight() -> None:
    noon = parse_expression("cron(0 12 ? * * *)")
    assert next_fire(noon, H, t("2026-11-30T12:00:00")) == t("2026-12-01T12:00:00")
    assert due(noon, H, t("2026-11-30T13:00:00"), None, t("2026-12-01T11:59:00")) is None
    assert due(noon, H, t("2026-11-30T13:00:00"), None, t("2026-12-01T12:00:01")) == t("2026-12-01T12:00:00")
    six = parse_expression("cron(0 0/6 ? * * *)")
    assert next_fire(six, H, t("2026-11-30T19:00:00")) == t("2026-12-01T00:00:00")
    assert next_fire(six, H, t("2026-11-30T05:59:59")) == t("2026-11-30T06:00:00")
    assert due(six, H, t("2026-11-30T17:00:00"), None, t("2026-12-01T03:00:00")) == t("2026-12-01T00:00:00")
    assert due(six, H, t("2026-11-30T17:00:00"), None, t("2026-11-30T23:59:00")) == t("2026-11-30T18:00:00")
    # before the day's first fire, the newest one is the day before's
    assert due(noon, H, t("2026-11-30T01:00:00"), None, t("2026-12-01T05:00:00")) == t("2026-11-30T12:00:00")


def test_now_fires_once_at_creation() -> None:
    once = parse_expression("NOW")
    assert due(once, H, 100.0, None, 100.0) == 100.0
    assert due(once, H, 100.0, 100.0, 5000.0) is None
    assert next_fire(once, H, 100.0) is None


def test_compressed_hours() -> None:
    """With hour_s=2 an hourly schedule fires every 2 s and a daily one every 48 s, epoch-aligned."""
    hourly = parse_expression("cron(0 * ? * * *)")
    assert next_fire(hourly, 2, 1_000_001.0) == 1_000_002.0
    assert due(hourly, 2, 1_000_000.5, None, 1_000_003.9) == 1_000_002.0
    daily = parse_expression("cron(0 1 ? * * *)")  # the second "hour" of each 48 s "day"
    day = 48 * (1_000_000 // 48)
    assert next_fire(daily, 2, day + 0.0) == day + 2
    assert next_fire(daily, 2, day + 2.0) == day + 48 + 2


def test_offsets() -> None:
    assert parse_offset("-PT1H", "x") == -3600
    assert parse_offset("-P1D", "x") == -86400
    assert parse_offset("-PT30M", "x") == -1800
    assert parse_offset("-P1DT2H3M4S", "x") == -(86400 + 7200 + 184)
    assert parse_offset("-PT0H", "x") == 0 and parse_offset("PT0H", "x") == 0
    for bad, words in (("PT1H", "lies after the scheduled time"), ("-1H", "ISO 8601"), ("-P", "ISO 8601")):
        with pytest.raises(ScheduleExpressionError) as err:
            parse_offset(bad, "DataAnalysisStartTime")
        assert words in str(err.value) and "DataAnalysisStartTime" in str(err.value)


def test_offsets_are_checked_together() -> None:
    hourly = parse_expression("cron(0 * ? * * *)")
    assert parse_offsets("-PT2H", "-PT1H", hourly) == Offsets(-7200, -3600)
    assert parse_offsets(None, None, hourly) == Offsets(None, 0.0)
    with pytest.raises(ScheduleExpressionError, match="must be before"):
        parse_offsets("-PT1H", "-PT2H", hourly)
    with pytest.raises(ScheduleExpressionError, match="more than 24 hours"):
        parse_offsets("-P2D", "-PT0H", hourly)
    with pytest.raises(ScheduleExpressionError, match=r"needs ScheduleConfig\.DataAnalysisStartTime"):
        parse_offsets(None, "-PT0H", parse_expression("NOW"), "ScheduleConfig")


def test_analysis_windows_tile_the_timeline_by_default() -> None:
    fire = t("2026-11-30T12:00:00")
    hourly, noon = parse_expression("cron(0 * ? * * *)"), parse_expression("cron(0 12 ? * * *)")
    six = parse_expression("cron(0 0/6 ? * * *)")
    default = Offsets(None, 0.0)
    assert analysis_window(hourly, H, fire, default) == (fire - H, fire)
    assert analysis_window(noon, H, fire, default) == (fire - 24 * H, fire)
    assert analysis_window(six, H, fire, default) == (fire - 6 * H, fire)
    assert analysis_window(hourly, H, fire, Offsets(-7200, -3600)) == (fire - 2 * H, fire - H)
    assert analysis_window(hourly, H, fire, Offsets(None, -3600)) == (fire - 2 * H, fire - H)  # shifted tile
    # compressed: a 24-"hour" window of 2-second hours is 48 s
    assert analysis_window(hourly, 2, 1000.0, Offsets(-86400, 0.0)) == (952.0, 1000.0)


def test_lifecycles() -> None:
    S, X = ScheduleStatus, ExecutionStatus
    assert check_schedule_transition(None, S.PENDING) is S.PENDING
    assert check_schedule_transition(S.SCHEDULED, S.STOPPED) is S.STOPPED
    assert check_schedule_transition(S.STOPPED, S.SCHEDULED) is S.SCHEDULED
    for old, new in ((S.STOPPED, S.FAILED), (S.FAILED, S.SCHEDULED), (None, S.SCHEDULED)):
        with pytest.raises(IllegalTransition):
            check_schedule_transition(old, new)
    assert check_execution_transition(X.IN_PROGRESS, X.COMPLETED_WITH_VIOLATIONS)
    with pytest.raises(IllegalTransition):
        check_execution_transition(X.COMPLETED, X.FAILED)
    assert X.COMPLETED.final and not X.PENDING.final and not X.STOPPING.final
    assert X.COMPLETED_WITH_VIOLATIONS.processing_status == "Completed" and X.PENDING.processing_status == "InProgress"
