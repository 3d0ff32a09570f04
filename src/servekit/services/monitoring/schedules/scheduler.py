"""The monitoring scheduler: a background loop that takes up new schedules (``Pending`` → ``Scheduled``, or ``Failed``
with the reason) and, when a schedule's next fire time (:mod:`~servekit.services.monitoring.schedules.cron`, a pure
function of
the injected clock) has come, makes an execution for it and runs it: ``servekit monitor run`` (data quality) or
``servekit monitor quality run`` (model quality) as a **subprocess** on the endpoint's capture over the analysis
window, bounded by ``MaxRuntimeInSeconds``. One execution per schedule at a time (a fire that comes while one runs is
merged into the next), at most ``max_parallel`` across schedules. The loop sleeps until the earliest next fire, or
until an API call (:meth:`Scheduler.wake`) or a finished execution wakes it. A finished execution that judged a
window records its metrics into the control plane's metrics store."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from servekit._utils.background import BackgroundLoop
from servekit.aws.errors import ApiError
from servekit.aws.names import Account
from servekit.services.cloudwatch.store import MetricsStore
from servekit.services.monitoring.schedules import alerts, baselines
from servekit.services.monitoring.schedules.batch import stage
from servekit.services.monitoring.schedules.cron import HOUR_S, analysis_window, due, next_fire
from servekit.services.monitoring.schedules.jobs import (
    NO_DATA,
    SERVEKIT_NAMESPACE,
    JobSpec,
    JobSpecError,
    MonitoringType,
    Outcome,
    last_line,
    metric_data,
    monitor_command,
    output_folder,
    read_data_quality,
    read_model_quality,
    read_statistics_only,
)
from servekit.services.monitoring.schedules.lifecycle import (
    UNFINISHED,
    ExecutionStatus,
    ScheduleStatus,
    check_execution_transition,
)
from servekit.services.monitoring.schedules.locations import locate, publish, published_uri
from servekit.services.monitoring.schedules.plans import Plan, Planner
from servekit.services.monitoring.schedules.store import AlreadyExists, ExecutionRow, Monitoring, ScheduleRow

log = logging.getLogger(__name__)

# (command, log file, timeout seconds) -> exit status; raises TimeoutError past the timeout
Runner = Callable[[Sequence[str], Path, float], Awaitable[int]]
LOG_NAME = "servekit-monitor.log"
LOG_GROUP = "/aws/sagemaker/ProcessingJobs"  # where SageMaker's monitoring executions log, one stream per job


class ExecutionLogs(Protocol):
    """Where an execution's log goes (CloudWatch Logs' shipper, adapted by the launch layer): follow the file, read
    it to its end when the execution ends, let it go."""

    def register(self, group: str, stream: str, path: Path) -> None: ...

    def unregister(self, path: Path) -> None: ...

    def flush(self, group: str, stream: str, path: Path) -> None: ...


BATCH_FOLDER = ".batch-capture"  # in an execution's output folder: the batch capture it read, as capture records
_ST = ScheduleStatus
_X = ExecutionStatus


async def run_subprocess(command: Sequence[str], log_path: Path, timeout_s: float) -> int:
    """Run ``command`` with its output appended to ``log_path``; past ``timeout_s`` (or when cancelled) its process
    group is terminated (killed after 5 s) and TimeoutError (or CancelledError) raised."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:  # the child keeps its own descriptor
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


class Scheduler(BackgroundLoop):
    def __init__(
        self,
        repo: Monitoring,
        planner: Planner,
        metrics: MetricsStore | None = None,
        account: Account | None = None,
        *,
        clock: Callable[[], float] = time.time,
        runner: Runner = run_subprocess,
        max_parallel: int = 2,
        python: str = sys.executable,
        max_wait_s: float = 60.0,
        logs: ExecutionLogs | None = None,
    ) -> None:
        """``logs``: where each execution's log is shipped (``/aws/sagemaker/ProcessingJobs``, a stream per
        processing job, as SageMaker's executions log); None keeps it in the output folder only."""
        self.repo = repo
        self.logs = logs
        self._planner = planner
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
            row = repo.update_execution(
                name, _X.FAILED, failure_reason="servekit up stopped while the execution ran", ended=clock()
            )
            alerts.judge(repo, row.schedule_name)
        if stale:
            log.warning("monitoring executions left unfinished by a previous servekit up marked Failed: %s", stale)

    def wake(self) -> None:
        """Look again now: a schedule was created, changed or started."""
        self._wake.set()

    async def stop_execution(self, schedule_arn: str) -> None:
        """Stop the execution a schedule is running, if any (its history stays)."""
        task = self._running.get(schedule_arn)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ---- the loop --------------------------------------------------------------------------------------------------
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
        return self._planner.plan(row.config, row.tags)[2]

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
            self._planner.check_input(plan.spec)
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
        uri = published_uri(plan.spec.output, plan.spec.output_uri, out)
        try:
            self.repo.create_execution(
                job_name, self._account.arn_of("processing-job", job_name), row, fire, _X.PENDING, uri, job
            )
        except AlreadyExists:  # made before a restart: never twice
            self.repo.mark_fired(row.name, fire)
            return job_name
        self.repo.mark_fired(row.name, fire)
        task = asyncio.get_running_loop().create_task(self._execute(row, plan, job_name, since, until, Path(out), uri))
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
        finished = self.repo.update_execution(job_name, status, **fields)
        if status.final:
            alerts.judge(self.repo, finished.schedule_name)  # the schedule's alerts count this execution
        return finished

    async def _execute(
        self, schedule: ScheduleRow, plan: Plan, job_name: str, since: float, until: float, out: Path, uri: str
    ) -> None:
        spec = plan.spec
        try:
            async with self._slots:
                data = await self._input(spec, job_name, since, until, out)
                if data is None:
                    return
                if spec.sagemaker_baseline is not None:
                    try:
                        await asyncio.to_thread(baselines.stage, spec.sagemaker_baseline, out)
                    except OSError as exc:
                        self._finish(job_name, _X.FAILED, failure_reason=str(exc)[:1024])
                        return
                command = monitor_command(spec, data, str(out), since, until, self._python)
                source = spec.batch.destination if spec.batch else self._planner.capture_uri(spec.endpoint_name)
                job = {"since": since, "until": until, "max_runtime_s": spec.max_runtime_s, "data": data}
                job |= {"data_uri": source, "command": command}
                self._finish(job_name, _X.IN_PROGRESS, started=self._clock(), job=job)
                out.mkdir(parents=True, exist_ok=True)
                header = (
                    f"Processing job {self._account.arn_of('processing-job', job_name)}: monitoring schedule "
                    f"{schedule.name}, {spec.type.value} of {spec.endpoint_name or 'a batch transform'} from "
                    f"{datetime.fromtimestamp(since, UTC):%Y-%m-%dT%H:%M:%SZ} to "
                    f"{datetime.fromtimestamp(until, UTC):%Y-%m-%dT%H:%M:%SZ}\n"
                )
                try:
                    code = await self._run_logged(command, out / LOG_NAME, header, job_name, spec.max_runtime_s)
                except TimeoutError:
                    await self._publish(spec, out, uri)
                    self._finish(
                        job_name,
                        _X.FAILED,
                        failure_reason=f"The execution ran longer than MaxRuntimeInSeconds ({spec.max_runtime_s}).",
                    )
                    return
                if code != 0:
                    await self._publish(spec, out, uri)
                    reason = last_line((await asyncio.to_thread(_read_text, out / LOG_NAME)).removeprefix(header))
                    self._finish(job_name, _X.FAILED, failure_reason=reason or f"servekit monitor exited with {code}.")
                    return
                outcome = await asyncio.to_thread(_read_outcome, spec, out)
                # the files are in the store before the execution says it is over (the SDK reads them then)
                await self._publish(spec, out, uri)
                if spec.output_uri and outcome.violations_uri:
                    outcome = replace(outcome, violations_uri=f"{uri}/constraint_violations.json")
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

    async def _run_logged(self, command: list[str], log: Path, header: str, job_name: str, max_s: int) -> int:
        """Run the monitor with its output in ``log`` after ``header`` (the processing job it is, as SageMaker's
        analyzer names it first), shipped to the job's stream of CloudWatch Logs while it runs and to its end after."""
        await asyncio.to_thread(log.write_text, header)
        stream = f"{job_name}/algo-1-{int(self._clock())}"
        if self.logs is not None:
            self.logs.register(LOG_GROUP, stream, log)
        try:
            return await self._runner(command, log, float(max_s))
        finally:
            if self.logs is not None:
                with contextlib.suppress(Exception):  # the log stays in the output folder either way
                    await asyncio.to_thread(self.logs.flush, LOG_GROUP, stream, log)
                self.logs.unregister(log)

    async def _input(self, spec: JobSpec, job_name: str, since: float, until: float, out: Path) -> str | None:
        """The local folder of capture records the execution reads; None (the execution Failed, saying why) when there
        is none or it holds no data. A batch transform's capture in the window is first turned into capture records
        in ``out/.batch-capture`` (never published)."""
        if spec.batch is not None:
            staged = out / BATCH_FOLDER
            # an execution of the same hour before (an updated NOW schedule) staged here: read this window only
            await asyncio.to_thread(shutil.rmtree, staged, True)
            try:
                count = await asyncio.to_thread(
                    stage, spec.batch, partial(locate, objects=self._planner.objects), since, until, staged
                )
            except JobSpecError as exc:
                self._finish(job_name, _X.FAILED, failure_reason=str(exc)[:1024])
                return None
            if not count:
                reason = (f"{NO_DATA}: no batch transform capture under {spec.batch.destination.rstrip('/')}/input/ "
                          "in the analysis window.")  # fmt: skip
                self._finish(job_name, _X.FAILED, failure_reason=reason)
                return None
            return str(staged)
        try:
            data = self._planner.capture_dir(spec.endpoint_name)
        except ApiError as exc:
            self._finish(job_name, _X.FAILED, failure_reason=exc.message[:1024])
            return None
        if not await asyncio.to_thread(_has_capture, Path(data)):
            self._finish(job_name, _X.FAILED, failure_reason=f"{NO_DATA}: nothing captured under {data}.")
            return None
        return data

    async def _publish(self, spec: JobSpec, out: Path, uri: str) -> None:
        """Put the execution's files into servekit up's S3 store under ``uri`` when its output is there."""
        put = self._planner.put
        if spec.output_uri and put is not None and out.is_dir():
            await asyncio.to_thread(publish, out, uri, put, frozenset({BATCH_FOLDER, baselines.STAGED}))

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


def _read_outcome(spec: JobSpec, out: Path) -> Outcome:
    if spec.statistics_only:
        return read_statistics_only(out)
    if spec.type is MonitoringType.DATA_QUALITY:
        return read_data_quality(out)
    return read_model_quality(out)
