"""Per step, the AWS IAM policy document that grants what the step's storage handle allows and nothing more:
``s3:GetObject`` on its read prefixes (declared reads, the upstream outputs it references, its own output prefix,
which the overwrite check reads), ``s3:PutObject`` on its own ``<root>/<pipeline>/*/<step>/*`` prefix. Register
and deploy steps get the SageMaker actions they call instead. Run ids are not known in advance, so the run
segment is a wildcard. A step that lists folders needs ``s3:ListBucket`` too, which is not granted here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servekit.services.pipelines.definition.pipeline import Pipeline
from servekit.services.pipelines.definition.refs import Get, references, resolve
from servekit.services.pipelines.definition.steps import Step, StepKind
from servekit.services.pipelines.errors import PipelineError
from servekit.storage import join

VERSION = "2012-10-17"
_SAGEMAKER_ACTIONS = {
    StepKind.REGISTER: [
        "sagemaker:CreateModelPackage",
        "sagemaker:CreateModelPackageGroup",
        "sagemaker:DescribeModelPackage",
        "sagemaker:DescribeModelPackageGroup",
    ],
    StepKind.DEPLOY: [
        "sagemaker:CreateModel",
        "sagemaker:CreateEndpointConfig",
        "sagemaker:CreateEndpoint",
        "sagemaker:UpdateEndpoint",
        "sagemaker:DescribeEndpoint",
    ],
}


@dataclass
class StepPolicy:
    step: str
    document: dict[str, Any] | None  # None: the step touches no storage and calls nothing
    notes: list[str] = field(default_factory=list)  # prefixes left out (not s3://), and why


def s3_arn(uri: str) -> str:
    """``s3://bucket/key`` as ``arn:aws:s3:::bucket/key``."""
    if not uri.startswith("s3://"):
        raise PipelineError(f"{uri} is not an s3:// URI")
    return "arn:aws:s3:::" + uri.removeprefix("s3://").rstrip("/")


def _prefix_resources(uri: str) -> list[str]:
    arn = s3_arn(uri)
    return [arn, arn + "/*"]  # the object itself (a file prefix) and everything below it (a folder)


def policies(pipeline: Pipeline, artifact_root: str, parameters: Mapping[str, Any] | None = None) -> list[StepPolicy]:
    params = pipeline.bind(parameters or {})
    root = artifact_root.rstrip("/")

    def step_prefix(name: str) -> str:
        return join(root, pipeline.name, "*", name)

    def lookup(ref: Get) -> Any:
        parts = ref.parts
        if parts[0] == "Parameters":
            return params[parts[1]]
        if parts[0] == "Steps" and len(parts) == 4 and parts[2] == "Outputs":
            return join(step_prefix(parts[1]), "*", parts[3])
        raise PipelineError(f"{ref.path} is known only when the run has started; a read prefix cannot use it")

    out = []
    for step in pipeline.steps:
        out.append(_policy(step, step_prefix(step.name), lookup))
    return out


def _policy(step: Step, own: str, lookup: Any) -> StepPolicy:
    result = StepPolicy(step.name, None)
    if step.kind in _SAGEMAKER_ACTIONS:
        result.document = {
            "Version": VERSION,
            "Statement": [
                {"Sid": "ControlPlane", "Effect": "Allow", "Action": _SAGEMAKER_ACTIONS[step.kind], "Resource": "*"}
            ],
        }
        return result
    if not (step.kind.runs_code or step.kind is StepKind.TRANSFORM):
        return result  # conditions and fails run inside the orchestrator and touch nothing
    reads: list[str] = [str(v) for v in resolve(list(step.reads), lookup)]
    for value in [*step.arguments.values(), *step.command]:
        for ref in references(value):
            parts = ref.parts
            if parts[0] == "Steps" and len(parts) == 4 and parts[2] == "Outputs":
                reads.append(str(lookup(ref)))
    if step.kind is StepKind.TRANSFORM:
        for value in (step.arguments.get("ModelName"), _transform_input(step)):
            resolved = resolve(value, lookup)
            if isinstance(resolved, str):
                reads.append(resolved)
    reads.append(own)
    resources: list[str] = []
    for uri in dict.fromkeys(reads):
        if uri.startswith("s3://"):
            resources += _prefix_resources(uri)
        else:
            result.notes.append(f"{uri} is not an s3:// prefix: give it as s3:// to run under IAM")
    statements: list[dict[str, Any]] = [
        {"Sid": "ReadInputs", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": resources}
    ]
    if own.startswith("s3://"):
        statements.append(
            {"Sid": "WriteOwnOutputs", "Effect": "Allow", "Action": ["s3:PutObject"], "Resource": [s3_arn(own) + "/*"]}
        )
    if not resources:
        statements = statements[1:]
    result.document = {"Version": VERSION, "Statement": statements} if statements else None
    return result


def _transform_input(step: Step) -> Any:
    source = (step.arguments.get("TransformInput") or {}).get("DataSource") or {}
    return (source.get("S3DataSource") or {}).get("S3Uri") if isinstance(source, Mapping) else None
