"""Executions of SageMaker pipeline definitions, in the control plane's own process: each step calls the plane's
operation for it (:mod:`servekit.services.pipelines.execution.services`) and waits for its job, the way SageMaker's
pipeline service calls SageMaker. The loop is the one servekit's own pipelines use: the same scheduler decides
which steps start (dependencies, condition branches, parallelism, retries' backoff), the same state rows record
the execution and its steps (ListPipelineExecutionSteps, the console and lineage read them).

Why in the plane and not a subprocess like servekit's DSL runs: a SageMaker step runs no code of its own, it only
calls services, and those live here; a step's job runs where the job service puts it.

An execution outlives the plane that started it: its rows say which job each running step started (under a name
derived from the execution, step and attempt), so a restarted plane :meth:`Executor.adopt`\\ s every execution whose
plane is gone and follows those jobs to their end."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from servekit._utils.processes import owner_alive
from servekit.aws.errors import ApiError
from servekit.services.pipelines.engine.scheduler import Node, NodeState, schedule
from servekit.services.pipelines.execution.policy import retry
from servekit.services.pipelines.execution.records import SOURCE, Attempt, Execution, Outcome
from servekit.services.pipelines.execution.selective import select
from servekit.services.pipelines.execution.services import Call, JobKind
from servekit.services.pipelines.execution.steps import JOB_KEY, attempt_step, decide_now
from servekit.services.pipelines.runs.repo import Pipelines, RunRow, StaleRunStatus, StepRow
from servekit.services.pipelines.runs.status import RunStatus, StepStatus, check_step_transition
from servekit.services.pipelines.sagemaker import FileReader, StepType, load_definition

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often a running job is described: a step ends at most this long after its job
DEFAULT_PARALLELISM = 50


Wait = Callable[[asyncio.Event, float | None], Awaitable[None]]


async def wait_event(event: asyncio.Event, timeout: float | None) -> None:
    """Until ``event`` is set or ``timeout`` seconds pass (None: only the event)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)


class Executor:
    def __init__(
        self,
        repo: Pipelines,
        call: Call,
        read_file: FileReader | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wait: Wait = wait_event,
        poll_s: float = POLL_S,
    ) -> None:
        """``clock`` (monotonic seconds) times retries' backoff; ``wall`` stamps rows; ``pause`` waits between
        Describe calls of a running job and ``wait`` for the next event: tests inject a manual clock."""
        self.repo = repo
        self._call = call
        self._read_file = read_file
        self._clock = clock
        self._wall = wall
        self._pause = pause
        self._wait = wait
        self._poll_s = poll_s
        self._executions: dict[str, Execution] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    # ---- starting, stopping, adopting ------------------------------------------------------------------------

    def begin(
        self,
        *,
        run_id: str,
        arn: str,
        pipeline: str,
        pipeline_arn: str,
        document: Mapping[str, Any],
        parameters: Mapping[str, Any],
        max_parallel: int = DEFAULT_PARALLELISM,
        selective: tuple[str, str, tuple[str, ...]] | None = None,
    ) -> RunRow:
        """Record a new execution (Executing, owned by this process) and start running it. ``document`` is the
        definition as CreatePipeline checked it; ``parameters`` every parameter's value (resolved); ``selective``
        (source execution id, its ARN, the selected steps) runs only those steps, reusing the source's results for
        the others (:class:`SelectionError` when it cannot, before anything is recorded)."""
        definition, dag = load_definition(document)
        saved: dict[str, Any] = {"Document": dict(document), "MaxParallel": max_parallel, "PipelineArn": pipeline_arn}
        selection = None
        if selective is not None:
            source_id, source_arn, selected = selective
            source_rows = {r.step: r for r in self.repo.steps(source_id)}
            selection = select(definition, dag, source_rows, selected)
            saved["Selective"] = {
                "SourcePipelineExecutionArn": source_arn,
                "SelectedSteps": list(selected),
                "Skip": list(selection.skipped),
            }
        row = self.repo.create_run(
            run_id=run_id,
            pipeline=pipeline,
            arn=arn,
            source=SOURCE,
            definition=saved,
            parameters=parameters,
            artifact_root="",
            status=RunStatus.EXECUTING,
            owner_pid=os.getpid(),
            owner_host=socket.gethostname(),
        )
        execution = Execution(row, pipeline_arn, definition, dag, dict(parameters), max_parallel)
        if selection is not None and selective is not None:
            self._reuse(execution, selection.reused, source_rows, selective[1])
            _skip(execution, selection.skipped)
        self._run(execution)
        return row

    def _reuse(self, e: Execution, names: Sequence[str], source: Mapping[str, StepRow], source_arn: str) -> None:
        """Steps a selective execution does not run: their source rows, marked as reused, and their properties."""
        for name in names:
            was = source[name]
            metadata = {**(was.metadata or {}), "SelectiveExecutionResult": {"SourcePipelineExecutionArn": source_arn}}
            self._put(e, name, status=StepStatus.STARTING, attempts=0, started=was.started)
            self._put(
                e, name, status=StepStatus.SUCCEEDED, ended=was.ended, properties=was.properties, metadata=metadata
            )
            outcome = (was.metadata or {}).get("Condition", {}).get("Outcome")
            e.nodes[name] = Node(NodeState.SUCCEEDED, outcome=None if outcome is None else outcome == "True")
            e.properties[name] = dict(was.properties or {})

    def stop(self, run_id: str) -> None:
        """A stop asked for (the row says Stopping already): the loop stops the running steps' jobs."""
        execution = self._executions.get(run_id)
        if execution is not None:
            execution.wake.set()

    def running(self, run_id: str) -> bool:
        return run_id in self._executions

    def adopt(self) -> list[str]:
        """Resume every execution of a SageMaker definition whose plane is gone (a restart): steps that succeeded
        keep their properties, running ones follow the job they started, the others start. Returns their ids."""
        adopted = []
        for row in self._orphans():
            try:
                self.resume(row.run_id, expected=(RunStatus(row.status),), stopping=row.status == RunStatus.STOPPING)
            except StaleRunStatus:
                continue  # another plane took it meanwhile
            adopted.append(row.run_id)
        return adopted

    def _orphans(self) -> list[RunRow]:
        out: list[RunRow] = []
        token: str | None = None
        while True:
            page = self.repo.list_runs(max_results=100, next_token=token)
            out += [
                r
                for r in page.items
                if r.source == SOURCE
                and r.status in (RunStatus.EXECUTING, RunStatus.STOPPING)
                and r.run_id not in self._executions
                and not owner_alive(r.owner_pid, r.owner_host)
            ]
            if not page.next_token:
                return out
            token = page.next_token

    def resume(self, run_id: str, *, expected: tuple[RunStatus, ...], stopping: bool = False) -> RunRow:
        """Take an execution over (an adopted one, or RetryPipelineExecution of a Failed one): Executing again,
        owned by this process; :class:`StaleRunStatus` when it is no longer in an ``expected`` status."""
        row = self.repo.get_run(run_id)
        assert row is not None
        status = RunStatus.STOPPING if stopping else RunStatus.EXECUTING
        self.repo.take_over(
            run_id, status, owner_pid=os.getpid(), owner_host=socket.gethostname(), expected=[str(s) for s in expected]
        )
        row = self.repo.get_run(run_id)
        assert row is not None
        saved = row.definition
        definition, dag = load_definition(saved["Document"])
        execution = Execution(
            row, saved["PipelineArn"], definition, dag, dict(row.parameters), int(saved["MaxParallel"])
        )
        execution.stopping = stopping
        _skip(execution, (saved.get("Selective") or {}).get("Skip", ()))
        for s in self.repo.steps(run_id):
            execution.rows[s.step] = s
            if s.status == StepStatus.SUCCEEDED:
                outcome = (s.metadata or {}).get("Condition", {}).get("Outcome")
                execution.nodes[s.step] = Node(
                    NodeState.SUCCEEDED, outcome=None if outcome is None else outcome == "True"
                )
                execution.properties[s.step] = dict(s.properties or {})
            elif s.status in (StepStatus.STARTING, StepStatus.EXECUTING, StepStatus.STOPPING):
                job = (s.metadata or {}).get(JOB_KEY)
                if job:  # follow the job this attempt started
                    execution.adopted_jobs[s.step] = str(job)
        self._run(execution)
        return row

    def _run(self, execution: Execution) -> None:
        self._executions[execution.run_id] = execution
        task = asyncio.get_running_loop().create_task(self._drive(execution), name=f"pipeline-{execution.run_id}")
        self._tasks[execution.run_id] = task

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.pop(execution.run_id, None)
            self._executions.pop(execution.run_id, None)
            if not t.cancelled() and t.exception() is not None:
                log.error("pipeline execution %s ended abnormally", execution.run_id, exc_info=t.exception())

        task.add_done_callback(done)

    async def close(self) -> None:
        """The plane stops: its executions stay Executing, owned by this process; a restarted plane adopts them."""
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        for e in list(self._executions.values()):
            for a in e.running.values():
                a.task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def idle(self) -> None:
        """Until every execution this process runs has ended (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    # ---- the loop --------------------------------------------------------------------------------------------

    async def _drive(self, e: Execution) -> None:
        while True:
            if not e.stopping and self._stop_asked(e):
                e.stopping = True
            if e.stopping:
                await self._stop_jobs(e)
            now = self._clock()
            plan = schedule(e.dag, e.nodes, now=now, max_parallel=e.max_parallel, stopping=e.stopping)
            for name in plan.ready:
                self._launch(e, name)
            if plan.ready:
                continue  # conditions and fail steps end at once: plan again before waiting
            if plan.finished:
                break
            if not e.outcomes:
                e.wake.clear()
                await self._wait(e.wake, None if plan.wake_at is None else max(0.0, plan.wake_at - now))
            while e.outcomes:
                self._complete(e, e.outcomes.pop(0))
        self._finish(e)

    def _stop_asked(self, e: Execution) -> bool:
        row = self.repo.get_run(e.run_id)
        return row is not None and row.status == RunStatus.STOPPING

    async def _stop_jobs(self, e: Execution) -> None:
        for name, a in e.running.items():
            if a.job is None or e.rows[name].status == StepStatus.STOPPING:
                continue
            kind, job = a.job
            self._put(e, name, status=StepStatus.STOPPING)
            try:
                await self._call(kind.stop, {kind.name_field: job})
            except ApiError as exc:  # it ended meanwhile: its Describe says how
                log.info("pipeline %s: %s %s: %s", e.run_id, kind.stop, job, exc.message)

    def _finish(self, e: Execution) -> None:
        for name, row in list(e.rows.items()):  # waiting out a retry when another step failed: it ends here
            if row.status in (StepStatus.STARTING, StepStatus.EXECUTING) and name not in e.running:
                self._put(e, name, status=StepStatus.FAILED, ended=self._wall(), failure_reason=_unretried(row))
        failed = any(n.state is NodeState.FAILED for n in e.nodes.values())
        stopped = e.stopping or any(n.state is NodeState.STOPPED for n in e.nodes.values())
        if failed:
            status, reason = RunStatus.FAILED, e.failure or "Step failure: one or more steps failed."
        elif stopped:
            status, reason = RunStatus.STOPPED, ""
        else:
            status, reason = RunStatus.SUCCEEDED, ""
        current = self.repo.get_run(e.run_id)
        expected = [RunStatus.EXECUTING, RunStatus.STOPPING]
        if current is not None and current.status == RunStatus.STOPPING and status is RunStatus.SUCCEEDED:
            status = RunStatus.STOPPED
        try:
            self.repo.set_run_status(e.run_id, status, reason=reason, final=True, expected=expected)
        except StaleRunStatus:
            log.warning("pipeline execution %s changed status before it could end %s", e.run_id, status)

    # ---- steps -----------------------------------------------------------------------------------------------

    def _put(self, e: Execution, name: str, **changes: Any) -> StepRow:
        before = e.rows.get(name)
        base = before or StepRow(e.run_id, name, str(e.definition.step(name).type), StepStatus.STARTING)
        after = replace(base, **changes)
        current = StepStatus(before.status) if before is not None else None
        new = StepStatus(after.status)
        if current is not new or new is StepStatus.EXECUTING:
            check_step_transition(name, current, new)
        self.repo.put_step(after)
        e.rows[name] = after
        return after

    def _launch(self, e: Execution, name: str) -> None:
        step = e.definition.step(name)
        before = e.rows.get(name)
        adopted = e.adopted_jobs.pop(name, None)
        if adopted is not None and before is not None:
            attempt = before.attempts
        else:
            attempt = (before.attempts if before else 0) + 1
            retrying = before is not None and before.status == StepStatus.EXECUTING
            if not retrying:
                self._put(e, name, status=StepStatus.STARTING, attempts=attempt, started=self._wall(), ended=None)
            else:
                self._put(e, name, attempts=attempt)
        if step.type is StepType.CONDITION or step.type is StepType.FAIL:
            self._complete(e, decide_now(e, step, attempt, self._read_file, self._wall()))
            return
        e.nodes[name] = Node(NodeState.RUNNING)
        holder: list[Attempt] = []

        def started(kind: JobKind, job: str, arn: str | None, cache_key: str) -> None:
            holder[0].job = (kind, job)
            metadata = dict(e.rows[name].metadata or {})
            metadata[JOB_KEY] = job  # a restarted plane follows this job (adopt)
            if arn:
                metadata[kind.metadata_key] = {"Arn": arn}
            self._put(e, name, status=StepStatus.EXECUTING, metadata=metadata, cache_key=cache_key)

        task = asyncio.get_running_loop().create_task(
            attempt_step(
                e,
                step,
                attempt,
                call=self._call,
                repo=self.repo,
                read_file=self._read_file,
                now=self._wall,
                pause=lambda: self._pause(self._poll_s),
                started=started,
                adopted_job=adopted,
            )
        )
        holder.append(Attempt(attempt, task))
        e.running[name] = holder[0]

        def done(t: asyncio.Task[Outcome]) -> None:
            if t.cancelled():
                return
            e.outcomes.append(t.result())
            e.wake.set()

        task.add_done_callback(done)

    def _complete(self, e: Execution, o: Outcome) -> None:
        entry = e.running.get(o.step)
        if entry is not None and entry.attempt == o.attempt:
            del e.running[o.step]
        elif entry is not None:
            return  # an abandoned attempt's late answer
        name = o.step
        if o.ok:
            outcome = (o.metadata.get("Condition") or {}).get("Outcome")
            e.nodes[name] = Node(NodeState.SUCCEEDED, outcome=None if outcome is None else outcome == "True")
            e.properties[name] = dict(o.properties or {})
            metadata = {**(e.rows[name].metadata or {}), **o.metadata}
            changes: dict[str, Any] = {"properties": e.properties[name], "metadata": metadata, "failure_reason": ""}
            if o.cache_key:
                changes["cache_key"] = o.cache_key
            if "CacheHitResult" in o.metadata:
                changes["cache_source_run"] = o.metadata["CacheHitResult"]["SourcePipelineExecutionArn"].rsplit("/", 1)[
                    -1
                ]
            self._put(e, name, status=StepStatus.SUCCEEDED, ended=self._wall(), **changes)
            return
        if o.stopped or (e.stopping and not o.failure_type and not o.message):
            e.nodes[name] = Node(NodeState.STOPPED)
            self._put(e, name, status=StepStatus.STOPPED, ended=self._wall(), failure_reason="Stopped")
            return
        step = e.definition.step(name)
        now = self._clock()
        done = e.retries.get(name, 0)
        first = e.first_failure.setdefault(name, now)
        decision = None if e.stopping else retry(step.retry_policies, o.failure_type, done, first, now)
        if decision is not None:
            e.retries[name] = done + 1
            e.nodes[name] = Node(NodeState.PENDING, not_before=now + decision.delay_s)
            reason = f"attempt {o.attempt} failed: {o.message}; retrying in {decision.delay_s:g}s"
            self._put(e, name, status=StepStatus.EXECUTING, failure_reason=reason)
            return
        e.nodes[name] = Node(NodeState.FAILED)
        e.failure = e.failure or (
            o.message if step.type is StepType.FAIL else f"Step failure: step {name!r} failed: {o.message}"
        )
        metadata = {**(e.rows[name].metadata or {}), **o.metadata}
        self._put(e, name, status=StepStatus.FAILED, ended=self._wall(), failure_reason=o.message, metadata=metadata)


def _skip(e: Execution, names: Iterable[str]) -> None:
    """Steps a selective execution neither runs nor reuses: done as far as scheduling goes, with no row."""
    for name in names:
        e.nodes[name] = Node(NodeState.SUCCEEDED)


def _unretried(row: StepRow) -> str:
    """A step whose retry never came (the execution failed or stopped first): its last attempt's failure."""
    reason = row.failure_reason.split("; retrying in ")[0]
    return f"{reason}; not retried: the execution ended first" if reason else "the execution ended first"
