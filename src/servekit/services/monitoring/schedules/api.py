"""SageMaker Model Monitor's scheduling API on ``servekit up``: data-quality and model-quality job definitions,
monitoring schedules on endpoints, their executions, and the scheduler that runs ``servekit monitor`` on each
endpoint's captured traffic.

Operations: ``Create``/``Describe``/``List``/``Delete`` ``DataQualityJobDefinition`` and ``ModelQualityJobDefinition``;
``CreateMonitoringSchedule``, ``DescribeMonitoringSchedule``, ``ListMonitoringSchedules``,
``UpdateMonitoringSchedule``, ``StopMonitoringSchedule``, ``StartMonitoringSchedule``, ``DeleteMonitoringSchedule``;
``ListMonitoringExecutions``; the schedules' alerts (``ListMonitoringAlerts``, ``UpdateMonitoringAlert``,
``ListMonitoringAlertHistory``: :mod:`~servekit.services.monitoring.schedules.alerts`); and
``DescribeProcessingJob`` for an execution's processing job, which is where SageMaker (and its SDK) find an
execution's output folder — ``constraint_violations.json`` lies in it.

**Scheduling** is :class:`~servekit.services.monitoring.schedules.scheduler.Scheduler`'s (a background loop that runs
each schedule's executions); this module answers the operations, checks a config through
:class:`~servekit.services.monitoring.schedules.plans.Planner` and wakes the scheduler when a schedule changes.

**Time compression** (servekit's): the tag ``servekit:hour-seconds`` on CreateMonitoringSchedule (an integer, 1 to
3600) makes each hour of the schedule last that many seconds, window offsets included, so a test or a demo sees an
hourly schedule run every few seconds.

**Metrics.** A finished execution that judged a window records into the control plane's metrics store (what
CloudWatch's GetMetricData and alarms read): ``servekit``/``DriftedFeatures``, ``DataQualityViolations`` and
``DriftAlarms`` under ``EndpointName`` (and ``EndpointName`` + ``MonitoringSchedule``), SageMaker's
``feature_baseline_drift_<feature>`` in ``aws/sagemaker/Endpoints/data-metrics`` and the model-quality metrics in
``aws/sagemaker/Endpoints/model-metrics`` (dimensions ``Endpoint``, ``MonitoringSchedule``), stamped with the time
the execution finished. An alarm on them can roll a deployment back like any alarm.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from servekit.aws.errors import ApiError, resource_in_use, validation_exception
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.aws.timestamps import optional_epoch
from servekit.errors import IllegalTransition
from servekit.services.monitoring.schedules.alerts import AlertsService
from servekit.services.monitoring.schedules.jobs import DEFAULT_MAX_RUNTIME_S, JobSpecError, MonitoringType
from servekit.services.monitoring.schedules.lifecycle import ExecutionStatus, ScheduleStatus, check_schedule_transition
from servekit.services.monitoring.schedules.plans import Planner
from servekit.services.monitoring.schedules.scheduler import Scheduler
from servekit.services.monitoring.schedules.store import (
    AlreadyExists,
    ExecutionRow,
    JobDefinitionRow,
    Monitoring,
    NotFound,
    ScheduleRow,
)

_ST = ScheduleStatus
_LOCAL_PREFIX = "/opt/ml/processing"  # the container paths SageMaker's processing jobs report


class MonitoringService:
    def __init__(
        self,
        repo: Monitoring,
        planner: Planner,
        scheduler: Scheduler,
        account: Account | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``planner`` reads a schedule's config into what it runs; ``scheduler`` runs the executions (the
        composition root runs it as a background loop beside the plane)."""
        self.repo = repo
        self._planner = planner
        self._scheduler = scheduler
        self._account = account or Account()
        self._clock = clock
        self._alerts = AlertsService(repo, self._account)

    def handlers(self) -> dict[str, Handler]:
        """Operation name -> handler, for the API front."""
        ops: dict[str, Handler] = {}
        for t in MonitoringType:
            ops[f"Create{t.value}JobDefinition"] = self._create_definition_handler(t)
            ops[f"Describe{t.value}JobDefinition"] = self._describe_definition_handler(t)
            ops[f"List{t.value}JobDefinitions"] = self._list_definitions_handler(t)
            ops[f"Delete{t.value}JobDefinition"] = self._delete_definition_handler(t)
        ops.update(
            {
                "CreateMonitoringSchedule": self.create_monitoring_schedule,
                "DescribeMonitoringSchedule": self.describe_monitoring_schedule,
                "ListMonitoringSchedules": self.list_monitoring_schedules,
                "UpdateMonitoringSchedule": self.update_monitoring_schedule,
                "StopMonitoringSchedule": self.stop_monitoring_schedule,
                "StartMonitoringSchedule": self.start_monitoring_schedule,
                "DeleteMonitoringSchedule": self.delete_monitoring_schedule,
                "ListMonitoringExecutions": self.list_monitoring_executions,
                "DescribeProcessingJob": self.describe_processing_job,
            }
        )
        ops.update(self._alerts.handlers())
        return ops

    def _arn(self, kind: str, name: str) -> str:
        return self._account.arn_of(kind, name)

    # ---- job definitions -----------------------------------------------------------------------------------------
    def _create_definition_handler(self, type_: MonitoringType) -> Handler:
        kind = _definition_kind(type_)

        async def create(p: dict[str, Any]) -> dict[str, Any]:
            name = p["JobDefinitionName"]
            arn = self._arn(kind, name)
            p = self._planner.with_baselining_job(type_, p)
            try:
                spec = self._planner.definition_spec(type_, p)
            except JobSpecError as exc:
                raise validation_exception(str(exc)) from None
            request = {k: v for k, v in p.items() if k != "Tags"}
            try:
                self.repo.create_definition(name, arn, type_.value, spec.endpoint_name, request)
            except AlreadyExists:
                raise resource_in_use(f"Job definition {name} already exists.") from None
            return {"JobDefinitionArn": arn}

        return create

    def _definition(self, type_: MonitoringType, name: str) -> JobDefinitionRow:
        row = self.repo.get_definition(name)
        if row is None or row.type != type_.value:
            raise ApiError("ResourceNotFound", f"Job definition {name} of type {type_.value} does not exist.", 400)
        return row

    def _describe_definition_handler(self, type_: MonitoringType) -> Handler:
        async def describe(p: dict[str, Any]) -> dict[str, Any]:
            row = self._definition(type_, p["JobDefinitionName"])
            return {
                **_with_defaults(row.request),
                "JobDefinitionName": row.name,
                "JobDefinitionArn": row.arn,
                "CreationTime": row.created,
            }

        return describe

    def _list_definitions_handler(self, type_: MonitoringType) -> Handler:
        async def list_(p: dict[str, Any]) -> dict[str, Any]:
            try:
                page = self.repo.list_definitions(
                    type_.value,
                    endpoint_name=p.get("EndpointName"),
                    name_contains=p.get("NameContains"),
                    created_after=optional_epoch(p.get("CreationTimeAfter")),
                    created_before=optional_epoch(p.get("CreationTimeBefore")),
                    sort_by=p.get("SortBy") or "CreationTime",
                    sort_order=p.get("SortOrder") or "Descending",
                    max_results=int(p.get("MaxResults") or 10),
                    next_token=p.get("NextToken"),
                )
            except ValueError as exc:
                raise validation_exception(str(exc)) from None
            out: dict[str, Any] = {
                "JobDefinitionSummaries": [
                    {
                        "MonitoringJobDefinitionName": r.name,
                        "MonitoringJobDefinitionArn": r.arn,
                        "CreationTime": r.created,
                        "EndpointName": r.endpoint_name,
                    }
                    for r in page.items
                ]
            }
            if page.next_token:
                out["NextToken"] = page.next_token
            return out

        return list_

    def _delete_definition_handler(self, type_: MonitoringType) -> Handler:
        async def delete(p: dict[str, Any]) -> dict[str, Any]:
            row = self._definition(type_, p["JobDefinitionName"])
            users = self.repo.schedules_using(row.name)
            if users:
                raise resource_in_use(
                    f"Job definition {row.name} is used by monitoring schedule(s) {', '.join(users)}: delete them "
                    "first."
                )
            with contextlib.suppress(NotFound):
                self.repo.delete_definition(row.name)
            return {}

        return delete

    # ---- schedules -----------------------------------------------------------------------------------------------
    async def create_monitoring_schedule(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["MonitoringScheduleName"]
        if self.repo.get_schedule(name) is not None:
            raise resource_in_use(f"Monitoring schedule {self._arn('monitoring-schedule', name)} already exists.")
        tags = {str(t["Key"]): str(t["Value"]) for t in p.get("Tags") or []}
        config = p["MonitoringScheduleConfig"]
        type_, definition_name, plan = self._planner.plan(config, tags)
        self._planner.check_input(plan.spec)
        arn = self._arn("monitoring-schedule", name)
        try:
            self.repo.create_schedule(
                name, arn, type_.value, plan.spec.endpoint_name, definition_name, config, tags, _ST.PENDING
            )
        except AlreadyExists:
            raise resource_in_use(f"Monitoring schedule {arn} already exists.") from None
        self._alerts.create_default(name, type_.value)
        self._scheduler.wake()
        return {"MonitoringScheduleArn": arn}

    def _schedule(self, name: str) -> ScheduleRow:
        row = self.repo.get_schedule(name)
        if row is None:
            raise ApiError(
                "ResourceNotFound", f"Monitoring schedule {self._arn('monitoring-schedule', name)} does not exist.", 400
            )
        return row

    async def describe_monitoring_schedule(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._schedule(p["MonitoringScheduleName"])
        out: dict[str, Any] = {
            "MonitoringScheduleArn": row.arn,
            "MonitoringScheduleName": row.name,
            "MonitoringScheduleStatus": row.status,
            "MonitoringType": row.type,
            "CreationTime": row.created,
            "LastModifiedTime": row.modified,
            "MonitoringScheduleConfig": _config_with_defaults(row.config),
        }
        if row.endpoint_name:  # none when the schedule watches a batch transform's capture
            out["EndpointName"] = row.endpoint_name
        if row.failure_reason:
            out["FailureReason"] = row.failure_reason
        latest = self.repo.latest_execution(row.arn)
        if latest is not None:
            out["LastMonitoringExecutionSummary"] = _execution_summary(latest)
        return out

    async def list_monitoring_schedules(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            page = self.repo.list_schedules(
                endpoint_name=p.get("EndpointName"),
                name_contains=p.get("NameContains"),
                created_after=optional_epoch(p.get("CreationTimeAfter")),
                created_before=optional_epoch(p.get("CreationTimeBefore")),
                modified_after=optional_epoch(p.get("LastModifiedTimeAfter")),
                modified_before=optional_epoch(p.get("LastModifiedTimeBefore")),
                status=p.get("StatusEquals"),
                definition_name=p.get("MonitoringJobDefinitionName"),
                type_=p.get("MonitoringTypeEquals"),
                sort_by=p.get("SortBy") or "CreationTime",
                sort_order=p.get("SortOrder") or "Descending",
                max_results=int(p.get("MaxResults") or 10),
                next_token=p.get("NextToken"),
            )
        except ValueError as exc:
            raise validation_exception(str(exc)) from None
        summaries = []
        for r in page.items:
            s: dict[str, Any] = {
                "MonitoringScheduleName": r.name,
                "MonitoringScheduleArn": r.arn,
                "CreationTime": r.created,
                "LastModifiedTime": r.modified,
                "MonitoringScheduleStatus": r.status,
                "MonitoringType": r.type,
            }
            if r.endpoint_name:
                s["EndpointName"] = r.endpoint_name
            if r.definition_name:
                s["MonitoringJobDefinitionName"] = r.definition_name
            summaries.append(s)
        out: dict[str, Any] = {"MonitoringScheduleSummaries": summaries}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    def _move(self, row: ScheduleRow, to: ScheduleStatus, **changes: Any) -> ScheduleRow:
        """``row`` to status ``to`` (a legal edge, else ValidationException), with ``changes`` in the same write."""
        try:
            check_schedule_transition(ScheduleStatus(row.status), to)
        except IllegalTransition:
            raise validation_exception(
                f"Monitoring schedule {row.name} is {row.status}: it cannot become {to}."
            ) from None
        return self.repo.update_schedule(row.name, status=to, expected=(row.status,), **changes)

    async def update_monitoring_schedule(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._schedule(p["MonitoringScheduleName"])
        config = p["MonitoringScheduleConfig"]
        type_, definition_name, plan = self._planner.plan(config, row.tags)
        self._planner.check_input(plan.spec)
        changes: dict[str, Any] = {
            "config": config,
            "type_": type_.value,
            "endpoint_name": plan.spec.endpoint_name,
            "definition_name": definition_name,
            "replace_definition": True,
            "failure_reason": "",
            "since": self._clock(),  # the new rhythm starts now (NOW runs once more)
        }
        if row.status == _ST.STOPPED:  # a stopped schedule stays stopped
            self.repo.update_schedule(row.name, **changes)
        elif row.status == _ST.PENDING:
            self.repo.update_schedule(row.name, **changes)
        else:
            self._move(row, _ST.PENDING, **changes)
        self._scheduler.wake()
        return {"MonitoringScheduleArn": row.arn}

    async def stop_monitoring_schedule(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._schedule(p["MonitoringScheduleName"])
        if row.status != _ST.STOPPED:
            self._move(row, _ST.STOPPED)
        return {}

    async def start_monitoring_schedule(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._schedule(p["MonitoringScheduleName"])
        if row.status == _ST.STOPPED:
            # fires missed while stopped are not made up for: the next one after now runs
            self.repo.mark_fired(row.name, max(row.last_fire or 0.0, self._clock()))
            self._move(row, _ST.SCHEDULED)
            self._scheduler.wake()
        elif row.status == _ST.FAILED:
            raise validation_exception(
                f"Monitoring schedule {row.name} failed ({row.failure_reason}): update it with "
                "UpdateMonitoringSchedule."
            )
        return {}

    async def delete_monitoring_schedule(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._schedule(p["MonitoringScheduleName"])
        await self._scheduler.stop_execution(row.arn)  # its execution is stopped; the history stays
        with contextlib.suppress(NotFound):
            self.repo.delete_schedule(row.name)
        self.repo.alerts.delete_of_schedule(row.name)
        return {}

    # ---- executions ----------------------------------------------------------------------------------------------
    async def list_monitoring_executions(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            page = self.repo.list_executions(
                schedule_name=p.get("MonitoringScheduleName"),
                endpoint_name=p.get("EndpointName"),
                scheduled_after=optional_epoch(p.get("ScheduledTimeAfter")),
                scheduled_before=optional_epoch(p.get("ScheduledTimeBefore")),
                created_after=optional_epoch(p.get("CreationTimeAfter")),
                created_before=optional_epoch(p.get("CreationTimeBefore")),
                modified_after=optional_epoch(p.get("LastModifiedTimeAfter")),
                modified_before=optional_epoch(p.get("LastModifiedTimeBefore")),
                status=p.get("StatusEquals"),
                definition_name=p.get("MonitoringJobDefinitionName"),
                type_=p.get("MonitoringTypeEquals"),
                sort_by=p.get("SortBy") or "CreationTime",
                sort_order=p.get("SortOrder") or "Descending",
                max_results=int(p.get("MaxResults") or 10),
                next_token=p.get("NextToken"),
            )
        except ValueError as exc:
            raise validation_exception(str(exc)) from None
        out: dict[str, Any] = {"MonitoringExecutionSummaries": [_execution_summary(r) for r in page.items]}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def describe_processing_job(self, p: dict[str, Any]) -> dict[str, Any]:
        """A monitoring execution's processing job (servekit runs no other processing jobs)."""
        row = self.repo.get_execution(p["ProcessingJobName"])
        if row is None:
            raise ApiError(
                "ResourceNotFound", f"Could not find processing job {p['ProcessingJobName']} (servekit runs only "
                "monitoring executions as processing jobs).", 400
            )  # fmt: skip
        return _processing_job(row)


# ---------------------------------------------------------------------------------------------- helpers
def _with_defaults(definition: Mapping[str, Any]) -> dict[str, Any]:
    """A job definition as SageMaker answers it: with the defaults it applies where the request gave none (the SDK's
    ``attach`` and its tests read ``StoppingCondition`` and both ``NetworkConfig`` flags)."""
    out = {"StoppingCondition": {"MaxRuntimeInSeconds": DEFAULT_MAX_RUNTIME_S}, **definition}
    network = definition.get("NetworkConfig")
    if isinstance(network, Mapping):
        out["NetworkConfig"] = {
            "EnableInterContainerTrafficEncryption": False, "EnableNetworkIsolation": False, **network
        }  # fmt: skip
    return out


def _config_with_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """A MonitoringScheduleConfig as answered: an inline MonitoringJobDefinition with SageMaker's defaults."""
    inline = config.get("MonitoringJobDefinition")
    if not isinstance(inline, Mapping):
        return dict(config)
    return {**config, "MonitoringJobDefinition": _with_defaults(inline)}


def _definition_kind(type_: MonitoringType) -> str:
    return "data-quality-job-definition" if type_ is MonitoringType.DATA_QUALITY else "model-quality-job-definition"


def _execution_summary(row: ExecutionRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "MonitoringScheduleName": row.schedule_name,
        "ScheduledTime": row.scheduled,
        "CreationTime": row.created,
        "LastModifiedTime": row.modified,
        "MonitoringExecutionStatus": row.status,
        "ProcessingJobArn": row.arn,
        "MonitoringType": row.type,
    }
    if row.endpoint_name:
        out["EndpointName"] = row.endpoint_name
    if row.failure_reason:
        out["FailureReason"] = row.failure_reason
    if row.definition_name:
        out["MonitoringJobDefinitionName"] = row.definition_name
    return out


def _processing_job(row: ExecutionRow) -> dict[str, Any]:
    """DescribeProcessingJob of a monitoring execution: its output folder, window, command and result."""
    job = row.job
    command = [str(c) for c in job.get("command") or []]
    since, until = job.get("since"), job.get("until")
    environment = {"sagemaker_monitoring_schedule_name": row.schedule_name}
    if row.endpoint_name:
        environment["sagemaker_endpoint_name"] = row.endpoint_name
    if since is not None and until is not None:
        environment.update(
            {
                "start_time": datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "end_time": datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    out: dict[str, Any] = {
        "ProcessingJobName": row.job_name,
        "ProcessingJobArn": row.arn,
        "ProcessingJobStatus": ExecutionStatus(row.status).processing_status,
        "CreationTime": row.created,
        "LastModifiedTime": row.modified,
        "MonitoringScheduleArn": row.schedule_arn,
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 1}
        },
        "AppSpecification": {
            "ImageUri": "servekit",
            "ContainerEntrypoint": command[1:4] if command else [],
            "ContainerArguments": command[4:],
        },
        "ProcessingOutputConfig": {
            "Outputs": [
                {
                    "OutputName": "result",
                    "S3Output": {
                        "S3Uri": row.output_uri,
                        "LocalPath": f"{_LOCAL_PREFIX}/resultdata",
                        "S3UploadMode": "EndOfJob",
                    },
                }
            ]
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": int(job.get("max_runtime_s") or 3600)},
        "Environment": environment,
        # always a list, as SageMaker's: the SDK's MonitoringExecution.from_processing_arn reads it for every
        # execution its list_executions() returns, failed ones included
        "ProcessingInputs": [],
    }
    if job.get("data"):
        batch = not row.endpoint_name
        out["ProcessingInputs"] = [
            {
                "InputName": "batch_transform_input" if batch else "endpoint_input",
                "S3Input": {
                    # where the data is as configured (an s3:// URI stays one), else the folder read
                    "S3Uri": str(job.get("data_uri") or f"file://{job['data']}"),
                    "LocalPath": f"{_LOCAL_PREFIX}/input/{'batch' if batch else 'endpoint'}",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            }
        ]
    if row.started is not None:
        out["ProcessingStartTime"] = row.started
    if row.ended is not None:
        out["ProcessingEndTime"] = row.ended
    if row.exit_message:
        out["ExitMessage"] = row.exit_message
    if row.failure_reason:
        out["FailureReason"] = row.failure_reason
    return out
