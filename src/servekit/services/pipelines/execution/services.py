"""What each step of a SageMaker pipeline calls: the plane's own operations, as SageMaker's steps call the
services they stand for. A Processing step is CreateProcessingJob then DescribeProcessingJob until the job ends,
and its properties are that Describe response; a Model step is CreateModel, a RegisterModel step
CreateModelPackage. The table below is the whole difference between the step types; the executor does the rest.

Calls go through :class:`ServiceCall`: the operation's handler, its parameters checked and converted against
botocore's input shape first, exactly as a request on the wire would be (an argument the SDK would have sent
wrong fails the step with the service's own ValidationException)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from servekit.aws.errors import ApiError
from servekit.aws.front import Handler
from servekit.aws.models import ServiceSpec
from servekit.aws.validate import parse_input
from servekit.services.pipelines.sagemaker.model import StepType

NAME_LIMIT = 63  # SageMaker's job and model names: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}
# One call of the plane's SageMaker operations: operation name, parameters -> result (before serialization).
Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class ServiceCall:
    """The plane's SageMaker handlers, callable by operation name with the wire's input checks."""

    def __init__(self, spec: ServiceSpec, handlers: Callable[[], Mapping[str, Handler]]) -> None:
        self._spec = spec
        self._handlers = handlers  # read at call time: the table is complete only once the plane is built

    async def __call__(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        op = self._spec.operation(operation)
        handler = self._handlers().get(operation)
        if op is None or handler is None:
            raise ApiError("UnknownOperationException", f"servekit does not serve {operation}", 400)
        return await handler(parse_input(op.input_shape, params, self._spec.validation_code))


@dataclass(frozen=True, slots=True)
class JobKind:
    """A step type that starts a job and waits for it."""

    create: str  # the Create* operation
    name_field: str  # the job's name in the Create and Describe requests
    describe: str
    status_field: str
    arn_field: str
    stop: str
    metadata_key: str  # ListPipelineExecutionSteps' Metadata member
    succeeded: str = "Completed"
    name_limit: int = NAME_LIMIT


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """A step type that creates a resource at once (a model, a model package) and describes it."""

    create: str
    name_field: str | None  # the name the step gives it (None: the service names it, CreateModelPackage)
    describe: str
    describe_field: str  # what Describe takes: the name, or the ARN Create returned
    arn_field: str
    metadata_key: str


JOBS: dict[StepType, JobKind] = {
    StepType.PROCESSING: JobKind(
        "CreateProcessingJob",
        "ProcessingJobName",
        "DescribeProcessingJob",
        "ProcessingJobStatus",
        "ProcessingJobArn",
        "StopProcessingJob",
        "ProcessingJob",
    ),
    StepType.TRAINING: JobKind(
        "CreateTrainingJob",
        "TrainingJobName",
        "DescribeTrainingJob",
        "TrainingJobStatus",
        "TrainingJobArn",
        "StopTrainingJob",
        "TrainingJob",
    ),
    StepType.TRANSFORM: JobKind(
        "CreateTransformJob",
        "TransformJobName",
        "DescribeTransformJob",
        "TransformJobStatus",
        "TransformJobArn",
        "StopTransformJob",
        "TransformJob",
    ),
    StepType.TUNING: JobKind(
        "CreateHyperParameterTuningJob",
        "HyperParameterTuningJobName",
        "DescribeHyperParameterTuningJob",
        "HyperParameterTuningJobStatus",
        "HyperParameterTuningJobArn",
        "StopHyperParameterTuningJob",
        "TuningJob",
        name_limit=32,
    ),
}
RESOURCES: dict[StepType, ResourceKind] = {
    StepType.MODEL: ResourceKind("CreateModel", "ModelName", "DescribeModel", "ModelName", "ModelArn", "Model"),
    StepType.REGISTER_MODEL: ResourceKind(
        "CreateModelPackage",
        None,
        "DescribeModelPackage",
        "ModelPackageName",
        "ModelPackageArn",
        "RegisterModel",
    ),
}
# A job's statuses once it has ended; anything else is still running.
ENDED = frozenset({"Completed", "Failed", "Stopped"})

_UNSAFE = re.compile(r"[^a-zA-Z0-9-]+")


def resource_name(execution_id: str, step: str, attempt: int, limit: int = NAME_LIMIT) -> str:
    """The name a step gives the job or model it creates: ``pipelines-<execution>-<step>-<hash>`` as SageMaker's
    look, deterministic (a restarted plane finds the job an attempt created) and within the 63-character limit;
    lower-case, so the name at the end of the job's ARN (ARNs are lower-cased) names it too. Tuning jobs' names
    have 32 characters at most: theirs drop the ``pipelines-``."""
    digest = hashlib.sha256(f"{execution_id}\0{step}\0{attempt}".encode()).hexdigest()[:8]
    head = f"pipelines-{execution_id}-" if limit >= NAME_LIMIT else f"{execution_id}-"
    room = limit - len(head) - len(digest) - 1
    readable = _UNSAFE.sub("-", step).strip("-")[: max(room, 0)].strip("-").lower()
    return f"{head}{readable}-{digest}" if readable else f"{head}{digest}"
