"""The executor of SageMaker pipeline definitions against a fake SageMaker (jobs end as each test scripts) on a
manual clock: retries by RetryPolicies with their backoff, what is never retried, the parallelism limit, a cache
hit across executions, an evaluation error failing its step, and an execution adopted from a plane that died."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.aws.errors import ApiError
from servekit.services.database import StateDB
from servekit.services.pipelines.execution.executor import Executor
from servekit.services.pipelines.execution.policy import CAPACITY_ERROR, JOB_INTERNAL_ERROR, cache_key, retry
from servekit.services.pipelines.execution.records import SOURCE
from servekit.services.pipelines.execution.services import resource_name
from servekit.services.pipelines.runs.repo import StepRow
from servekit.services.pipelines.runs.status import RunStatus, StepStatus
from servekit.services.pipelines.sagemaker.model import RetryPolicy, StepType

PIPELINE_ARN = "arn:aws:sagemaker:us-east-1:000000000000:pipeline/p"
DEAD_PID = 2**22 + 12345  # above Linux's pid_max: no process has it


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def wait(self, event: asyncio.Event, timeout: float | None) -> None:
        """The executor's wait: an event that is set returns at once; otherwise time jumps to the timeout."""
        if event.is_set():
            return
        if timeout is None:
            await event.wait()
        else:
            self.now += timeout


class FakeSageMaker:
    """Processing jobs that end at their first Describe with the status the test scripted for that attempt."""

    def __init__(self) -> None:
        self.script: dict[str, list[tuple[str, str]]] = {}  # step -> [(status, FailureReason)] per attempt
        self.create_errors: list[ApiError] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.running = 0
        self.most_running = 0

    async def __call__(self, op: str, p: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(op)
        await asyncio.sleep(0)
        if op == "CreateProcessingJob":
            if self.create_errors:
                raise self.create_errors.pop(0)
            name = p["ProcessingJobName"]
            step = name.split("-")[2].upper()
            n = sum(1 for j in self.jobs.values() if j["step"] == step)
            script = self.script.get(step, [])
            status, reason = script[n] if n < len(script) else ("Completed", "")
            self.jobs[name] = {"step": step, "status": status, "reason": reason, "described": 0, "args": p}
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            return {"ProcessingJobArn": f"arn:aws:sagemaker:us-east-1:0:processing-job/{name}"}
        if op == "DescribeProcessingJob":
            name = p["ProcessingJobName"]
            if name not in self.jobs:
                raise ApiError("ValidationException", f"Could not find requested job with name {name}")
            job = self.jobs[name]
            job["described"] += 1
            if job["described"] < 3:  # runs for a couple of looks: parallel steps overlap
                return {"ProcessingJobStatus": "InProgress", "ProcessingJobArn": name}
            if job["described"] == 3:
                self.running -= 1
            out = {
                "ProcessingJobName": name,
                "ProcessingJobArn": f"arn:aws:sagemaker:us-east-1:0:processing-job/{name}",
                "ProcessingJobStatus": job["status"],
                "ProcessingOutputConfig": job["args"].get("ProcessingOutputConfig", {"Outputs": []}),
            }
            if job["reason"]:
                out["FailureReason"] = job["reason"]
            return out
        raise AssertionError(op)


def step(name: str, **extra: Any) -> dict[str, Any]:
    args = {
        "AppSpecification": {"ImageUri": "img"},
        "ProcessingOutputConfig": {
            "Outputs": [{"OutputName": "out", "S3Output": {"S3Uri": f"s3://b/{name}", "LocalPath": "/opt/ml/o"}}]
        },
    }
    return {"Name": name, "Type": "Processing", "Arguments": {**args, **extra.pop("Arguments", {})}, **extra}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    state = StateDB.open(tmp_path)
    yield state
    state.conn.close()


def run(
    db: StateDB, fake: FakeSageMaker, clock: Clock, steps: list[dict[str, Any]], run_id: str = "exec1", **kw: Any
) -> tuple[str, dict[str, StepRow]]:
    async def go() -> None:
        executor = Executor(
            db.pipelines, fake, clock=clock, wall=clock, pause=lambda _s: asyncio.sleep(0), wait=clock.wait
        )
        executor.begin(
            run_id=run_id,
            arn=f"{PIPELINE_ARN}/execution/{run_id}",
            pipeline="p",
            pipeline_arn=PIPELINE_ARN,
            document={"Version": "2020-12-01", "Parameters": [], "Steps": steps},
            parameters={},
            **kw,
        )
        await executor.idle()

    asyncio.run(go())
    row = db.pipelines.get_run(run_id)
    assert row is not None
    return row.status, {s.step: s for s in db.pipelines.steps(run_id)}


INTERNAL = {"ExceptionType": ["SageMaker.JOB_INTERNAL_ERROR"], "IntervalSeconds": 5, "BackoffRate": 2, "MaxAttempts": 2}


def test_a_job_the_platform_failed_is_retried_after_its_backoff_and_succeeds(db: StateDB) -> None:
    fake, clock = FakeSageMaker(), Clock()
    fake.script["A"] = [("Failed", "InternalServerError: the host went away"), ("Completed", "")]
    status, rows = run(db, fake, clock, [step("A", RetryPolicies=[INTERNAL])])
    assert status == RunStatus.SUCCEEDED
    assert rows["A"].status == StepStatus.SUCCEEDED and rows["A"].attempts == 2
    assert clock.now == 1005.0  # waited IntervalSeconds, on the manual clock
    assert fake.calls.count("CreateProcessingJob") == 2
    assert len(set(fake.jobs)) == 2  # each attempt is a job of its own


def test_retries_end_at_max_attempts_and_a_scripts_own_error_is_never_retried(db: StateDB) -> None:
    fake, clock = FakeSageMaker(), Clock()
    fake.script["A"] = [
        ("Failed", "InternalServerError: 1"),
        ("Failed", "InternalServerError: 2"),
        ("Failed", "InternalServerError: 3"),
    ]
    fake.script["B"] = [("Failed", "AlgorithmError: ValueError in train.py")]
    status, rows = run(db, fake, clock, [step("A", RetryPolicies=[INTERNAL])])
    assert status == RunStatus.FAILED
    assert rows["A"].attempts == 3  # the first try and MaxAttempts=2 retries
    assert "InternalServerError: 3" in rows["A"].failure_reason
    assert clock.now == 1000.0 + 5 + 10  # backoff: 5 s, then 5 x 2
    status, rows = run(db, fake, clock, [step("B", RetryPolicies=[INTERNAL])], run_id="exec2")
    assert status == RunStatus.FAILED
    assert rows["B"].attempts == 1
    assert rows["B"].failure_reason.endswith("AlgorithmError: ValueError in train.py")


def test_a_step_waiting_for_its_retry_ends_failed_when_another_step_fails_the_execution(db: StateDB) -> None:
    fake = FakeSageMaker()
    fake.script["A"] = [("Failed", "InternalServerError: 1"), ("Completed", "")]
    fake.script["B"] = [("Failed", "AlgorithmError: bad data")]
    slow_retry = {**INTERNAL, "IntervalSeconds": 600}
    status, rows = run(db, fake, Clock(), [step("A", RetryPolicies=[slow_retry]), step("B")])
    assert status == RunStatus.FAILED
    assert rows["A"].status == StepStatus.FAILED  # never left Executing in a finished execution
    assert rows["A"].failure_reason.endswith("InternalServerError: 1; not retried: the execution ended first")


def test_throttled_creates_are_retried_by_a_step_throttling_policy(db: StateDB) -> None:
    fake, clock = FakeSageMaker(), Clock()
    fake.create_errors = [ApiError("ThrottlingException", "Rate exceeded", 400)]
    policy = {"ExceptionType": ["Step.THROTTLING"], "IntervalSeconds": 1, "MaxAttempts": 3}
    status, rows = run(db, fake, clock, [step("A", RetryPolicies=[policy])])
    assert status == RunStatus.SUCCEEDED and rows["A"].attempts == 2
    fake2 = FakeSageMaker()
    fake2.create_errors = [ApiError("ThrottlingException", "Rate exceeded", 400)]
    status, rows = run(db, fake2, Clock(), [step("A")], run_id="exec2")  # no policy: fails with the service's words
    assert status == RunStatus.FAILED
    assert rows["A"].failure_reason == (
        "ClientError: Failed to invoke sagemaker:CreateProcessingJob. Error Details: Rate exceeded"
    )


def test_no_more_steps_run_at_once_than_the_parallelism_allows(db: StateDB) -> None:
    fake = FakeSageMaker()
    status, _ = run(db, fake, Clock(), [step("A"), step("B"), step("C")], max_parallel=3)
    assert status == RunStatus.SUCCEEDED and fake.most_running == 3
    fake = FakeSageMaker()
    status, _ = run(db, fake, Clock(), [step("A"), step("B"), step("C")], run_id="exec2", max_parallel=1)
    assert status == RunStatus.SUCCEEDED and fake.most_running == 1


def test_a_cached_step_reuses_an_earlier_executions_job_whatever_its_output_path(db: StateDB) -> None:
    fake = FakeSageMaker()
    cached = {"CacheConfig": {"Enabled": True, "ExpireAfter": "PT1H"}}
    run(db, fake, Clock(), [step("A", **cached)])
    moved = step("A", **cached)
    moved["Arguments"]["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"] = "s3://b/elsewhere"
    status, rows = run(db, fake, Clock(), [moved], run_id="exec2")
    assert status == RunStatus.SUCCEEDED
    assert fake.calls.count("CreateProcessingJob") == 1
    assert rows["A"].metadata is not None
    assert rows["A"].metadata["CacheHitResult"] == {"SourcePipelineExecutionArn": f"{PIPELINE_ARN}/execution/exec1"}
    changed = step("A", **cached, Arguments={"AppSpecification": {"ImageUri": "other"}})
    run(db, fake, Clock(), [changed], run_id="exec3")
    assert fake.calls.count("CreateProcessingJob") == 2  # what the job computes changed: no hit
    expired = Clock()
    expired.now += 7200  # past ExpireAfter
    run(db, fake, expired, [step("A", **cached)], run_id="exec4")
    assert fake.calls.count("CreateProcessingJob") == 3


def test_a_reference_that_does_not_resolve_fails_its_step_with_the_reason(db: StateDB) -> None:
    fake = FakeSageMaker()
    uses = step(
        "B", Arguments={"Environment": {"X": {"Get": "Steps.A.ProcessingOutputConfig.Outputs['nope'].S3Output.S3Uri"}}}
    )
    status, rows = run(db, fake, Clock(), [step("A"), uses])
    assert status == RunStatus.FAILED
    assert rows["B"].status == StepStatus.FAILED
    assert "nope" in rows["B"].failure_reason
    assert fake.calls.count("CreateProcessingJob") == 1


def test_an_execution_whose_plane_died_is_adopted_and_follows_the_job_it_had_started(db: StateDB) -> None:
    fake = FakeSageMaker()
    job = resource_name("exec9", "A", 1)
    fake.jobs[job] = {"step": "a", "status": "Completed", "reason": "", "described": 0, "args": {}}
    document = {"Version": "2020-12-01", "Parameters": [], "Steps": [step("A"), step("B", DependsOn=["A"])]}
    db.pipelines.create_run(
        run_id="exec9",
        pipeline="p",
        arn=f"{PIPELINE_ARN}/execution/exec9",
        source=SOURCE,
        definition={"Document": document, "MaxParallel": 50, "PipelineArn": PIPELINE_ARN},
        parameters={},
        artifact_root="",
        status=RunStatus.EXECUTING,
        owner_pid=DEAD_PID,
        owner_host="",
    )
    db.pipelines.put_step(StepRow("exec9", "A", "Processing", StepStatus.STARTING, attempts=1))
    db.pipelines.put_step(StepRow("exec9", "A", "Processing", StepStatus.EXECUTING, attempts=1, metadata={"Job": job}))
    clock = Clock()

    async def go() -> list[str]:
        executor = Executor(
            db.pipelines, fake, clock=clock, wall=clock, pause=lambda _s: asyncio.sleep(0), wait=clock.wait
        )
        adopted = executor.adopt()
        await executor.idle()
        return adopted

    assert asyncio.run(go()) == ["exec9"]
    row = db.pipelines.get_run("exec9")
    assert row is not None and row.status == RunStatus.SUCCEEDED
    rows = {s.step: s for s in db.pipelines.steps("exec9")}
    assert rows["A"].status == StepStatus.SUCCEEDED and rows["A"].attempts == 1
    assert fake.calls.count("CreateProcessingJob") == 1  # only B's: A's job was followed, not started again
    assert row.owner_pid != DEAD_PID


def test_cache_keys_and_retry_decisions() -> None:
    base = {"AppSpecification": {"ImageUri": "i"}, "ProcessingOutputConfig": {"Outputs": [1]}}
    assert cache_key(StepType.PROCESSING, base) == cache_key(
        StepType.PROCESSING, {**base, "ProcessingOutputConfig": {"Outputs": [2]}}
    )
    assert cache_key(StepType.PROCESSING, base) != cache_key(StepType.TRAINING, base)
    policy = RetryPolicy(("SageMaker.CAPACITY_ERROR",), interval_seconds=2, backoff_rate=3, expire_after_min=1)
    assert retry([policy], CAPACITY_ERROR, 0, 0.0, 0.0) is not None
    decision = retry([policy], CAPACITY_ERROR, 2, 0.0, 10.0)
    assert decision is not None and decision.delay_s == 18.0
    assert retry([policy], CAPACITY_ERROR, 2, 0.0, 50.0) is None  # 50 + 18 s is past ExpireAfterMin
    assert retry([policy], JOB_INTERNAL_ERROR, 0, 0.0, 0.0) is None  # no policy names it
    assert retry([policy], None, 0, 0.0, 0.0) is None


def test_a_selective_execution_runs_the_selected_steps_on_the_sources_results(db: StateDB) -> None:
    fake = FakeSageMaker()
    chain = [step("A"), step("B", DependsOn=["A"]), step("C", DependsOn=["B"]), step("D")]
    run(db, fake, Clock(), chain)
    created = fake.calls.count("CreateProcessingJob")

    async def go() -> None:
        executor = Executor(
            db.pipelines, fake, pause=lambda _s: asyncio.sleep(0), wait=Clock().wait, clock=Clock(), wall=Clock()
        )
        executor.begin(
            run_id="exec2",
            arn=f"{PIPELINE_ARN}/execution/exec2",
            pipeline="p",
            pipeline_arn=PIPELINE_ARN,
            document={"Version": "2020-12-01", "Parameters": [], "Steps": chain},
            parameters={},
            selective=("exec1", f"{PIPELINE_ARN}/execution/exec1", ("C",)),
        )
        await executor.idle()

    asyncio.run(go())
    rows = {s.step: s for s in db.pipelines.steps("exec2")}
    assert fake.calls.count("CreateProcessingJob") == created + 1  # only C ran
    assert set(rows) == {"A", "B", "C"}  # D: neither selected nor needed
    assert rows["B"].metadata is not None
    assert rows["B"].metadata["SelectiveExecutionResult"] == {
        "SourcePipelineExecutionArn": f"{PIPELINE_ARN}/execution/exec1"
    }
    assert rows["C"].status == StepStatus.SUCCEEDED and rows["C"].attempts == 1


def test_a_selection_whose_upstream_did_not_succeed_in_the_source_is_refused(db: StateDB) -> None:
    from servekit.services.pipelines.execution.selective import SelectionError, select
    from servekit.services.pipelines.sagemaker import load_definition

    definition, dag = load_definition(
        {"Version": "2020-12-01", "Steps": [step("A"), step("B", DependsOn=["A"]), step("C", DependsOn=["B"])]}
    )
    failed = {
        "A": StepRow("x", "A", "Processing", StepStatus.SUCCEEDED),
        "B": StepRow("x", "B", "Processing", "Failed"),
    }
    with pytest.raises(SelectionError, match="Step 'C' needs step 'B'"):
        select(definition, dag, failed, ["C"])
    assert select(definition, dag, failed, ["B", "C"]).reused == ("A",)
    with pytest.raises(SelectionError, match="'Z'"):
        select(definition, dag, failed, ["Z"])
