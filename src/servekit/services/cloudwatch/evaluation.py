"""CloudWatch metric alarms: the definition, its states, and evaluation as a pure function.

:func:`evaluate` takes an alarm, the datapoints a :class:`~servekit.services.cloudwatch.source.MetricSource` returned
for its evaluation range, the alarm's current state and the time, and answers the state the alarm should be in
with a reason in CloudWatch's words. Nothing here reads a clock or stores anything.

CloudWatch's rules (``shared/reference/anchors-hosting.md`` §3):

- The range is the last ``N + 2`` complete periods (``N`` = EvaluationPeriods; 5 for N=3).
- With at least N real datapoints in it, the newest N are evaluated: ALARM when at least M
  (DatapointsToAlarm) breach, else OK. TreatMissingData plays no part.
- With none: ``missing`` → INSUFFICIENT_DATA, ``ignore`` → the state stays, ``breaching`` → ALARM,
  ``notBreaching`` → OK.
- With some but fewer than N: ``breaching``/``notBreaching`` fill just enough missing points to make N;
  ``missing`` evaluates the real points alone (M capped at their number); ``ignore`` changes state only when
  the real points prove it (M breaching → ALARM; more than N - M not breaching → OK) and stays otherwise.
- Premature-alarm guard (``missing``): real points that are all breaching but fewer than M only alarm once the
  oldest of them is at least M periods old; until then the state stays.
"""

from __future__ import annotations

import enum
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servekit.services.cloudwatch.source import MetricQuery

STATISTICS = ("SampleCount", "Average", "Sum", "Minimum", "Maximum")
ANOMALY_OPERATORS = (
    "LessThanLowerOrGreaterThanUpperThreshold",
    "LessThanLowerThreshold",
    "GreaterThanUpperThreshold",
)
TREAT_MISSING = ("missing", "ignore", "breaching", "notBreaching")
MAX_ACTIONS = 5
_PERCENTILE = re.compile(r"p(\d{1,2}(\.\d{1,10})?|100(\.0{1,10})?)")


class AlarmState(enum.StrEnum):
    OK = "OK"
    ALARM = "ALARM"
    INSUFFICIENT_DATA = "INSUFFICIENT_DATA"


class Comparison(enum.StrEnum):
    """The metric is on the left: ``value <op> threshold``."""

    GE = "GreaterThanOrEqualToThreshold"
    GT = "GreaterThanThreshold"
    LT = "LessThanThreshold"
    LE = "LessThanOrEqualToThreshold"

    def breaches(self, value: float, threshold: float) -> bool:
        if self is Comparison.GE:
            return value >= threshold
        if self is Comparison.GT:
            return value > threshold
        if self is Comparison.LT:
            return value < threshold
        return value <= threshold

    @property
    def words(self) -> str:
        return {
            Comparison.GE: "greater than or equal to",
            Comparison.GT: "greater than",
            Comparison.LT: "less than",
            Comparison.LE: "less than or equal to",
        }[self]


class AlarmConfigError(ValueError):
    """A PutMetricAlarm input CloudWatch would refuse; ``code`` is its error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class AlarmDefinition:
    name: str
    namespace: str
    metric_name: str
    dimensions: tuple[tuple[str, str], ...]  # as given (CloudWatch keeps the order); the query sorts
    period_s: int
    statistic: str  # "Average" … or an extended one such as "p99"
    extended: bool
    evaluation_periods: int
    datapoints_to_alarm: int
    threshold: float
    comparison: Comparison
    treat_missing_data: str
    actions_enabled: bool = True
    ok_actions: tuple[str, ...] = ()
    alarm_actions: tuple[str, ...] = ()
    insufficient_data_actions: tuple[str, ...] = ()

    @property
    def range_periods(self) -> int:
        return self.evaluation_periods + 2

    def query(self) -> MetricQuery:
        return MetricQuery(
            self.namespace, self.metric_name, tuple(sorted(self.dimensions)), self.period_s, self.statistic
        )

    def window(self, now: float) -> tuple[float, float]:
        """``[start, end)`` of the evaluation range at ``now``: the last ``N + 2`` complete periods."""
        end = math.floor(now / self.period_s) * self.period_s
        return end - self.range_periods * self.period_s, end

    def actions_for(self, state: AlarmState) -> tuple[str, ...]:
        if not self.actions_enabled:
            return ()
        if state is AlarmState.ALARM:
            return self.alarm_actions
        if state is AlarmState.OK:
            return self.ok_actions
        return self.insufficient_data_actions

    @classmethod
    def from_params(cls, p: Mapping[str, Any], resolution_s: int = 60) -> AlarmDefinition:
        """Validate a PutMetricAlarm input as CloudWatch does (metric alarms on one metric). A metrics store finer
        than a minute (``resolution_s``) also allows any multiple of its resolution as the Period: how tests and
        demos compress time (an alarm of Period 2 on two-second datapoints)."""
        name = p.get("AlarmName")
        if not name:
            raise AlarmConfigError("MissingRequiredParameterException", "The parameter AlarmName is required.")
        if p.get("Metrics") or p.get("ThresholdMetricId") or p.get("EvaluationCriteria"):
            raise AlarmConfigError(
                "InvalidParameterValueException",
                "servekit supports alarms on one metric (MetricName/Namespace), not metric math or anomaly "
                "detection (Metrics, ThresholdMetricId, EvaluationCriteria).",
            )
        for required in ("MetricName", "Namespace", "Period", "EvaluationPeriods", "ComparisonOperator"):
            if p.get(required) is None:
                raise AlarmConfigError("MissingRequiredParameterException", f"The parameter {required} is required.")
        operator = p["ComparisonOperator"]
        if operator in ANOMALY_OPERATORS:
            raise AlarmConfigError(
                "InvalidParameterValueException",
                f"ComparisonOperator {operator} is for anomaly detection bands (ThresholdMetricId), which servekit "
                "does not support; use GreaterThanOrEqualToThreshold, GreaterThanThreshold, LessThanThreshold or "
                "LessThanOrEqualToThreshold with a Threshold.",
            )
        try:
            comparison = Comparison(operator)
        except ValueError:
            raise AlarmConfigError(
                "InvalidParameterValueException", f"Invalid value {operator!r} for ComparisonOperator."
            ) from None
        if p.get("Threshold") is None:
            raise AlarmConfigError(
                "MissingRequiredParameterException", "The parameter Threshold is required for a static threshold."
            )
        statistic, extended = p.get("Statistic"), p.get("ExtendedStatistic")
        if (statistic is None) == (extended is None):
            raise AlarmConfigError(
                "InvalidParameterCombinationException", "Exactly one of Statistic and ExtendedStatistic must be set."
            )
        if statistic is not None and statistic not in STATISTICS:
            raise AlarmConfigError(
                "InvalidParameterValueException",
                f"Invalid value {statistic!r} for Statistic; one of {', '.join(STATISTICS)}.",
            )
        if extended is not None and _PERCENTILE.fullmatch(extended) is None:
            raise AlarmConfigError(
                "InvalidParameterValueException",
                f"ExtendedStatistic {extended!r} is not supported: servekit evaluates percentiles p0.0 to p100.",
            )
        period = int(p["Period"])
        fine = 0 < resolution_s < 60 and period > 0 and period % resolution_s == 0
        if not (fine or period in (10, 20, 30) or (period >= 60 and period % 60 == 0)):
            also = f" (or of {resolution_s}, the metrics resolution)" if 0 < resolution_s < 60 else ""
            raise AlarmConfigError(
                "InvalidParameterValueException",
                f"The parameter Period must be 10, 20, 30, or a multiple of 60{also}.",
            )
        n = int(p["EvaluationPeriods"])
        if n < 1:
            raise AlarmConfigError("InvalidParameterValueException", "EvaluationPeriods must be at least 1.")
        limit = 604_800 if period >= 3600 else 86_400
        if period * n > limit:
            raise AlarmConfigError(
                "InvalidParameterValueException",
                f"The evaluation period (Period x EvaluationPeriods) cannot be longer than {limit} seconds.",
            )
        m = int(p.get("DatapointsToAlarm") or n)
        if not 1 <= m <= n:
            raise AlarmConfigError(
                "InvalidParameterValueException",
                "DatapointsToAlarm must be at least 1 and no more than EvaluationPeriods.",
            )
        treat = p.get("TreatMissingData") or "missing"
        if treat not in TREAT_MISSING:
            raise AlarmConfigError(
                "InvalidParameterValueException",
                f"Invalid value {treat!r} for TreatMissingData; one of {', '.join(TREAT_MISSING)}.",
            )
        low = p.get("EvaluateLowSampleCountPercentile")
        if low not in (None, "", "ignore", "evaluate"):
            raise AlarmConfigError(
                "InvalidParameterValueException",
                f"Invalid value {low!r} for EvaluateLowSampleCountPercentile; one of ignore, evaluate.",
            )
        actions: dict[str, tuple[str, ...]] = {}
        for key in ("OKActions", "AlarmActions", "InsufficientDataActions"):
            values = tuple(p.get(key) or ())
            if len(values) > MAX_ACTIONS:
                raise AlarmConfigError(
                    "InvalidParameterValueException", f"{key} can have at most {MAX_ACTIONS} actions."
                )
            for action in values:
                if not (action.startswith(("http://", "https://", "arn:"))):
                    raise AlarmConfigError(
                        "InvalidParameterValueException",
                        f"Invalid action {action!r} in {key}: an ARN (arn:aws:sns:…) or an http(s) URL "
                        "(servekit POSTs the notification there).",
                    )
            actions[key] = values
        dims = tuple((d["Name"], d["Value"]) for d in p.get("Dimensions") or ())
        if len({k for k, _ in dims}) != len(dims):
            raise AlarmConfigError("InvalidParameterValueException", "The Dimensions names must be unique.")
        return cls(
            name=name,
            namespace=p["Namespace"],
            metric_name=p["MetricName"],
            dimensions=dims,
            period_s=period,
            statistic=str(statistic if statistic is not None else extended),
            extended=extended is not None,
            evaluation_periods=n,
            datapoints_to_alarm=m,
            threshold=float(p["Threshold"]),
            comparison=comparison,
            treat_missing_data=treat,
            actions_enabled=bool(p.get("ActionsEnabled", True)),
            ok_actions=actions["OKActions"],
            alarm_actions=actions["AlarmActions"],
            insufficient_data_actions=actions["InsufficientDataActions"],
        )


@dataclass(frozen=True, slots=True)
class Evaluation:
    state: AlarmState
    reason: str
    reason_data: dict[str, Any]


def evaluate(
    alarm: AlarmDefinition,
    datapoints: Sequence[tuple[float, float]],
    current: AlarmState,
    now: float,
) -> Evaluation:
    """The state ``alarm`` should be in at ``now`` given ``datapoints`` (``(period start, value)``, any order;
    points outside the evaluation range are ignored). ``state == current`` means no change."""
    start, end = alarm.window(now)
    p = alarm.period_s
    by_slot: dict[int, float] = {}
    for ts, value in datapoints:
        if start <= ts < end:
            by_slot[int((ts - start) // p)] = value
    slots: list[tuple[float, float | None]] = [
        (start + i * p, by_slot.get(i)) for i in range(alarm.range_periods)
    ]  # oldest first
    real = [(ts, v) for ts, v in slots if v is not None]
    n, m = alarm.evaluation_periods, alarm.datapoints_to_alarm
    data = _reason_data(alarm, now, start, real)

    def breach(v: float) -> bool:
        return alarm.comparison.breaches(v, alarm.threshold)

    if len(real) >= n:
        newest = real[-n:]
        breaching = sum(breach(v) for _, v in newest)
        state = AlarmState.ALARM if breaching >= m else AlarmState.OK
        return Evaluation(state, _threshold_reason(alarm, newest, n, current, state), data)

    treat = alarm.treat_missing_data
    if not real:
        if treat == "missing":
            k = n
            word = "datapoint was" if k == 1 else "datapoints were"
            return Evaluation(AlarmState.INSUFFICIENT_DATA, f"Insufficient Data: {k} {word} unknown.", data)
        if treat == "ignore":
            return Evaluation(current, "", data)
        state = AlarmState.ALARM if treat == "breaching" else AlarmState.OK
        return Evaluation(state, _missing_reason(alarm, n, state, current), data)

    breaching = sum(breach(v) for _, v in real)
    ok_count = len(real) - breaching
    if treat in ("breaching", "notBreaching"):
        fill = n - len(real)  # as few filled points as possible: every real one counts
        total = breaching + (fill if treat == "breaching" else 0)
        state = AlarmState.ALARM if total >= m else AlarmState.OK
        return Evaluation(state, _threshold_reason(alarm, real, n, current, state, filled=fill), data)
    if treat == "ignore":
        if breaching >= m:
            state = AlarmState.ALARM
        elif ok_count > n - m:
            state = AlarmState.OK
        else:
            return Evaluation(current, "", data)
        return Evaluation(state, _threshold_reason(alarm, real, len(real), current, state), data)
    # missing: the real points alone
    if breaching >= m:
        state = AlarmState.ALARM
    elif breaching == len(real):  # all breach, fewer than M of them: the premature-alarm guard
        oldest_age = (end - real[0][0]) / p
        if oldest_age < m:
            return Evaluation(current, "", data)
        state = AlarmState.ALARM
    else:
        state = AlarmState.OK
    return Evaluation(state, _threshold_reason(alarm, real, len(real), current, state), data)


def cw_time(t: float) -> str:
    """``dd/mm/yy HH:MM:SS`` (UTC), as datapoints appear in a StateReason."""
    return time.strftime("%d/%m/%y %H:%M:%S", time.gmtime(t))


def iso_time(t: float) -> str:
    """``2024-03-12T10:15:00.000+0000``, CloudWatch's timestamps in StateReasonData and notifications."""
    ms = round((t - math.floor(t)) * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(math.floor(t))) + f".{ms:03d}+0000"


def _threshold_reason(
    alarm: AlarmDefinition,
    points: Sequence[tuple[float, float]],
    of: int,
    current: AlarmState,
    state: AlarmState,
    filled: int = 0,
) -> str:
    """ "Threshold Crossed: 3 out of the last 3 datapoints [5.0 (12/03/24 10:15:00), …] were greater than the
    threshold (100.0) (minimum 3 datapoints for OK -> ALARM transition)." Datapoints newest first."""
    to_alarm = state is AlarmState.ALARM
    matching = [(ts, v) for ts, v in reversed(points) if alarm.comparison.breaches(v, alarm.threshold) == to_alarm]
    count = len(matching)
    if filled and alarm.treat_missing_data == ("breaching" if to_alarm else "notBreaching"):
        count += filled
    listed = ", ".join(f"{v!r} ({cw_time(ts)})" for ts, v in matching)
    negation = "" if to_alarm else "not "
    if of == 1:
        head = f"Threshold Crossed: 1 datapoint [{listed}] was {negation}"
    else:
        verb = "was" if count == 1 else "were"
        head = f"Threshold Crossed: {count} out of the last {of} datapoints [{listed}] {verb} {negation}"
    text = f"{head}{alarm.comparison.words} the threshold ({alarm.threshold!r})"
    if filled:
        text += f" ({filled} missing treated as {alarm.treat_missing_data})"
    if state is not current:
        minimum = alarm.datapoints_to_alarm if to_alarm else alarm.evaluation_periods - alarm.datapoints_to_alarm + 1
        noun = "datapoint" if minimum == 1 else "datapoints"
        text += f" (minimum {minimum} {noun} for {current} -> {state} transition)"
    return text + "."


def _missing_reason(alarm: AlarmDefinition, n: int, state: AlarmState, current: AlarmState) -> str:
    word = "datapoint was" if n == 1 else "datapoints were"
    how = "breaching" if state is AlarmState.ALARM else "not breaching"
    text = f"Threshold Crossed: no datapoints were received for {n} periods and {n} missing {word} treated as [{how}]"
    if state is not current:
        text += f" ({current} -> {state} transition)"
    return text + "."


def _reason_data(
    alarm: AlarmDefinition, now: float, start: float, real: Sequence[tuple[float, float]]
) -> dict[str, Any]:
    newest = list(reversed(real))[: alarm.evaluation_periods]
    data: dict[str, Any] = {
        "version": "1.0",
        "queryDate": iso_time(now),
        "startDate": iso_time(start),
        ("extendedStatistic" if alarm.extended else "statistic"): alarm.statistic,
        "period": alarm.period_s,
        "recentDatapoints": [v for _, v in reversed(newest)],
        "threshold": alarm.threshold,
        "evaluatedDatapoints": [{"timestamp": iso_time(ts), "value": v} for ts, v in newest],
    }
    return data
