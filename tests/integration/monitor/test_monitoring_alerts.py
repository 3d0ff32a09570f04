"""Model Monitor's alerts (ListMonitoringAlerts, UpdateMonitoringAlert, ListMonitoringAlertHistory) through a real
botocore client, the executions run by the fake monitor on the injected clock: each schedule's default alert, its
status after each execution as Model Dashboard documents it, an update judged at once, and the history of changes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.integration.monitor.conftest import World, at, data_quality, error_of, schedule

from servekit.services.monitoring.schedules.alerts import AlertStatus, alert_status, default_alert_name

OK, IN_ALERT = AlertStatus.OK, AlertStatus.IN_ALERT
V, C, F = "CompletedWithViolations", "Completed", "Failed"


@pytest.mark.parametrize(
    ("recent", "datapoints", "period", "expected"),
    [
        ([], 1, 1, OK),  # no execution yet
        ([V], 1, 1, IN_ALERT),
        ([F], 1, 1, IN_ALERT),  # an execution that did not finish fails the alert too
        ([C, V], 1, 1, OK),  # only the newest counts with a period of 1
        ([V, C, V], 2, 3, IN_ALERT),
        ([C, V, V], 2, 2, OK),  # the third is outside the period
        ([V], 2, 3, OK),  # fewer executions than the period: still counted, one is not two
        ([V, V], 2, 3, IN_ALERT),  # alerts before the period is full (Model Dashboard's example)
    ],
)
def test_an_alert_counts_failures_among_the_last_evaluation_period_executions(
    recent: list[str], datapoints: int, period: int, expected: AlertStatus
) -> None:
    assert alert_status(recent, datapoints, period) is expected


def test_default_alert_names() -> None:
    assert default_alert_name("DataQuality") == "data-quality-alert"
    assert default_alert_name("ModelQuality") == "model-quality-alert"


def test_each_schedule_has_a_default_alert_judged_after_each_execution(world: World) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world))
    world.clock.now = at("2026-11-30T10:40:00")
    sm.create_monitoring_schedule(**schedule("s"))
    [alert] = sm.list_monitoring_alerts(MonitoringScheduleName="s")["MonitoringAlertSummaries"]
    created = datetime(2026, 11, 30, 10, 40, tzinfo=UTC)
    assert alert == {
        "MonitoringAlertName": "data-quality-alert",
        "CreationTime": created,
        "LastModifiedTime": created,
        "AlertStatus": "OK",
        "DatapointsToAlert": 1,
        "EvaluationPeriod": 1,
        "Actions": {"ModelDashboardIndicator": {"Enabled": True}},
    }
    assert sm.list_monitoring_alert_history(MonitoringScheduleName="s")["MonitoringAlertHistory"] == []

    def run(behaviour: str, hour: int) -> str:
        world.monitor.behaviour = behaviour
        world.tick(at(f"2026-11-30T{hour:02d}:00:00"))
        [alert] = sm.list_monitoring_alerts(MonitoringScheduleName="s")["MonitoringAlertSummaries"]
        return str(alert["AlertStatus"])

    world.tick(at("2026-11-30T10:41:00"))
    assert run("drift", 11) == "InAlert"  # CompletedWithViolations: 1 of the last 1
    assert run("clean", 12) == "OK"
    alert_name = {"MonitoringScheduleName": "s", "MonitoringAlertName": "data-quality-alert"}
    world.clock.now = at("2026-11-30T12:10:00")
    answer = sm.update_monitoring_alert(**alert_name, DatapointsToAlert=2, EvaluationPeriod=3)
    assert answer["MonitoringScheduleArn"].endswith(":monitoring-schedule/s")
    assert answer["MonitoringAlertName"] == "data-quality-alert"
    [alert] = sm.list_monitoring_alerts(MonitoringScheduleName="s")["MonitoringAlertSummaries"]
    assert (alert["DatapointsToAlert"], alert["EvaluationPeriod"], alert["AlertStatus"]) == (2, 3, "OK")
    assert alert["LastModifiedTime"] == datetime(2026, 11, 30, 12, 10, tzinfo=UTC)
    assert run("drift", 13) == "InAlert"  # 13:00 and 11:00 of the last three
    assert run("clean", 14) == "OK"  # 13:00 only
    world.clock.now = at("2026-11-30T14:30:00")
    sm.update_monitoring_alert(**alert_name, DatapointsToAlert=1, EvaluationPeriod=3)  # judged at once
    [alert] = sm.list_monitoring_alerts(MonitoringScheduleName="s")["MonitoringAlertSummaries"]
    assert alert["AlertStatus"] == "InAlert"

    history = sm.list_monitoring_alert_history(MonitoringScheduleName="s", SortOrder="Ascending")
    changes = [
        (h["AlertStatus"], h["CreationTime"].hour, h["CreationTime"].minute) for h in history["MonitoringAlertHistory"]
    ]
    assert changes == [("InAlert", 11, 0), ("OK", 12, 0), ("InAlert", 13, 0), ("OK", 14, 0), ("InAlert", 14, 30)]
    assert {h["MonitoringAlertName"] for h in history["MonitoringAlertHistory"]} == {"data-quality-alert"}
    newest = sm.list_monitoring_alert_history(**alert_name)["MonitoringAlertHistory"]  # Descending by default
    assert newest[0]["CreationTime"] == datetime(2026, 11, 30, 14, 30, tzinfo=UTC)
    assert len(sm.list_monitoring_alert_history(StatusEquals="InAlert")["MonitoringAlertHistory"]) == 3
    after = sm.list_monitoring_alert_history(CreationTimeAfter=datetime(2026, 11, 30, 13, tzinfo=UTC))
    assert len(after["MonitoringAlertHistory"]) == 3
    first = sm.list_monitoring_alert_history(MonitoringScheduleName="s", MaxResults=2)
    second = sm.list_monitoring_alert_history(MonitoringScheduleName="s", MaxResults=2, NextToken=first["NextToken"])
    seen = first["MonitoringAlertHistory"] + second["MonitoringAlertHistory"]
    assert len({h["CreationTime"] for h in seen}) == 4  # no row twice across pages

    # a deleted schedule's alert goes, its history stays; a schedule made again under the name starts afresh
    sm.delete_monitoring_schedule(MonitoringScheduleName="s")
    assert error_of(sm.list_monitoring_alerts, MonitoringScheduleName="s")["Code"] == "ResourceNotFound"
    assert len(sm.list_monitoring_alert_history(MonitoringScheduleName="s")["MonitoringAlertHistory"]) == 5
    sm.create_monitoring_schedule(**schedule("s"))
    [alert] = sm.list_monitoring_alerts(MonitoringScheduleName="s")["MonitoringAlertSummaries"]
    assert (alert["AlertStatus"], alert["DatapointsToAlert"], alert["EvaluationPeriod"]) == ("OK", 1, 1)


def test_bad_alert_requests_are_refused_with_the_reason(world: World) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world))
    sm.create_monitoring_schedule(**schedule("s"))
    unknown_schedule = error_of(sm.list_monitoring_alerts, MonitoringScheduleName="nope")
    assert unknown_schedule["Code"] == "ResourceNotFound" and "monitoring-schedule/nope" in unknown_schedule["Message"]
    unknown_alert = error_of(
        sm.update_monitoring_alert,
        MonitoringScheduleName="s", MonitoringAlertName="other", DatapointsToAlert=1, EvaluationPeriod=1,
    )  # fmt: skip
    assert unknown_alert["Code"] == "ResourceNotFound" and "other" in unknown_alert["Message"]
    too_many = error_of(
        sm.update_monitoring_alert,
        MonitoringScheduleName="s", MonitoringAlertName="data-quality-alert", DatapointsToAlert=4, EvaluationPeriod=3,
    )  # fmt: skip
    assert too_many["Code"] == "ValidationException" and "EvaluationPeriod (3)" in too_many["Message"]
    bad_sort = error_of(sm.list_monitoring_alert_history, SortBy="Name")
    assert bad_sort["Code"] == "ValidationException"
