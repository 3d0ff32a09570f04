"""CloudWatch alarms through boto3 against a real `servekit up`: put / describe / set state / history / delete,
and a webhook action (a local http.server) that fires on a state change."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from servekit.aws import client as servekit_client
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def up_url(up: UpProcess) -> tuple[Path, str]:
    return up.home, up.url


@pytest.fixture
def webhook() -> Iterator[tuple[str, queue.Queue[dict[str, Any]]]]:
    received: queue.Queue[dict[str, Any]] = queue.Queue()

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.put(json.loads(body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def put(cw: Any, name: str, **kw: Any) -> None:
    params: dict[str, Any] = {
        "AlarmName": name,
        "Namespace": "AWS/SageMaker",
        "MetricName": "ModelLatency",
        "Dimensions": [{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "AllTraffic"}],
        "Period": 60,
        "ExtendedStatistic": "p99",
        "EvaluationPeriods": 3,
        "DatapointsToAlarm": 2,
        "Threshold": 100000.0,
        "ComparisonOperator": "GreaterThanThreshold",
    }
    params.update(kw)
    cw.put_metric_alarm(**{k: v for k, v in params.items() if v is not None})


def test_put_describe_set_state_history_delete(up_url: tuple[Path, str]) -> None:
    home, url = up_url
    cw = servekit_client(home, "cloudwatch", url)
    put(cw, "ep-p99", AlarmDescription="p99 latency")
    put(cw, "ep-errors", MetricName="Invocation5XXErrors", Statistic="Average", ExtendedStatistic=None)
    put(cw, "other")
    alarms = cw.describe_alarms(AlarmNamePrefix="ep-")["MetricAlarms"]
    assert [a["AlarmName"] for a in alarms] == ["ep-errors", "ep-p99"]
    p99 = alarms[1]
    assert p99["StateValue"] == "INSUFFICIENT_DATA"
    assert p99["StateReason"] == "Unchecked: Initial alarm creation"
    assert p99["ExtendedStatistic"] == "p99" and "Statistic" not in p99
    assert p99["DatapointsToAlarm"] == 2 and p99["TreatMissingData"] == "missing"
    assert p99["AlarmArn"] == "arn:aws:cloudwatch:us-east-1:000000000000:alarm:ep-p99"
    assert isinstance(p99["StateUpdatedTimestamp"], datetime)

    # paging
    first = cw.describe_alarms(MaxRecords=2)
    assert len(first["MetricAlarms"]) == 2 and first["NextToken"]
    rest = cw.describe_alarms(MaxRecords=2, NextToken=first["NextToken"])
    assert [a["AlarmName"] for a in rest["MetricAlarms"]] == ["other"] and "NextToken" not in rest

    cw.set_alarm_state(AlarmName="ep-p99", StateValue="ALARM", StateReason="testing", StateReasonData='{"a": 1}')
    got = cw.describe_alarms(StateValue="ALARM")["MetricAlarms"]
    assert [a["AlarmName"] for a in got] == ["ep-p99"]
    assert got[0]["StateReason"] == "testing" and json.loads(got[0]["StateReasonData"]) == {"a": 1}

    history = cw.describe_alarm_history(AlarmName="ep-p99")["AlarmHistoryItems"]
    assert [h["HistoryItemType"] for h in history] == ["StateUpdate", "ConfigurationUpdate"]
    assert history[0]["HistorySummary"] == "Alarm updated from INSUFFICIENT_DATA to ALARM"
    assert json.loads(history[0]["HistoryData"])["newState"]["stateValue"] == "ALARM"
    assert history[1]["HistorySummary"] == 'Alarm "ep-p99" created'
    only_config = cw.describe_alarm_history(AlarmName="ep-p99", HistoryItemType="ConfigurationUpdate")
    assert len(only_config["AlarmHistoryItems"]) == 1
    future = datetime.now(UTC) + timedelta(days=1)
    assert cw.describe_alarm_history(StartDate=future, EndDate=future + timedelta(days=1))["AlarmHistoryItems"] == []

    put(cw, "ep-p99", Threshold=200000.0)  # an update keeps the state
    again = cw.describe_alarms(AlarmNames=["ep-p99"])["MetricAlarms"][0]
    assert again["StateValue"] == "ALARM" and again["Threshold"] == 200000.0

    with pytest.raises(ClientError) as info:
        cw.set_alarm_state(AlarmName="nope", StateValue="OK", StateReason="x")
    assert info.value.response["Error"]["Code"] == "ResourceNotFound"
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(cw.exceptions.InvalidParameterValueException):
        put(cw, "bad", DatapointsToAlarm=4)
    with pytest.raises(cw.exceptions.InvalidParameterValueException):
        put(cw, "band", ComparisonOperator="GreaterThanUpperThreshold")

    cw.delete_alarms(AlarmNames=["ep-p99", "other"])
    assert [a["AlarmName"] for a in cw.describe_alarms()["MetricAlarms"]] == ["ep-errors"]
    deleted = cw.describe_alarm_history(AlarmName="other")["AlarmHistoryItems"][0]
    assert deleted["HistorySummary"] == 'Alarm "other" deleted'
    with pytest.raises(ClientError) as info:
        cw.delete_alarms(AlarmNames=["ep-p99"])
    assert info.value.response["Error"]["Code"] == "ResourceNotFound"


def test_webhook_action_fires_on_state_changes(
    up_url: tuple[Path, str], webhook: tuple[str, queue.Queue[dict[str, Any]]]
) -> None:
    home, url = up_url
    hook, received = webhook
    cw = servekit_client(home, "cloudwatch", url)
    # SetAlarmState runs the actions of the state it enters
    put(cw, "manual", AlarmActions=[hook, "arn:aws:sns:us-east-1:000000000000:topic"], OKActions=[hook])
    cw.set_alarm_state(AlarmName="manual", StateValue="ALARM", StateReason="by hand")
    message = received.get(timeout=30)
    assert message["AlarmName"] == "manual" and message["NewStateValue"] == "ALARM"
    assert message["OldStateValue"] == "INSUFFICIENT_DATA" and message["NewStateReason"] == "by hand"
    trigger = message["Trigger"]
    assert trigger["MetricName"] == "ModelLatency" and trigger["Namespace"] == "AWS/SageMaker"
    assert trigger["ExtendedStatistic"] == "p99" and trigger["Period"] == 60 and trigger["Threshold"] == 100000.0
    assert trigger["EvaluationPeriods"] == 3 and trigger["ComparisonOperator"] == "GreaterThanThreshold"
    assert {"name": "EndpointName", "value": "ep"} in trigger["Dimensions"]
    assert message["StateChangeTime"].endswith("+0000")

    # the evaluator: no metrics yet, so a breaching-when-missing 10 s alarm goes to ALARM on its own
    put(cw, "auto", Period=10, EvaluationPeriods=1, DatapointsToAlarm=1, TreatMissingData="breaching",
        AlarmActions=[hook])  # fmt: skip
    message = received.get(timeout=60)
    assert message["AlarmName"] == "auto" and message["NewStateValue"] == "ALARM"
    assert "treated as [breaching]" in message["NewStateReason"]

    deadline = time.monotonic() + 30  # the delivery is recorded just after the POST is answered
    while True:
        items = cw.describe_alarm_history(AlarmName="manual", HistoryItemType="Action")["AlarmHistoryItems"]
        summaries = {h["HistorySummary"] for h in items}
        if f"Published a notification to {hook}" in summaries or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # polling the API for an outcome, not synchronising threads
    assert f"Published a notification to {hook}" in summaries
    assert any(s.startswith("Skipped action arn:aws:sns:") for s in summaries)
