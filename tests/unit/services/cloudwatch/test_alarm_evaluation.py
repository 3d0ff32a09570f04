"""Alarm evaluation as a pure function: operators, M of N, TreatMissingData and the documented examples."""

from __future__ import annotations

from typing import Any

import pytest

from servekit.services.cloudwatch.evaluation import (
    AlarmConfigError,
    AlarmDefinition,
    AlarmState,
    evaluate,
)

P = 60
NOW = 1_000 * P + 5  # five seconds into a period: the last complete one ends at 1000 * P
END = 1_000 * P
OK, ALARM, INSUFFICIENT = AlarmState.OK, AlarmState.ALARM, AlarmState.INSUFFICIENT_DATA


def alarm(**kw: Any) -> AlarmDefinition:
    params: dict[str, Any] = {
        "AlarmName": "a",
        "Namespace": "AWS/SageMaker",
        "MetricName": "ModelLatency",
        "Dimensions": [{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "A"}],
        "Period": P,
        "Statistic": "Average",
        "EvaluationPeriods": 3,
        "Threshold": 100.0,
        "ComparisonOperator": "GreaterThanThreshold",
    }
    params.update(kw)
    return AlarmDefinition.from_params(params)


def series(text: str, breach: float = 200.0, ok: float = 50.0) -> list[tuple[float, float]]:
    """``"0 - X - -"``: the evaluation range oldest first (0 not breaching, X breaching, - missing)."""
    marks = text.split()
    start = END - len(marks) * P
    return [(start + i * P, breach if m == "X" else ok) for i, m in enumerate(marks) if m != "-"]


def test_window_is_n_plus_two_complete_periods() -> None:
    a = alarm()
    assert a.window(NOW) == (END - 5 * P, END)
    assert a.window(END) == (END - 5 * P, END)  # a period that has just begun is not complete


@pytest.mark.parametrize(
    ("operator", "value", "breaches"),
    [
        ("GreaterThanOrEqualToThreshold", 100.0, True),
        ("GreaterThanOrEqualToThreshold", 99.9, False),
        ("GreaterThanThreshold", 100.0, False),
        ("GreaterThanThreshold", 100.1, True),
        ("LessThanThreshold", 100.0, False),
        ("LessThanThreshold", 99.9, True),
        ("LessThanOrEqualToThreshold", 100.0, True),
        ("LessThanOrEqualToThreshold", 100.1, False),
    ],
)
def test_every_operator(operator: str, value: float, breaches: bool) -> None:
    a = alarm(ComparisonOperator=operator, EvaluationPeriods=1)
    result = evaluate(a, [(END - P, value)], INSUFFICIENT, NOW)
    assert result.state == (ALARM if breaches else OK)


def test_anomaly_band_operators_are_refused_clearly() -> None:
    with pytest.raises(AlarmConfigError, match="anomaly detection") as info:
        alarm(ComparisonOperator="LessThanLowerOrGreaterThanUpperThreshold")
    assert info.value.code == "InvalidParameterValueException"


@pytest.mark.parametrize(
    ("kw", "code"),
    [
        ({"DatapointsToAlarm": 4}, "InvalidParameterValueException"),
        ({"Period": 45}, "InvalidParameterValueException"),
        ({"ExtendedStatistic": "p99"}, "InvalidParameterCombinationException"),
        ({"Statistic": "Median"}, "InvalidParameterValueException"),
        ({"TreatMissingData": "sometimes"}, "InvalidParameterValueException"),
        ({"Threshold": None}, "MissingRequiredParameterException"),
        ({"AlarmActions": ["mailto:x@example.com"]}, "InvalidParameterValueException"),
        ({"AlarmActions": [f"http://127.0.0.1/{i}" for i in range(6)]}, "InvalidParameterValueException"),
        ({"Period": 60, "EvaluationPeriods": 1441}, "InvalidParameterValueException"),
    ],
)
def test_bad_definitions(kw: dict[str, Any], code: str) -> None:
    with pytest.raises(AlarmConfigError) as info:
        alarm(**kw)
    assert info.value.code == code


def test_extended_statistic_p99_queries_p99() -> None:
    params: dict[str, Any] = {"ExtendedStatistic": "p99", "Statistic": None}
    a = alarm(**params)
    assert a.extended and a.statistic == "p99"
    q = a.query()
    assert q.statistic == "p99" and q.period_s == P
    assert q.dimensions == (("EndpointName", "ep"), ("VariantName", "A"))
    assert evaluate(a, series("- - X X X"), OK, NOW).reason_data["extendedStatistic"] == "p99"


def test_threshold_crossed_reason_in_cloudwatchs_words() -> None:
    result = evaluate(alarm(), series("0 0 X X X"), OK, NOW)
    assert result.state is ALARM
    assert result.reason.startswith("Threshold Crossed: 3 out of the last 3 datapoints [200.0 (")
    assert result.reason.endswith(
        "were greater than the threshold (100.0) (minimum 3 datapoints for OK -> ALARM transition)."
    )
    assert "[200.0 (01/01/70 16:39:00), 200.0 (01/01/70 16:38:00)" in result.reason
    data = result.reason_data
    assert data["version"] == "1.0" and data["statistic"] == "Average" and data["period"] == P
    assert data["recentDatapoints"] == [200.0, 200.0, 200.0] and data["threshold"] == 100.0
    back = evaluate(alarm(), series("X X 0 0 0"), ALARM, NOW)
    assert back.state is OK
    assert "3 out of the last 3 datapoints [50.0" in back.reason
    assert back.reason.endswith(
        "were not greater than the threshold (100.0) (minimum 1 datapoint for ALARM -> OK transition)."
    )


def test_one_datapoint_wording() -> None:
    result = evaluate(alarm(EvaluationPeriods=1), series("- - X"), OK, NOW)
    assert result.reason.startswith("Threshold Crossed: 1 datapoint [200.0 (")
    assert " was greater than the threshold (100.0)" in result.reason


@pytest.mark.parametrize(
    ("text", "m", "expected"),
    [
        ("X X X X X", 3, ALARM),
        ("X X 0 X X", 3, OK),  # the newest 3 real: 0 X X
        ("X X X 0 X", 2, ALARM),  # M of N, not necessarily consecutive
        ("0 0 X 0 X", 2, ALARM),
        ("0 0 0 0 X", 2, OK),
        ("X - X - X", 3, ALARM),  # three real points among five: TreatMissingData plays no part
    ],
)
def test_m_of_n_with_enough_real_points(text: str, m: int, expected: AlarmState) -> None:
    for treat in ("missing", "ignore", "breaching", "notBreaching"):
        a = alarm(DatapointsToAlarm=m, TreatMissingData=treat)
        assert evaluate(a, series(text), INSUFFICIENT, NOW).state is expected, treat


# The documented examples (N = M = 3 unless given; oldest first): each row's states for
# missing / ignore / breaching / notBreaching; None = the state stays.
DOC_EXAMPLES = [
    ("0 - - - -", 3, (OK, OK, OK, OK)),
    ("- - - - 0", 3, (OK, OK, OK, OK)),
    ("- - - - -", 3, (INSUFFICIENT, None, ALARM, OK)),
    ("0 X X - X", 3, (ALARM, ALARM, ALARM, ALARM)),
    ("- - X - -", 3, (ALARM, None, ALARM, OK)),
    ("0 - X - -", 2, (OK, None, ALARM, OK)),
]


@pytest.mark.parametrize(("text", "m", "states"), DOC_EXAMPLES)
@pytest.mark.parametrize("current", [OK, ALARM, INSUFFICIENT])
def test_treat_missing_data_documented_examples(
    text: str, m: int, states: tuple[AlarmState | None, ...], current: AlarmState
) -> None:
    for treat, expected in zip(("missing", "ignore", "breaching", "notBreaching"), states, strict=True):
        a = alarm(DatapointsToAlarm=m, TreatMissingData=treat)
        result = evaluate(a, series(text), current, NOW)
        assert result.state is (current if expected is None else expected), (treat, current)


def test_missing_is_the_default() -> None:
    assert alarm().treat_missing_data == "missing"
    result = evaluate(alarm(), [], OK, NOW)
    assert result.state is INSUFFICIENT
    assert result.reason == "Insufficient Data: 3 datapoints were unknown."


def test_all_missing_breaching_and_not_breaching_reasons() -> None:
    result = evaluate(alarm(TreatMissingData="breaching"), [], OK, NOW)
    assert result.state is ALARM and "treated as [breaching]" in result.reason
    result = evaluate(alarm(TreatMissingData="notBreaching"), [], ALARM, NOW)
    assert result.state is OK and "treated as [not breaching]" in result.reason


def test_premature_alarm_guard() -> None:
    a = alarm()  # missing, N = M = 3
    assert evaluate(a, series("- - - - X"), OK, NOW).state is OK  # too recent to alarm on
    assert evaluate(a, series("- - - X -"), OK, NOW).state is OK
    assert evaluate(a, series("- - X - -"), OK, NOW).state is ALARM  # three periods old now
    assert evaluate(a, series("- - X - X"), OK, NOW).state is ALARM
    assert evaluate(a, series("- - X 0 -"), ALARM, NOW).state is OK


def test_partial_breaching_fills_as_few_as_possible() -> None:
    a = alarm(TreatMissingData="breaching")
    result = evaluate(a, series("0 - - - -"), OK, NOW)
    assert result.state is OK  # 0 plus two filled breaches: 2 of 3
    result = evaluate(a, series("X - - - -"), OK, NOW)
    assert result.state is ALARM and "(2 missing treated as breaching)" in result.reason


def test_points_outside_the_range_are_ignored() -> None:
    a = alarm(EvaluationPeriods=1)
    old = (END - 6 * P, 500.0)  # before the range
    partial = (END, 500.0)  # the period still in progress
    assert evaluate(a, [old, partial], OK, NOW).state is INSUFFICIENT


def test_same_state_gives_a_reason_without_transition() -> None:
    result = evaluate(alarm(), series("X X X X X"), ALARM, NOW)
    assert result.state is ALARM and "transition" not in result.reason


def test_actions_for_each_state() -> None:
    a = alarm(AlarmActions=["http://h/a"], OKActions=["http://h/o"], InsufficientDataActions=["arn:aws:sns:x"])
    assert a.actions_for(ALARM) == ("http://h/a",)
    assert a.actions_for(OK) == ("http://h/o",)
    assert a.actions_for(INSUFFICIENT) == ("arn:aws:sns:x",)
    assert alarm(AlarmActions=["http://h/a"], ActionsEnabled=False).actions_for(ALARM) == ()
