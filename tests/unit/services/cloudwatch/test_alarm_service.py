"""The alarm service on a fake MetricSource and a manual clock: evaluation cadence, state history, SetAlarmState
held until the next evaluation, actions, and the repository's paging."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from servekit.aws import ApiError
from servekit.services.cloudwatch.alarm_store import Alarms
from servekit.services.cloudwatch.alarms import AlarmService, WebhookNotifier
from servekit.services.cloudwatch.source import MetricQuery
from servekit.services.database import StateDB

P = 60
T0 = 1_000 * P


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeSource:
    def __init__(self) -> None:
        self.points: dict[tuple[str, str], list[tuple[float, float]]] = {}
        self.queries: list[tuple[MetricQuery, float, float]] = []

    def add(self, metric: str, statistic: str, ts: float, value: float) -> None:
        self.points.setdefault((metric, statistic), []).append((ts, value))

    def datapoints(self, query: MetricQuery, start: float, end: float) -> list[tuple[float, float]]:
        self.queries.append((query, start, end))
        pts = self.points.get((query.metric_name, query.statistic), [])
        return sorted((t, v) for t, v in pts if start <= t < end)


class RecordingNotifier(WebhookNotifier):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, Mapping[str, Any]]] = []

    def submit(self, url: str, message: Mapping[str, Any]) -> None:
        self.sent.append((url, message))


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[AlarmService, FakeSource, Clock, RecordingNotifier]]:
    clock = Clock(T0 + 5)
    db = StateDB.open(tmp_path)
    source = FakeSource()
    notifier = RecordingNotifier()
    service = AlarmService(Alarms(db.conn, clock), source, clock=clock, notifier=notifier)
    yield service, source, clock, notifier
    db.close()


def call(coro: Any) -> Any:
    return asyncio.run(coro)


def put(service: AlarmService, name: str = "lat", **kw: Any) -> None:
    params: dict[str, Any] = {
        "AlarmName": name,
        "Namespace": "AWS/SageMaker",
        "MetricName": "ModelLatency",
        "Dimensions": [{"Name": "VariantName", "Value": "A"}, {"Name": "EndpointName", "Value": "ep"}],
        "Period": P,
        "ExtendedStatistic": "p99",
        "EvaluationPeriods": 3,
        "Threshold": 100.0,
        "ComparisonOperator": "GreaterThanThreshold",
        "AlarmActions": ["http://127.0.0.1:9/alarm", "arn:aws:sns:us-east-1:000000000000:t"],
        "OKActions": ["http://127.0.0.1:9/ok"],
    }
    params.update(kw)
    call(service.put_metric_alarm(params))


def describe(service: AlarmService, name: str = "lat") -> dict[str, Any]:
    alarms: list[dict[str, Any]] = call(service.describe_alarms({"AlarmNames": [name]}))["MetricAlarms"]
    return alarms[0]


def history(service: AlarmService, **kw: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = call(service.describe_alarm_history(kw))["AlarmHistoryItems"]
    return items


def test_evaluation_moves_states_and_records_history(
    env: tuple[AlarmService, FakeSource, Clock, RecordingNotifier],
) -> None:
    service, source, clock, notifier = env
    put(service)
    assert describe(service)["StateValue"] == "INSUFFICIENT_DATA"
    for i in (3, 2, 1):
        source.add("ModelLatency", "p99", T0 - i * P, 250.0)
    assert service.evaluate_due() == [("lat", "INSUFFICIENT_DATA", "ALARM")]
    query, start, end = source.queries[-1]
    assert query.dimensions == (("EndpointName", "ep"), ("VariantName", "A")) and query.statistic == "p99"
    assert (start, end) == (T0 - 5 * P, T0)
    d = describe(service)
    assert d["StateValue"] == "ALARM" and d["StateReason"].startswith("Threshold Crossed: 3 out of the last 3")
    assert json.loads(d["StateReasonData"])["extendedStatistic"] == "p99"

    # an http action was handed to the notifier; the SNS ARN is recorded and skipped
    assert [u for u, _ in notifier.sent] == ["http://127.0.0.1:9/alarm"]
    message = notifier.sent[0][1]
    assert message["OldStateValue"] == "INSUFFICIENT_DATA" and message["NewStateValue"] == "ALARM"
    assert message["Trigger"]["ExtendedStatistic"] == "p99" and message["Trigger"]["EvaluationPeriods"] == 3
    skipped = history(service, AlarmName="lat", HistoryItemType="Action")
    assert skipped[0]["HistorySummary"].startswith("Skipped action arn:aws:sns:")

    # not due again within min(Period, 60)
    source.points.clear()
    for i in (3, 2, 1):
        source.add("ModelLatency", "p99", T0 + P - i * P, 10.0)
    clock.t += 30
    assert service.evaluate_due() == []
    clock.t += 30
    assert service.evaluate_due() == [("lat", "ALARM", "OK")]
    assert [u for u, _ in notifier.sent][-1] == "http://127.0.0.1:9/ok"
    states = history(service, AlarmName="lat", HistoryItemType="StateUpdate")
    assert [h["HistorySummary"] for h in states] == [
        "Alarm updated from ALARM to OK",
        "Alarm updated from INSUFFICIENT_DATA to ALARM",
    ]
    data = json.loads(states[0]["HistoryData"])
    assert data["oldState"]["stateValue"] == "ALARM" and data["newState"]["stateValue"] == "OK"
    assert "stateReasonData" in data["newState"]
    # the same state again: no history row, no action
    clock.t += 60
    assert service.evaluate_due() == []
    assert len(history(service, AlarmName="lat", HistoryItemType="StateUpdate")) == 2


def test_set_alarm_state_holds_until_the_next_evaluation(
    env: tuple[AlarmService, FakeSource, Clock, RecordingNotifier],
) -> None:
    service, _source, clock, notifier = env
    put(service, TreatMissingData="notBreaching")
    assert service.evaluate_due() == [("lat", "INSUFFICIENT_DATA", "OK")]
    call(service.set_alarm_state({"AlarmName": "lat", "StateValue": "ALARM", "StateReason": "drill"}))
    assert describe(service)["StateValue"] == "ALARM" and describe(service)["StateReason"] == "drill"
    assert notifier.sent[-1][1]["NewStateReason"] == "drill"
    clock.t += 59
    assert service.evaluate_due() == []  # not yet evaluated again: the set state holds
    assert describe(service)["StateValue"] == "ALARM"
    clock.t += 1
    assert service.evaluate_due() == [("lat", "ALARM", "OK")]


def test_set_alarm_state_errors(env: tuple[AlarmService, FakeSource, Clock, RecordingNotifier]) -> None:
    service, *_ = env
    put(service)
    with pytest.raises(ApiError) as info:
        call(service.set_alarm_state({"AlarmName": "nope", "StateValue": "OK", "StateReason": "x"}))
    assert info.value.code == "ResourceNotFound" and info.value.status is None
    with pytest.raises(ApiError) as info:
        bad = {"AlarmName": "lat", "StateValue": "OK", "StateReason": "x", "StateReasonData": "{"}
        call(service.set_alarm_state(bad))
    assert info.value.code == "InvalidFormatFault"


def test_actions_disabled_and_update_keeps_state(
    env: tuple[AlarmService, FakeSource, Clock, RecordingNotifier],
) -> None:
    service, _source, _clock, notifier = env
    put(service, TreatMissingData="breaching", ActionsEnabled=False)
    assert service.evaluate_due() == [("lat", "INSUFFICIENT_DATA", "ALARM")]
    assert notifier.sent == []
    put(service, TreatMissingData="breaching", Threshold=5.0)
    assert describe(service)["StateValue"] == "ALARM" and describe(service)["Threshold"] == 5.0
    configs = history(service, AlarmName="lat", HistoryItemType="ConfigurationUpdate")
    assert [h["HistorySummary"] for h in configs] == ['Alarm "lat" updated', 'Alarm "lat" created']


def test_describe_filters_and_paging(env: tuple[AlarmService, FakeSource, Clock, RecordingNotifier]) -> None:
    service, *_ = env
    for name in ("b", "a", "c", "ab"):
        put(service, name)
    call(service.set_alarm_state({"AlarmName": "c", "StateValue": "OK", "StateReason": "x"}))
    page = call(service.describe_alarms({"MaxRecords": 3}))
    assert [a["AlarmName"] for a in page["MetricAlarms"]] == ["a", "ab", "b"]
    rest = call(service.describe_alarms({"MaxRecords": 3, "NextToken": page["NextToken"]}))
    assert [a["AlarmName"] for a in rest["MetricAlarms"]] == ["c"] and "NextToken" not in rest
    prefixed = call(service.describe_alarms({"AlarmNamePrefix": "a"}))["MetricAlarms"]
    assert [a["AlarmName"] for a in prefixed] == ["a", "ab"]
    ok = call(service.describe_alarms({"StateValue": "OK"}))["MetricAlarms"]
    assert [a["AlarmName"] for a in ok] == ["c"]
    with pytest.raises(ApiError) as info:
        call(service.describe_alarms({"NextToken": "garbage"}))
    assert info.value.code == "InvalidNextToken"
    with pytest.raises(ApiError) as info:
        call(service.delete_alarms({"AlarmNames": ["a", "zz"]}))
    assert info.value.code == "ResourceNotFound"
    assert len(call(service.describe_alarms({}))["MetricAlarms"]) == 4  # none deleted


def test_history_time_range_and_order(env: tuple[AlarmService, FakeSource, Clock, RecordingNotifier]) -> None:
    service, _source, clock, _ = env
    put(service, "x")
    clock.t += 100
    call(service.set_alarm_state({"AlarmName": "x", "StateValue": "OK", "StateReason": "r"}))
    later = call(service.describe_alarm_history({"StartDate": datetime.fromtimestamp(T0 + 50, UTC)}))
    assert [h["HistoryItemType"] for h in later["AlarmHistoryItems"]] == ["StateUpdate"]
    ascending = call(service.describe_alarm_history({"AlarmName": "x", "ScanBy": "TimestampAscending"}))
    assert [h["HistoryItemType"] for h in ascending["AlarmHistoryItems"]] == ["ConfigurationUpdate", "StateUpdate"]


def test_webhook_notifier_retries_then_reports(tmp_path: Path) -> None:
    results: list[tuple[str, str | None]] = []

    async def main() -> None:
        notifier = WebhookNotifier(lambda url, m, err: results.append((url, err)), attempts=2, backoff_s=0.0)
        notifier.submit("http://127.0.0.1:9/nothing-listens", {"AlarmName": "a", "StateChangeTime": "t"})
        await notifier.drain()
        await notifier.close()

    asyncio.run(main())
    assert len(results) == 1 and results[0][1] is not None


def test_evaluator_task_starts_and_stops(env: tuple[AlarmService, FakeSource, Clock, RecordingNotifier]) -> None:
    service, _source, _clock, _ = env
    put(service, TreatMissingData="breaching")

    async def main() -> None:
        service.start()
        for _ in range(1000):  # yield to the evaluator task until it has run once
            if describe_state() == "ALARM":
                break
            await asyncio.sleep(0)
        await service.close()

    def describe_state() -> str:
        row = service.repo.get("lat")
        assert row is not None
        return row.state_value

    asyncio.run(main())
    assert describe_state() == "ALARM"
