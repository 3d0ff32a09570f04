"""Runs a pipeline: the loop that asks the scheduler what may start, starts it on the engine (or here, for
conditions, fails and control-plane calls), enforces timeouts, retries with backoff, reuses cached outputs, records
artifacts with their lineage, and notices a stop asked for from another process.

Time is injected: ``clock`` (monotonic seconds: timeouts, backoff) and ``sleep`` (waiting out a backoff when no
step runs), so tests never wait for real backoffs; ``wall`` stamps the rows."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servekit.services.pipelines.access.guard import normalize
from servekit.services.pipelines.definition.conditions import evaluate
from servekit.services.pipelines.definition.loading import load_pipeline, normalize_source
from servekit.services.pipelines.definition.pipeline import Pipeline
from servekit.services.pipelines.definition.refs import Get, references, resolve
from servekit.services.pipelines.definition.steps import Step, StepKind
from servekit.services.pipelines.engine import actions
from servekit.services.pipelines.engine.hashing import cache_key, code_hash, tree_hash
from servekit.services.pipelines.engine.local_engine import Engine, LocalEngine, StepHandle, StepOutcome, StepTask
from servekit.services.pipelines.engine.scheduler import Node, NodeState, schedule
from servekit.services.pipelines.errors import PipelineError, RunConflict, StepFailure
from servekit.services.pipelines.runs.repo import ArtifactRow, Claim, RunRow, StepRow
from servekit.services.pipelines.runs.status import RunStatus, StepStatus
from servekit.services.pipelines.runs.store import RunStore, new_run_id, owner, run_arn
from servekit.state.database import Database
from servekit.storage import ObjectStorage, Storage, join

STOP_POLL_S = 0.5  # how soon a stop asked for by another process (servekit pipeline stop) is noticed


@dataclass(frozen=True, slots=True)
class RunResult:
    run_id: str
    arn: str
    status: RunStatus
    failure_reason: str
    steps: dict[str, StepRow]


@dataclass
class _Running:
    attempt: int
    deadline: float | None
    handle: StepHandle | None  # None: a control-plane call on a thread (it cannot be killed, only abandoned)
    outputs: dict[str, str]
    lineage: dict[str, Any]  # what the artifacts' lineage records: inputs, parameters, code hash
    cache_key: str
    kill_reason: str = ""


@dataclass
class _Run:
    pipeline: Pipeline
    row: RunRow
    params: dict[str, Any]
    rows: dict[str, StepRow]
    nodes: dict[str, Node] = field(default_factory=dict)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)  # what each finished step exposes
    running: dict[str, _Running] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    events: queue.Queue[StepOutcome] = field(default_factory=queue.Queue)
    failure: str = ""
    stopping: bool = False

    @property
    def run_id(self) -> str:
        return self.row.run_id


class PipelineRunner:
    def __init__(
        self,
        db: Database,
        *,
        home: Path,
        engine: Engine | None = None,
        control: actions.ControlPlane | None = None,
        storage: ObjectStorage | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall: Callable[[], float] = time.time,
        stop_poll_s: float = STOP_POLL_S,
        import_code: bool = True,
    ) -> None:
        # False: the pipeline's code is never imported here (a run servekit up started: its steps run it, sandboxed)
        self.import_code = import_code
        self.store = RunStore(db)
        self.home = home
        self.engine: Engine = engine or LocalEngine()
        self.control = control
        self.storage: ObjectStorage = storage or Storage()
        self._clock = clock
        self._sleep = sleep
        self._wall = wall
        self._stop_poll_s = stop_poll_s

    # ---- entry points ----------------------------------------------------------------------------------------

    def start(
        self,
        pipeline: Pipeline,
        source: str,
        *,
        artifact_root: str,
        parameters: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        claim: Claim | None = None,
    ) -> RunResult:
        """A new run of ``pipeline`` (loadable again from ``source`` by step processes and by a resume). With
        ``claim`` (a trigger's partition or fire), the run is created only if nobody claimed it before:
        :class:`servekit.services.pipelines.runs.repo.AlreadyClaimed` otherwise, and nothing runs."""
        params = pipeline.bind(parameters or {})
        run_id = run_id or new_run_id()
        pid, host = owner()
        row = self.store.repo.create_run(
            run_id=run_id,
            pipeline=pipeline.name,
            arn=run_arn(pipeline.name, run_id),
            source=normalize_source(source),
            definition=pipeline.to_document(),
            parameters=params,
            artifact_root=normalize(artifact_root),
            status=RunStatus.EXECUTING,
            owner_pid=pid,
            owner_host=host,
            claim=claim,
        )
        return self._drive(_Run(pipeline, row, params, {}))

    def resume(self, run_id: str) -> RunResult:
        """Continue a Stopped or Failed run (or one whose process died): succeeded steps keep their outputs, the
        others run again as new attempts. The definition must be the one the run started with."""
        row = self.store.get(run_id)
        pipeline = load_pipeline(row.source, import_code=self.import_code)
        if pipeline.to_document() != row.definition:
            raise RunConflict(
                f"pipeline {row.pipeline!r} at {row.source} has changed since run {row.run_id} started; "
                "start a new run instead (cached steps are reused)"
            )
        row = self.store.take_over(run_id)
        run = _Run(pipeline, row, dict(row.parameters), self.store.steps(run_id))
        for name, s in run.rows.items():
            if s.status == StepStatus.SUCCEEDED:
                outcome = (s.metadata or {}).get("Condition", {}).get("Outcome")
                run.nodes[name] = Node(NodeState.SUCCEEDED, outcome=None if outcome is None else outcome == "True")
                run.values[name] = dict(s.properties or {})
            elif s.status != StepStatus.FAILED or pipeline.step(name).kind is not StepKind.FAIL:
                continue
            else:  # a Fail step that ran: resuming would only fail again
                raise RunConflict(f"run {run_id} ended at Fail step {name!r}: {s.failure_reason}")
        return self._drive(run)

    # ---- the loop --------------------------------------------------------------------------------------------

    def _drive(self, run: _Run) -> RunResult:
        dag = run.pipeline.dag
        next_poll = self._clock()
        while True:
            try:
                now = self._clock()
                if now >= next_poll:
                    next_poll = now + self._stop_poll_s
                    if not run.stopping and self.store.status(run.run_id) is RunStatus.STOPPING:
                        self._stop_all(run)
                self._check_timeouts(run, now)
                plan = schedule(dag, run.nodes, now=now, max_parallel=run.pipeline.max_parallel, stopping=run.stopping)
                for name in plan.ready:
                    self._launch(run, name)
                if plan.ready:
                    continue  # some finish at once (conditions, cache hits): plan again before waiting
                if plan.finished:
                    break
                self._wait(run, plan.wake_at, next_poll)
            except KeyboardInterrupt:  # Ctrl-C: stop like servekit pipeline stop would, then resume later
                if not run.stopping:
                    self.store.set_status(run.run_id, RunStatus.STOPPING)
                    self._stop_all(run)
        return self._finish(run)

    def _wait(self, run: _Run, wake_at: float | None, next_poll: float) -> None:
        now = self._clock()
        until = min([next_poll, *(r.deadline for r in run.running.values() if r.deadline is not None)])
        if wake_at is not None:
            until = min(until, wake_at)
        if not run.running:
            self._sleep(max(0.0, until - now))  # only a retry's backoff (or the stop poll) is waited for
            return
        try:
            outcome = run.events.get(timeout=max(0.001, until - now))
        except queue.Empty:
            return
        self._complete(run, outcome)
        while True:  # whatever else has finished meanwhile
            try:
                self._complete(run, run.events.get_nowait())
            except queue.Empty:
                return

    def _check_timeouts(self, run: _Run, now: float) -> None:
        for name, r in list(run.running.items()):
            if r.deadline is None or now < r.deadline or r.kill_reason:
                continue
            timeout = run.pipeline.step(name).timeout_s
            r.kill_reason = f"step {name!r} exceeded its timeout of {timeout:g}s and was killed"
            self._kill(run, name, r)

    def _kill(self, run: _Run, name: str, r: _Running) -> None:
        if r.handle is not None:
            r.handle.kill()  # its outcome arrives when the process has ended
        else:  # a thread cannot be killed: the step ends now, its late answer is ignored
            run.events.put(StepOutcome(name, r.attempt, False, message=r.kill_reason))

    def _stop_all(self, run: _Run) -> None:
        run.stopping = True
        for name, r in run.running.items():
            r.kill_reason = r.kill_reason or "stopped"
            before = run.rows[name]
            run.rows[name] = self.store.put_step(before, replace(before, status=StepStatus.STOPPING))
            self._kill(run, name, r)

    def _finish(self, run: _Run) -> RunResult:
        plan = schedule(run.pipeline.dag, run.nodes, now=self._clock(), max_parallel=1, stopping=run.stopping)
        if plan.failed:
            status, reason = RunStatus.FAILED, run.failure
        elif plan.stopped or run.stopping:
            status, reason = RunStatus.STOPPED, "stopped"
        else:
            status, reason = RunStatus.SUCCEEDED, ""
        final = self.store.finish(run.run_id, status, reason)
        return RunResult(run.run_id, run.row.arn, final, reason, self.store.steps(run.run_id))

    # ---- starting a step -------------------------------------------------------------------------------------

    def _lookup(self, run: _Run) -> Callable[[Get], Any]:
        def lookup(ref: Get) -> Any:
            parts = ref.parts
            if parts[0] == "Parameters":
                return run.params[parts[1]]
            if parts[0] == "Execution":
                return {
                    "PipelineExecutionId": run.run_id,
                    "PipelineExecutionArn": run.row.arn,
                    "PipelineName": run.pipeline.name,
                    "StartDateTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(run.row.created)),
                }[parts[1]]
            node: Any = run.values.get(parts[1], {})
            for i, part in enumerate(parts[2:], start=2):
                if not isinstance(node, Mapping) or part not in node:
                    have = sorted(node) if isinstance(node, Mapping) else []
                    raise PipelineError(
                        f"reference {ref.path!r}: step {parts[1]!r} produced no {'.'.join(parts[2 : i + 1])!r}"
                        + (f"; it has {have}" if have else "")
                    )
                node = node[part]
            return node

        return lookup

    def _key_lookup(self, run: _Run, lookup: Callable[[Get], Any]) -> Callable[[Get], Any]:
        """Like ``lookup``, but an upstream artifact counts by its content hash, not its run-specific URI."""

        def key_lookup(ref: Get) -> Any:
            parts = ref.parts
            if parts[0] == "Steps" and len(parts) == 4 and parts[2] == "Outputs":
                return {"sha256": (run.rows[parts[1]].outputs or {})[parts[3]]["sha256"]}
            if parts[0] == "Execution":
                return {"Execution": parts[1]}  # the same in every run, or no step would ever be reused
            return lookup(ref)

        return key_lookup

    def _set_row(self, run: _Run, name: str, **changes: Any) -> StepRow:
        before = run.rows.get(name)
        base = before or StepRow(run.run_id, name, str(run.pipeline.step(name).kind), StepStatus.STARTING)
        after = replace(base, **changes)
        run.rows[name] = self.store.put_step(before, after)
        return after

    def _launch(self, run: _Run, name: str) -> None:
        step = run.pipeline.step(name)
        before = run.rows.get(name)
        retrying = before is not None and before.status == StepStatus.EXECUTING and name in run.retries
        attempt = (before.attempts if before else 0) + 1
        if not retrying:
            self._set_row(
                run,
                name,
                status=StepStatus.STARTING,
                attempts=attempt,
                started=self._wall(),
                ended=None,
                failure_reason="",
            )
        try:
            self._start(run, step, attempt)
        except (PipelineError, StepFailure, OSError) as exc:
            self._fail(run, name, getattr(exc, "message", None) or str(exc))

    def _start(self, run: _Run, step: Step, attempt: int) -> None:
        lookup = self._lookup(run)
        name = step.name
        if step.kind is StepKind.CONDITION:
            outcome = all(evaluate(c, lookup) for c in step.conditions)
            run.nodes[name] = Node(NodeState.SUCCEEDED, outcome=outcome)
            run.values[name] = {"Outcome": outcome}
            self._set_row(
                run,
                name,
                status=StepStatus.SUCCEEDED,
                ended=self._wall(),
                properties=run.values[name],
                metadata={"Condition": {"Outcome": str(outcome)}},
            )
            return
        if step.kind is StepKind.FAIL:
            message = str(resolve(step.arguments.get("ErrorMessage", ""), lookup)) or f"Fail step {name!r} ran"
            self._fail(run, name, message, metadata={"Fail": {"ErrorMessage": message}})
            run.failure = message
            return
        inputs = resolve(dict(step.arguments), lookup)
        argv = [str(a) for a in resolve(list(step.command), lookup)]
        declared_reads = [str(r) for r in resolve(list(step.reads), lookup)]
        upstream = self._upstream_artifacts(run, step)
        reads = [*declared_reads, *(a["uri"] for a in upstream)]
        lineage: dict[str, Any] = {"inputs": upstream, "parameters": _literal_inputs(step, inputs)}
        key = ""
        if step.kind.cacheable:
            code = code_hash(step)
            lineage["code_hash"] = code
            for prefix in declared_reads:
                lineage["inputs"].append({"name": "reads", "uri": prefix, "sha256": self._hash_or_absent(prefix)})
            key_lookup = self._key_lookup(run, lookup)
            key_inputs = {
                "args": resolve(dict(step.arguments), key_lookup),
                "argv": resolve(list(step.command), key_lookup),
            }
            key = cache_key(
                step, code, key_inputs, [f"{r['uri']}#{r['sha256']}" for r in lineage["inputs"] if r["name"] == "reads"]
            )
            if step.cache is not None and step.cache.enabled and self._reuse(run, step, key, code):
                return
        prefix = join(run.row.artifact_root, run.pipeline.name, run.run_id, name, f"attempt-{attempt}")
        outputs = {o: join(prefix, o) for o in step.outputs}
        deadline = None if step.timeout_s is None else self._clock() + step.timeout_s
        self._set_row(
            run,
            name,
            status=StepStatus.EXECUTING,
            attempts=attempt,
            code_hash=lineage.get("code_hash", ""),
            cache_key=key,
        )
        entry = _Running(attempt, deadline, None, outputs, lineage, key)
        run.running[name] = entry
        run.nodes[name] = Node(NodeState.RUNNING)
        if step.kind in (StepKind.REGISTER, StepKind.DEPLOY):
            self._call_control_plane(run, step, attempt, inputs, deadline)
            return
        task = StepTask(
            pipeline=run.pipeline.name,
            run_id=run.run_id,
            step=name,
            kind=step.kind,
            attempt=attempt,
            source=run.row.source,
            inputs=inputs,
            outputs=outputs,
            reads=tuple(reads),
            write_prefix=prefix,
            workdir=self.home / "pipelines" / run.run_id / name / f"attempt-{attempt}",
            home=str(self.home),
            parameters=run.params,
            command=tuple(argv),
        )
        entry.handle = self.engine.start(task, run.events.put)

    def _upstream_artifacts(self, run: _Run, step: Step) -> list[dict[str, Any]]:
        """The upstream outputs ``step`` refers to (its implicit read prefixes), with their content hashes."""
        found: dict[str, dict[str, Any]] = {}
        values = [*step.arguments.items(), *(("command", c) for c in step.command), *(("reads", r) for r in step.reads)]
        for arg, value in values:
            for ref in references(value):
                parts = ref.parts
                if parts[0] == "Steps" and len(parts) == 4 and parts[2] == "Outputs":
                    out = (run.rows[parts[1]].outputs or {})[parts[3]]
                    found.setdefault(
                        ref.path, {"name": arg, "ref": ref.path, "uri": out["uri"], "sha256": out["sha256"]}
                    )
        return list(found.values())

    def _hash_or_absent(self, uri: str) -> str:
        try:
            return tree_hash(self.storage, uri)[0]
        except FileNotFoundError:
            return "absent"

    def _reuse(self, run: _Run, step: Step, key: str, code: str) -> bool:
        assert step.cache is not None
        expire = step.cache.expire_after_s
        since = None if expire is None else self._wall() - expire
        hit = self.store.repo.cache_hit(run.pipeline.name, step.name, key, StepStatus.SUCCEEDED, since)
        if hit is None:
            return False
        source_run = hit.cache_source_run or hit.run_id
        run.values[step.name] = dict(hit.properties or {})
        run.nodes[step.name] = Node(NodeState.SUCCEEDED)
        self._set_row(
            run,
            step.name,
            status=StepStatus.SUCCEEDED,
            ended=self._wall(),
            code_hash=code,
            cache_key=key,
            cache_source_run=source_run,
            outputs=hit.outputs,
            properties=hit.properties,
            metadata={"CacheHitResult": {"SourcePipelineExecutionArn": run_arn(run.pipeline.name, source_run)}},
        )
        return True

    def _call_control_plane(
        self, run: _Run, step: Step, attempt: int, inputs: dict[str, Any], deadline: float | None
    ) -> None:
        control = self.control
        if control is None:
            raise StepFailure(
                f"{step.kind} step {step.name!r} calls the control plane: run the pipeline with --url of a servekit up"
            )

        def work() -> None:
            try:
                sm = control.sagemaker()
                if step.kind is StepKind.REGISTER:
                    props = actions.register(sm, inputs, run_arn=run.row.arn, run_id=run.run_id, step=step.name)
                else:
                    props = actions.deploy(sm, inputs, run_id=run.run_id, deadline=deadline, clock=self._clock)
                run.events.put(StepOutcome(step.name, attempt, True, properties=props))
            except Exception as exc:  # every failure is the step's outcome, typed for retries
                f = actions.failure(exc)
                run.events.put(StepOutcome(step.name, attempt, False, message=f.message, error_types=f.error_types))

        threading.Thread(target=work, daemon=True, name=f"servekit-step-{step.name}").start()

    # ---- a step ends -----------------------------------------------------------------------------------------

    def _complete(self, run: _Run, outcome: StepOutcome) -> None:
        entry = run.running.get(outcome.step)
        if entry is None or entry.attempt != outcome.attempt:
            return  # an abandoned attempt's late answer
        del run.running[outcome.step]
        name = outcome.step
        step = run.pipeline.step(name)
        if entry.kill_reason == "stopped":
            run.nodes[name] = Node(NodeState.STOPPED)
            self._set_row(run, name, status=StepStatus.STOPPED, ended=self._wall(), failure_reason="stopped")
            return
        if entry.kill_reason:
            self._fail(run, name, entry.kill_reason)
            return
        if not outcome.ok:
            self._failed_attempt(run, step, entry, outcome)
            return
        try:
            outputs = self._record_artifacts(run, step, entry)
        except StepFailure as exc:
            self._fail(run, name, exc.message)
            return
        values: dict[str, Any] = dict(outcome.properties) if step.kind in (StepKind.REGISTER, StepKind.DEPLOY) else {}
        if step.kind is StepKind.TRANSFORM:
            values.update(outcome.properties)
        values["Outputs"] = {o: v["uri"] for o, v in outputs.items()}
        if step.kind.runs_code:
            values["Properties"] = dict(outcome.properties)
        if step.kind is StepKind.EVALUATION:
            values["Metrics"] = dict(outcome.metrics)
        run.values[name] = values
        run.nodes[name] = Node(NodeState.SUCCEEDED)
        metadata = {"RegisterModel": {"Arn": values["ModelPackageArn"]}} if "ModelPackageArn" in values else {}
        self._set_row(
            run,
            name,
            status=StepStatus.SUCCEEDED,
            ended=self._wall(),
            outputs=outputs,
            properties=values,
            metadata=metadata,
            failure_reason="",
        )

    def _failed_attempt(self, run: _Run, step: Step, entry: _Running, outcome: StepOutcome) -> None:
        done = run.retries.get(step.name, 0)
        policy = next((p for p in step.retry if p.matches(outcome.error_types)), None)
        if policy is None or done >= policy.max_attempts:
            tail = f" (after {done} retries)" if done else ""
            self._fail(run, step.name, outcome.message + tail)
            return
        delay = policy.delay(done + 1)
        run.retries[step.name] = done + 1
        run.nodes[step.name] = Node(NodeState.PENDING, not_before=self._clock() + delay)
        self._set_row(
            run, step.name, failure_reason=f"attempt {entry.attempt} failed: {outcome.message}; retrying in {delay:g}s"
        )

    def _fail(self, run: _Run, name: str, message: str, metadata: Mapping[str, Any] | None = None) -> None:
        run.running.pop(name, None)
        run.nodes[name] = Node(NodeState.FAILED)
        run.failure = run.failure or f"step {name!r} failed: {message}"
        changes: dict[str, Any] = {"status": StepStatus.FAILED, "ended": self._wall(), "failure_reason": message}
        if metadata is not None:
            changes["metadata"] = dict(metadata)
        self._set_row(run, name, **changes)

    def _record_artifacts(self, run: _Run, step: Step, entry: _Running) -> dict[str, dict[str, str]]:
        """Hash every declared output and record its lineage; an output the step left empty fails it."""
        out: dict[str, dict[str, str]] = {}
        hashed = []
        for name, uri in entry.outputs.items():
            try:
                digest, files = tree_hash(self.storage, uri)
            except FileNotFoundError:
                files = []
            if not files:
                raise StepFailure(f"step {step.name!r} declared output {name!r} but wrote nothing under {uri}")
            out[name] = {"uri": uri, "sha256": digest}
            hashed.append((name, uri, digest, files))
        for name, uri, digest, files in hashed:
            self.store.repo.add_artifact(
                ArtifactRow(
                    uri=uri,
                    sha256=digest,
                    pipeline=run.pipeline.name,
                    run_id=run.run_id,
                    step=step.name,
                    attempt=entry.attempt,
                    output=name,
                    code_hash=entry.lineage.get("code_hash", ""),
                    parameters=entry.lineage.get("parameters", {}),
                    inputs=entry.lineage.get("inputs", []),
                ),
                files,
            )
        return out


def _literal_inputs(step: Step, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved arguments that are not upstream artifacts (parameters and literals): lineage's parameters."""
    out = {}
    for arg, value in step.arguments.items():
        if not any(r.parts[0] == "Steps" and "Outputs" in r.parts for r in references(value)):
            out[arg] = inputs[arg]
    return out
