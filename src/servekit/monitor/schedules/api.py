"""SageMaker Model Monitor's scheduling API on ``servekit up``: data-quality and model-quality job definitions,
monitoring schedules on endpoints, their executions, and the scheduler that runs ``servekit monitor`` on each
endpoint's captured traffic.

Operations: ``Create``/``Describe``/``List``/``Delete`` ``DataQualityJobDefinition`` and ``ModelQualityJobDefinition``;
``CreateMonitoringSchedule``, ``DescribeMonitoringSchedule``, ``ListMonitoringSchedules``,
``UpdateMonitoringSchedule``, ``StopMonitoringSchedule``, ``StartMonitoringSchedule``, ``DeleteMonitoringSchedule``;
``ListMonitoringExecutions``; and ``DescribeProcessingJob`` for an execution's processing job, which is where
SageMaker (and its SDK) find an execution's output folder — ``constraint_violations.json`` lies in it.

**Scheduling.** A background loop (a :class:`~servekit.edge.plane.Background`) takes up new schedules
(``Pending`` → ``Scheduled``, or ``Failed`` with the reason), and when a schedule's next fire time
(:mod:`~servekit.monitor.schedules.cron`, a pure function of the injected clock) has come it makes an execution
for it and runs it: ``servekit monitor run`` (data quality) or ``servekit monitor quality run`` (model quality) as a
**subprocess** on the endpoint's capture over the analysis window, bounded by ``MaxRuntimeInSeconds``. One
execution per schedule at a time (a fire that comes while one runs is merged into the next), at most
``max_parallel`` across schedules. The loop sleeps until the earliest next fire, or until an API call or a finished
execution wakes it.

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

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servekit._utils.background import BackgroundLoop
from servekit.aws.errors import ApiError, resource_in_use, validation_exception
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.aws.timestamps import optional_epoch
from servekit.cloudwatch.store import MetricsStore
from servekit.errors import IllegalTransition
from servekit.monitor.schedules.cron import (
    HOUR_S,
    MonitoringCron,
    Offsets,
    ScheduleExpressionError,
    analysis_window,
    due,
    next_fire,
    parse_expression,
    parse_offsets,
)
from servekit.monitor.schedules.jobs import (
    NO_DATA,
    SERVEKIT_NAMESPACE,
    JobSpec,
    JobSpecError,
    MonitoringType,
    Outcome,
    last_line,
    local_path,
    metric_data,
    monitor_command,
    output_folder,
    read_data_quality,
    read_model_quality,
    spec_from_definition,
    spec_from_inline,
)
from servekit.monitor.schedules.lifecycle import (
    UNFINISHED,
    ExecutionStatus,
    ScheduleStatus,
    check_execution_transition,
    check_schedule_transition,
)
from servekit.state.hosting import Hosting
from servekit.state.monitoring import (
    AlreadyExists,
    ExecutionRow,
    JobDefinitionRow,
    Monitoring,
    NotFound,
    ScheduleRow,
)

log = logging.getLogger(__name__)

# (command, log file, timeout seconds) -> exit status; raises TimeoutError past the timeout
Runner = Callable[[Sequence[str], Path, float], Awaitable[int]]
HOUR_TAG = "servekit:hour-seconds"
LOG_NAME = "servekit-monitor.log"
_ST = ScheduleStatus
_X = ExecutionStatus
_LOCAL_PREFIX = "/opt/ml/processing"  # the container paths SageMaker's processing jobs report


async def run_subprocess(command: Sequence[str], log_path: Path, timeout_s: float) -> int:
    """Run ``command`` with its output in ``log_path``; past ``timeout_s`` (or when cancelled) its process group is
    terminated (killed after 5 s) and TimeoutError (or CancelledError) raised."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as out:  # the child keeps its own descriptor
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=out, stderr=asyncio.subprocess.STDOUT, start_new_session=True
        )
    try:
        return await asyncio.wait_for(proc.wait(), timeout_s)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), 5.0)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        raise


@dataclass(frozen=True, slots=True)
class Plan:
    """A schedule as the scheduler runs it: when, on what, and how compressed."""

    cron: MonitoringCron
    offsets: Offsets
    hour_s: int
    spec: JobSpec


class MonitoringService(BackgroundLoop):
    def __init__(
        self,
        repo: Monitoring,
        hosting: Hosting,
        metrics: MetricsStore | None = None,
        account: Account | None = None,
        *,
        clock: Callable[[], float] = time.time,
        runner: Runner = run_subprocess,
        max_parallel: int = 2,
        python: str = sys.executable,
        max_wait_s: float = 60.0,
    ) -> None:
        self.repo = repo
        self._hosting = hosting
        self._metrics = metrics
        self._account = account or Account()
        self._clock = clock
        self._runner = runner
        self._python = python
        self._max_wait_s = max_wait_s
        self._slots = asyncio.Semaphore(max_parallel)
        self._running: dict[str, asyncio.Task[None]] = {}  # schedule ARN -> its execution's task
        self._wake = asyncio.Event()
        self._stop_reason = "The monitoring schedule was deleted while the execution ran."
        stale = [row.job_name for row in repo.executions_in(UNFINISHED)]
        for name in stale:
            repo.update_execution(
                name, _X.FAILED, failure_reason="servekit up stopped while the execution ran", ended=clock()
            )
        if stale:
            log.warning("monitoring executions left unfinished by a previous servekit up marked Failed: %s", stale)

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
        return ops

    def _arn(self, kind: str, name: str) -> str:
        a = self._account
        return f"arn:{a.partition}:sagemaker:{a.region}:{a.account_id}:{kind}/{name.lower()}"

    # ---- job definitions -----------------------------------------------------------------------------------------
    def _create_definition_handler(self, type_: MonitoringType) -> Handler:
        kind = _definition_kind(type_)

        async def create(p: dict[str, Any]) -> dict[str, Any]:
            name = p["JobDefinitionName"]
            arn = self._arn(kind, name)
            try:
                spec = spec_from_definition(type_, p)
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
                **row.request,
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
    def _plan(self, config: Mapping[str, Any], tags: Mapping[str, str]) -> tuple[MonitoringType, str | None, Plan]:
        """A MonitoringScheduleConfig (and the schedule's tags) checked: its type, job definition name and plan."""
        by_name = config.get("MonitoringJobDefinitionName")
        inline = config.get("MonitoringJobDefinition")
        if bool(by_name) == bool(inline):
            raise validation_exception(
                "MonitoringScheduleConfig needs exactly one of MonitoringJobDefinitionName (with MonitoringType) and "
                "MonitoringJobDefinition."
            )
        given = config.get("MonitoringType")
        if given is not None and given not in set(MonitoringType):
            raise validation_exception(f"servekit runs DataQuality and ModelQuality monitoring, not {given}.")
        try:
            if by_name:
                row = self.repo.get_definition(str(by_name))
                if row is None:
                    raise validation_exception(f"Job definition {by_name} does not exist.")
                type_ = MonitoringType(row.type)
                if given is not None and given != type_.value:
                    raise validation_exception(
                        f"Job definition {by_name} is a {type_.value} job definition, not {given}."
                    )
                spec = spec_from_definition(type_, row.request)
                definition_name: str | None = row.name
            else:
                type_ = MonitoringType(given or MonitoringType.DATA_QUALITY)
                spec = spec_from_inline(inline or {}, type_)
                definition_name = None
            schedule_config = config.get("ScheduleConfig") or {}
            cron = parse_expression(schedule_config.get("ScheduleExpression"))
            start = spec.start_offset or schedule_config.get("DataAnalysisStartTime")
            end = spec.end_offset or schedule_config.get("DataAnalysisEndTime")
            offsets = parse_offsets(start, end, cron, "ScheduleConfig")
        except (JobSpecError, ScheduleExpressionError) as exc:
            raise validation_exception(str(exc)) from None
        return type_, definition_name, Plan(cron, offsets, _hour_seconds(tags), spec)

    def _capture_dir(self, endpoint: str) -> str:
        """Where ``endpoint`` captures now (``<DestinationS3Uri>/<endpoint>``); ValidationException if it does not
        exist or captures nothing."""
        row = self._hosting.get_endpoint(endpoint)
        if row is None:
            raise validation_exception(f'Could not find endpoint "{self._arn("endpoint", endpoint)}".')
        config = self._hosting.get_endpoint_config(row.config_name)
        capture = config.data_capture if config is not None else None
        if not capture or not capture.get("EnableCapture", True) or not capture.get("DestinationS3Uri"):
            raise validation_exception(
                f"Endpoint {endpoint} does not capture data: its endpoint config needs a DataCaptureConfig with "
                "EnableCapture and a DestinationS3Uri for a monitoring schedule to read."
            )
        try:
            root = local_path(str(capture["DestinationS3Uri"]), "DataCaptureConfig.DestinationS3Uri")
        except JobSpecError as exc:
            raise validation_exception(str(exc)) from None
        return f"{root.rstrip('/')}/{endpoint}"

    async def create_monitoring_schedule(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["MonitoringScheduleName"]
        if self.repo.get_schedule(name) is not None:
            raise resource_in_use(f"Monitoring schedule {self._arn('monitoring-schedule', name)} already exists.")
        tags = {str(t["Key"]): str(t["Value"]) for t in p.get("Tags") or []}
        config = p["MonitoringScheduleConfig"]
        type_, definition_name, plan = self._plan(config, tags)
        self._capture_dir(plan.spec.endpoint_name)
        arn = self._arn("monitoring-schedule", name)
        try:
            self.repo.create_schedule(
                name, arn, type_.value, plan.spec.endpoint_name, definition_name, config, tags, _ST.PENDING
            )
        except AlreadyExists:
            raise resource_in_use(f"Monitoring schedule {arn} already exists.") from None
        self._wake.set()
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
            "MonitoringScheduleConfig": row.config,
            "EndpointName": row.endpoint_name,
        }
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
                "EndpointName": r.endpoint_name,
                "MonitoringType": r.type,
            }
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
        type_, definition_name, plan = self._plan(config, row.tags)
        self._capture_dir(plan.spec.endpoint_name)
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
        self._wake.set()
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
            self._wake.set()
        elif row.status == _ST.FAILED:
            raise validation_exception(
                f"Monitoring schedule {row.name} failed ({row.failure_reason}): update it with "
                "UpdateMonitoringSchedule."
            )
        return {}

    async def delete_monitoring_schedule(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._schedule(p["MonitoringScheduleName"])
        task = self._running.get(row.arn)
        if task is not None:  # its execution is stopped; the history stays
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(NotFound):
            self.repo.delete_schedule(row.name)
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

    # ---- the scheduler -------------------------------------------------------------------------------------------
    async def close(self) -> None:
        await super().close()
        self._stop_reason = "servekit up stopped while the execution ran."
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_idle(self) -> None:
        """Until every execution started so far has finished (tests and shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.tick()
            except Exception:
                log.exception("monitoring scheduler tick failed")
            delay = self._next_delay()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    def _next_delay(self) -> float:
        """Seconds until the earliest next fire of a scheduled schedule (capped at ``max_wait_s``)."""
        now = self._clock()
        soonest = now + self._max_wait_s
        for row in self.repo.schedules((_ST.SCHEDULED,)):
            try:
                plan = self._stored_plan(row)
            except ApiError:
                continue
            fire = next_fire(plan.cron, plan.hour_s, now)
            if fire is not None:
                soonest = min(soonest, fire)
        return max(0.001, soonest - now + 0.001)

    def _stored_plan(self, row: ScheduleRow) -> Plan:
        return self._plan(row.config, row.tags)[2]

    async def tick(self) -> list[str]:
        """One pass: take up new schedules, then start the executions that are due; the job names started."""
        for row in self.repo.schedules((_ST.PENDING,)):
            self._activate(row)
        started: list[str] = []
        now = self._clock()
        for row in self.repo.schedules((_ST.SCHEDULED,)):
            if row.arn in self._running:
                continue
            try:
                plan = self._stored_plan(row)
            except ApiError as exc:
                self._fail(row, exc.message)
                continue
            fire = due(plan.cron, plan.hour_s, row.since, row.last_fire, now)
            if fire is not None:
                started.append(self._launch(row, plan, fire))
        return started

    def _activate(self, row: ScheduleRow) -> None:
        try:
            plan = self._stored_plan(row)
            self._capture_dir(plan.spec.endpoint_name)
        except ApiError as exc:
            self._fail(row, exc.message)
            return
        with contextlib.suppress(Exception):  # a concurrent Stop won: it stays stopped
            self.repo.update_schedule(row.name, status=_ST.SCHEDULED, expected=(_ST.PENDING,))

    def _fail(self, row: ScheduleRow, reason: str) -> None:
        log.warning("monitoring schedule %s failed: %s", row.name, reason)
        with contextlib.suppress(Exception):
            self.repo.update_schedule(
                row.name, status=_ST.FAILED, failure_reason=reason[:1024], expected=(_ST.PENDING, _ST.SCHEDULED)
            )

    def _launch(self, row: ScheduleRow, plan: Plan, fire: float) -> str:
        if plan.cron.once:
            fire = float(int(fire))  # a whole second: NOW fires at creation
        since, until = analysis_window(plan.cron, plan.hour_s, fire, plan.offsets)
        out = output_folder(plan.spec, row.name, fire, compressed=plan.hour_s != HOUR_S)
        stamp = datetime.fromtimestamp(fire, UTC).strftime("%Y%m%d%H%M%S")
        digest = hashlib.sha256(f"{row.arn}@{fire}".encode()).hexdigest()[:24]
        job_name = f"model-monitoring-{stamp}-{digest}"
        job = {"since": since, "until": until, "max_runtime_s": plan.spec.max_runtime_s}
        try:
            self.repo.create_execution(
                job_name, self._arn("processing-job", job_name), row, fire, _X.PENDING, f"file://{out}", job
            )
        except AlreadyExists:  # made before a restart: never twice
            self.repo.mark_fired(row.name, fire)
            return job_name
        self.repo.mark_fired(row.name, fire)
        task = asyncio.get_running_loop().create_task(self._execute(row, plan, job_name, since, until, Path(out)))
        self._running[row.arn] = task

        def done(_: asyncio.Task[None]) -> None:
            if self._running.get(row.arn) is task:
                del self._running[row.arn]
            self._wake.set()

        task.add_done_callback(done)
        return job_name

    def _finish(self, job_name: str, status: ExecutionStatus, **fields: Any) -> ExecutionRow:
        row = self.repo.get_execution(job_name)
        assert row is not None
        check_execution_transition(ExecutionStatus(row.status), status)
        if status.final:
            fields.setdefault("ended", self._clock())
        return self.repo.update_execution(job_name, status, **fields)

    async def _execute(
        self, schedule: ScheduleRow, plan: Plan, job_name: str, since: float, until: float, out: Path
    ) -> None:
        spec = plan.spec
        try:
            async with self._slots:
                try:
                    data = self._capture_dir(spec.endpoint_name)
                except ApiError as exc:
                    self._finish(job_name, _X.FAILED, failure_reason=exc.message[:1024])
                    return
                if not await asyncio.to_thread(_has_capture, Path(data)):
                    self._finish(job_name, _X.FAILED, failure_reason=f"{NO_DATA}: nothing captured under {data}.")
                    return
                command = monitor_command(spec, data, str(out), since, until, self._python)
                job = {"since": since, "until": until, "max_runtime_s": spec.max_runtime_s, "data": data}
                self._finish(job_name, _X.IN_PROGRESS, started=self._clock(), job={**job, "command": command})
                out.mkdir(parents=True, exist_ok=True)
                try:
                    code = await self._runner(command, out / LOG_NAME, float(spec.max_runtime_s))
                except TimeoutError:
                    self._finish(
                        job_name,
                        _X.FAILED,
                        failure_reason=f"The execution ran longer than MaxRuntimeInSeconds ({spec.max_runtime_s}).",
                    )
                    return
                if code != 0:
                    reason = last_line(await asyncio.to_thread(_read_text, out / LOG_NAME))
                    self._finish(job_name, _X.FAILED, failure_reason=reason or f"servekit monitor exited with {code}.")
                    return
                outcome = await asyncio.to_thread(_read_outcome, spec.type, out)
                self._conclude(schedule, job_name, outcome, spec)
        except asyncio.CancelledError:
            row = self.repo.get_execution(job_name)
            if row is not None and not ExecutionStatus(row.status).final:
                self._finish(job_name, _X.STOPPING)
                self._finish(job_name, _X.STOPPED, failure_reason=self._stop_reason)
            raise
        except Exception as exc:
            log.exception("monitoring execution %s failed", job_name)
            with contextlib.suppress(Exception):
                self._finish(job_name, _X.FAILED, failure_reason=(str(exc) or type(exc).__name__)[:1024])

    def _conclude(self, schedule: ScheduleRow, job_name: str, outcome: Outcome, spec: JobSpec) -> None:
        if outcome.status is _X.FAILED:
            self._finish(job_name, _X.FAILED, failure_reason=outcome.failure_reason[:1024], outcome=outcome.to_json())
            return
        self._finish(job_name, outcome.status, exit_message=outcome.exit_message[:1024], outcome=outcome.to_json())
        if self._metrics is None or not spec.publish_metrics:
            return
        now = self._clock()
        for namespace, metric, dims, value in metric_data(outcome, spec.endpoint_name, schedule.name, spec.type):
            # counts as `monitor run --publish-url` publishes them; distances and quality metrics have no unit
            unit = "Count" if namespace == SERVEKIT_NAMESPACE else "None"
            self._metrics.put(namespace, metric, dims, now, values=((value, 1.0),), unit=unit)


# ---------------------------------------------------------------------------------------------- helpers
def _definition_kind(type_: MonitoringType) -> str:
    return "data-quality-job-definition" if type_ is MonitoringType.DATA_QUALITY else "model-quality-job-definition"


def _hour_seconds(tags: Mapping[str, str]) -> int:
    text = tags.get(HOUR_TAG)
    if text is None:
        return HOUR_S
    if not text.isdigit() or not 1 <= int(text) <= HOUR_S:
        raise validation_exception(
            f"Tag {HOUR_TAG} compresses the schedule's hours: an integer number of seconds from 1 to 3600, not "
            f"{text!r}."
        )
    return int(text)


def _has_capture(root: Path) -> bool:
    """Whether ``root`` holds a published capture file (names starting with ``.`` or ``_`` are a writer's
    temporary files, which the monitor skips too)."""
    for _, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        if any(not f.startswith((".", "_")) for f in files):
            return True
    return False


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _read_outcome(type_: MonitoringType, out: Path) -> Outcome:
    if type_ is MonitoringType.DATA_QUALITY:
        return read_data_quality(out)
    return read_model_quality(out)


def _execution_summary(row: ExecutionRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "MonitoringScheduleName": row.schedule_name,
        "ScheduledTime": row.scheduled,
        "CreationTime": row.created,
        "LastModifiedTime": row.modified,
        "MonitoringExecutionStatus": row.status,
        "ProcessingJobArn": row.arn,
        "EndpointName": row.endpoint_name,
        "MonitoringType": row.type,
    }
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
    environment = {
        "sagemaker_endpoint_name": row.endpoint_name,
        "sagemaker_monitoring_schedule_name": row.schedule_name,
    }
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
    }
    if job.get("data"):
        out["ProcessingInputs"] = [
            {
                "InputName": "endpoint_input",
                "S3Input": {
                    "S3Uri": f"file://{job['data']}",
                    "LocalPath": f"{_LOCAL_PREFIX}/input/endpoint",
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
