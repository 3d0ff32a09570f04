"""One attempt of one step of a SageMaker pipeline execution: its arguments evaluated in the execution's context,
the cache consulted, the plane's operation called, the job followed to its end. Condition and fail steps call
nothing and end at once (:func:`decide_now`). Every way an attempt ends is an :class:`Outcome`, never an exception,
so the loop has one place that decides what follows (retry, fail, stop)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from servekit.aws.errors import ApiError
from servekit.services.pipelines.execution.policy import SERVICE_FAULT, cache_key, call_failure_type, job_failure_type
from servekit.services.pipelines.execution.records import Execution, Outcome
from servekit.services.pipelines.execution.services import ENDED, JOBS, RESOURCES, Call, JobKind, resource_name
from servekit.services.pipelines.runs.repo import Pipelines
from servekit.services.pipelines.runs.status import StepStatus
from servekit.services.pipelines.sagemaker import (
    Context,
    EvaluationError,
    Evaluator,
    FileReader,
    Step,
    StepType,
    execution_variables,
    outcome,
)

log = logging.getLogger(__name__)

# A step's job was created: (its kind, its name, its ARN, the cache key its arguments had)
Started = Callable[[JobKind, str, str | None, str], None]
JOB_KEY = "Job"  # a step row's Metadata entry naming the job its attempt created (not shown: not SageMaker's)
# The Execution variables a job step's own name fills.
_NAME_VARIABLES = {StepType.TRAINING: "TrainingJobName", StepType.PROCESSING: "ProcessingJobName"}


def evaluator_for(
    e: Execution, read_file: FileReader | None, now: float, step: Step | None = None, job: str = ""
) -> Evaluator:
    variables = execution_variables(
        pipeline_name=e.row.pipeline,
        pipeline_arn=e.pipeline_arn,
        execution_arn=e.row.arn,
        start=e.started_at(),
        now=datetime.fromtimestamp(now, UTC),
    )
    if step is not None and step.type in _NAME_VARIABLES and job:
        variables[_NAME_VARIABLES[step.type]] = job
    return Evaluator(Context(e.definition, e.parameters, variables, e.properties, read_file))


def decide_now(e: Execution, step: Step, attempt: int, read_file: FileReader | None, now: float) -> Outcome:
    """A condition step's outcome, or a fail step's failure with its message: no service called."""
    try:
        evaluator = evaluator_for(e, read_file, now)
        if step.type is StepType.CONDITION:
            result = outcome(step, evaluator)
            return Outcome(step.name, attempt, True, {"Outcome": result}, {"Condition": {"Outcome": str(result)}})
        message = evaluator.error_message(step) or f"Fail step {step.name!r} ran."
        return Outcome(step.name, attempt, False, metadata={"Fail": {"ErrorMessage": message}}, message=message)
    except EvaluationError as exc:
        return Outcome(step.name, attempt, False, message=exc.message)


def failure_of(exc: ApiError, operation: str) -> tuple[str, str | None]:
    """A failed service call as a step's FailureReason and retryable type."""
    message = f"ClientError: Failed to invoke sagemaker:{operation}. Error Details: {exc.message}"
    return message, call_failure_type(exc.code, exc.status or 400)


async def attempt_step(
    e: Execution,
    step: Step,
    attempt: int,
    *,
    call: Call,
    repo: Pipelines,
    read_file: FileReader | None,
    now: Callable[[], float],
    pause: Callable[[], Awaitable[None]],
    started: Started,
    adopted_job: str | None = None,
) -> Outcome:
    operation = ""
    try:
        kind = JOBS.get(step.type)
        if kind is not None:
            operation = kind.create
            return await _job(e, step, attempt, kind, call, repo, read_file, now, pause, started, adopted_job)
        return await _resource(e, step, attempt, call, read_file, now)
    except EvaluationError as exc:
        return Outcome(step.name, attempt, False, message=exc.message)
    except ApiError as exc:
        message, failure_type = failure_of(exc, operation or RESOURCES[step.type].create)
        return Outcome(step.name, attempt, False, message=message, failure_type=failure_type)
    except Exception as exc:  # a bug here fails the step (retryable as a service fault), never the whole loop
        log.exception("pipeline %s step %s", e.run_id, step.name)
        return Outcome(step.name, attempt, False, message=f"InternalFailure: {exc}", failure_type=SERVICE_FAULT)


async def _job(
    e: Execution,
    step: Step,
    attempt: int,
    kind: JobKind,
    call: Call,
    repo: Pipelines,
    read_file: FileReader | None,
    now: Callable[[], float],
    pause: Callable[[], Awaitable[None]],
    started: Started,
    adopted_job: str | None,
) -> Outcome:
    name = adopted_job or resource_name(e.run_id, step.name, attempt, kind.name_limit)
    key = ""
    if adopted_job is None and await _exists(call, kind, name):
        adopted_job = name  # created before a restart, its row not written: follow it
    if adopted_job is None:
        arguments = evaluator_for(e, read_file, now(), step, name).arguments(step)
        if step.cache_config is not None and step.cache_config.enabled:
            key = cache_key(step.type, arguments)
            hit = _cache_hit(e, step, key, repo, now())
            if hit is not None:
                return Outcome(step.name, attempt, True, hit[0], hit[1], cache_key=key)
        arguments[kind.name_field] = name
        created = await call(kind.create, arguments)
        started(kind, name, created.get(kind.arn_field), key)
    else:
        started(kind, name, None, key)
    while True:
        described = await call(kind.describe, {kind.name_field: name})
        status = str(described.get(kind.status_field, ""))
        if status in ENDED:
            break
        await pause()
    if step.type is StepType.TUNING:
        listed = await call("ListTrainingJobsForHyperParameterTuningJob", {"HyperParameterTuningJobName": name})
        described = {**described, "TrainingJobSummaries": listed.get("TrainingJobSummaries", [])}
    metadata = {kind.metadata_key: {"Arn": described.get(kind.arn_field)}, JOB_KEY: name}
    if status == kind.succeeded:
        return Outcome(step.name, attempt, True, described, metadata, cache_key=key)
    if status == "Stopped":
        return Outcome(step.name, attempt, False, metadata=metadata, stopped=True)
    reason = str(described.get("FailureReason") or f"the job ended {status}")
    message = f"Job {name} failed: {reason}"
    return Outcome(step.name, attempt, False, metadata=metadata, message=message, failure_type=job_failure_type(reason))


async def _exists(call: Call, kind: JobKind, name: str) -> bool:
    try:
        await call(kind.describe, {kind.name_field: name})
    except ApiError as exc:
        if exc.code in ("ResourceNotFound", "ValidationException"):
            return False
        raise
    return True


def _cache_hit(
    e: Execution, step: Step, key: str, repo: Pipelines, now: float
) -> tuple[Mapping[str, Any], dict[str, Any]] | None:
    """The properties and metadata of the latest succeeded run of this step with the same key (within its
    ExpireAfter), from any execution of the pipeline."""
    assert step.cache_config is not None
    expire = step.cache_config.expire_after_seconds
    since = None if expire is None else now - expire
    hit = repo.cache_hit(e.row.pipeline, step.name, key, StepStatus.SUCCEEDED, since)
    if hit is None or hit.run_id == e.run_id:
        return None
    source = repo.get_run(hit.cache_source_run or hit.run_id)
    metadata = {k: v for k, v in (hit.metadata or {}).items() if k != "CacheHitResult"}
    metadata["CacheHitResult"] = {"SourcePipelineExecutionArn": source.arn if source is not None else hit.run_id}
    return dict(hit.properties or {}), metadata


async def _ensure_group(call: Call, group: str) -> None:
    """A RegisterModel step creates its model package group when there is none yet, as SageMaker's does."""
    try:
        await call("DescribeModelPackageGroup", {"ModelPackageGroupName": group})
    except ApiError as exc:
        if exc.code not in ("ValidationException", "ResourceNotFound"):
            raise
        await call("CreateModelPackageGroup", {"ModelPackageGroupName": group})


async def _resource(
    e: Execution, step: Step, attempt: int, call: Call, read_file: FileReader | None, now: Callable[[], float]
) -> Outcome:
    kind = RESOURCES[step.type]
    arguments = evaluator_for(e, read_file, now(), step).arguments(step)
    token = resource_name(e.run_id, step.name, attempt)
    if kind.name_field is not None:
        arguments[kind.name_field] = token
    elif step.type is StepType.REGISTER_MODEL:
        # an attempt run again after a restart registers one version, not two (ClientToken: 36 characters at most)
        arguments.setdefault("ClientToken", hashlib.sha256(token.encode()).hexdigest()[:36])
        # the package's lineage: the execution that registered it (servekit lineage and the console follow it)
        metadata = arguments.setdefault("MetadataProperties", {})
        if isinstance(metadata, dict):
            metadata.setdefault("GeneratedBy", e.row.arn)
        group = arguments.get("ModelPackageGroupName")
        if group:
            await _ensure_group(call, str(group))
    created = await call(kind.create, arguments)
    arn = str(created.get(kind.arn_field, ""))
    ref = token if kind.name_field is not None else arn
    described = await call(kind.describe, {kind.describe_field: ref})
    return Outcome(step.name, attempt, True, described, {kind.metadata_key: {"Arn": arn}})
