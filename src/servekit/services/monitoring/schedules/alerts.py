"""SageMaker Model Monitor's alerts on ``servekit up``: ``ListMonitoringAlerts``, ``UpdateMonitoringAlert`` and
``ListMonitoringAlertHistory`` (what the SDK's ``list_monitoring_alerts``, ``update_monitoring_alert`` and
``list_monitoring_alert_history`` call, and what SageMaker's Model Dashboard shows).

Every monitoring schedule has one alert from its creation, as in SageMaker, named for its monitoring type
(:func:`default_alert_name`: ``data-quality-alert``, ``model-quality-alert``; servekit's names) with
``DatapointsToAlert`` 1 and ``EvaluationPeriod`` 1. After each execution of the schedule ends, each alert is judged
by :func:`alert_status`, as Model Dashboard documents it: among the schedule's last ``EvaluationPeriod`` finished
executions (fewer while there are fewer), if ``DatapointsToAlert`` or more failed, the alert is ``InAlert``, else
``OK``. An execution *fails* an alert when it found violations (``CompletedWithViolations``) or did not run to its end
(``Failed``); a ``Stopped`` one counts as neither. An update judges the alert again at once with its new criteria.
Each change of status is a row of the alert's history. The alert's action is the Model Dashboard indicator
(``Actions.ModelDashboardIndicator.Enabled``: true); servekit's own alarms and webhooks (``monitoring/alerts``) are
separate and unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.aws.timestamps import optional_epoch
from servekit.services.monitoring.schedules.alert_store import AlertRow
from servekit.services.monitoring.schedules.lifecycle import ExecutionStatus
from servekit.services.monitoring.schedules.store import Monitoring
from servekit.state.paging import InvalidNextToken

DEFAULT_DATAPOINTS = 1
DEFAULT_PERIOD = 1
FAILING = frozenset({ExecutionStatus.COMPLETED_WITH_VIOLATIONS.value, ExecutionStatus.FAILED.value})
JUDGED = (  # the finished executions an alert counts (a Stopped one is left out)
    ExecutionStatus.COMPLETED.value,
    ExecutionStatus.COMPLETED_WITH_VIOLATIONS.value,
    ExecutionStatus.FAILED.value,
)


class AlertStatus(enum.Enum):
    IN_ALERT = "InAlert"
    OK = "OK"


def default_alert_name(monitoring_type: str) -> str:
    """``DataQuality`` -> ``data-quality-alert``."""
    words = "".join(f"-{c.lower()}" if c.isupper() else c for c in monitoring_type).strip("-")
    return f"{words}-alert"


def alert_status(recent: Sequence[str], datapoints: int, period: int) -> AlertStatus:
    """The status of an alert given the schedule's finished executions' statuses, newest first."""
    failures = sum(1 for status in recent[:period] if status in FAILING)
    return AlertStatus.IN_ALERT if failures >= datapoints else AlertStatus.OK


def judge(repo: Monitoring, schedule_name: str) -> None:
    """Judge each alert of a schedule on its executions so far (after one ended, or its criteria changed)."""
    for alert in repo.alerts.of_schedule(schedule_name):
        recent = repo.alerts.recent_outcomes(schedule_name, JUDGED, alert.period)
        status = alert_status(recent, alert.datapoints, alert.period)
        if status.value != alert.status:
            repo.alerts.update(schedule_name, alert.name, status=status.value)


class AlertsService:
    def __init__(self, repo: Monitoring, account: Account | None = None) -> None:
        self.repo = repo
        self._account = account or Account()

    def handlers(self) -> dict[str, Handler]:
        return {
            "ListMonitoringAlerts": self.list_monitoring_alerts,
            "UpdateMonitoringAlert": self.update_monitoring_alert,
            "ListMonitoringAlertHistory": self.list_monitoring_alert_history,
        }

    def create_default(self, schedule_name: str, monitoring_type: str) -> None:
        self.repo.alerts.create(
            schedule_name, default_alert_name(monitoring_type), DEFAULT_DATAPOINTS, DEFAULT_PERIOD, AlertStatus.OK.value
        )

    def _schedule_name(self, name: str) -> str:
        row = self.repo.get_schedule(name)
        if row is None:
            arn = self._account.arn_of("monitoring-schedule", name)
            raise ApiError("ResourceNotFound", f"Monitoring schedule {arn} does not exist.", 400)
        return row.name

    async def list_monitoring_alerts(self, p: dict[str, Any]) -> dict[str, Any]:
        name = self._schedule_name(p["MonitoringScheduleName"])
        try:
            page = self.repo.alerts.page(name, int(p.get("MaxResults") or 100), p.get("NextToken"))
        except InvalidNextToken as exc:
            raise validation_exception(str(exc)) from None
        out: dict[str, Any] = {"MonitoringAlertSummaries": [_summary(a) for a in page.items]}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def update_monitoring_alert(self, p: dict[str, Any]) -> dict[str, Any]:
        name = self._schedule_name(p["MonitoringScheduleName"])
        datapoints, period = int(p["DatapointsToAlert"]), int(p["EvaluationPeriod"])
        if datapoints > period:
            raise validation_exception(
                f"DatapointsToAlert ({datapoints}) must not be more than EvaluationPeriod ({period}): it counts "
                "failed executions among the last EvaluationPeriod."
            )
        alert = self.repo.alerts.update(name, p["MonitoringAlertName"], datapoints=datapoints, period=period)
        if alert is None:
            raise ApiError(
                "ResourceNotFound",
                f"Monitoring alert {p['MonitoringAlertName']} of monitoring schedule {name} does not exist.",
                400,
            )
        judge(self.repo, name)
        return {
            "MonitoringScheduleArn": self._account.arn_of("monitoring-schedule", name),
            "MonitoringAlertName": alert.name,
        }

    async def list_monitoring_alert_history(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            page = self.repo.alerts.history(
                schedule_name=p.get("MonitoringScheduleName"),
                alert_name=p.get("MonitoringAlertName"),
                created_after=optional_epoch(p.get("CreationTimeAfter")),
                created_before=optional_epoch(p.get("CreationTimeBefore")),
                status=p.get("StatusEquals"),
                sort_by=p.get("SortBy") or "CreationTime",
                sort_order=p.get("SortOrder") or "Descending",
                max_results=int(p.get("MaxResults") or 100),
                next_token=p.get("NextToken"),
            )
        except (InvalidNextToken, ValueError) as exc:
            raise validation_exception(str(exc)) from None
        history = [
            {
                "MonitoringScheduleName": c.schedule_name,
                "MonitoringAlertName": c.alert_name,
                "CreationTime": c.created,
                "AlertStatus": c.status,
            }
            for c in page.items
        ]
        out: dict[str, Any] = {"MonitoringAlertHistory": history}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out


def _summary(alert: AlertRow) -> dict[str, Any]:
    return {
        "MonitoringAlertName": alert.name,
        "CreationTime": alert.created,
        "LastModifiedTime": alert.modified,
        "AlertStatus": alert.status,
        "DatapointsToAlert": alert.datapoints,
        "EvaluationPeriod": alert.period,
        "Actions": {"ModelDashboardIndicator": {"Enabled": True}},
    }
