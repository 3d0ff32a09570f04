"""Building pipelines in Python: decorators that turn functions into steps, and constructors for the other kinds.

    @processing(inputs={"rows": Param("rows")}, outputs=["data"])
    def make_data(ctx: StepContext, rows: int) -> None: ...

    @training(inputs={"data": make_data.output("data")}, outputs=["model"], cache=True, timeout_s=600)
    def train(ctx: StepContext, data: str) -> dict[str, float]: ...

A decorated function becomes a :class:`~servekit.services.pipelines.definition.steps.Step` called with ``(ctx,
**inputs)``
in a process of its own; what it returns (a mapping of JSON values) is the step's ``Properties``. An evaluation
function returns its metrics, which are written to its ``metrics`` output as ``evaluation.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from servekit.services.pipelines.definition.conditions import Condition
from servekit.services.pipelines.definition.steps import (
    METRICS_OUTPUT,
    TRANSFORM_OUTPUT,
    CacheConfig,
    RetryPolicy,
    Step,
    StepKind,
)
from servekit.services.pipelines.errors import PipelineError

StepRef = Step | str


def _cache(cache: bool | CacheConfig | None) -> CacheConfig | None:
    if cache is None or cache is False:
        return None
    return CacheConfig() if cache is True else cache


def _names(steps: Iterable[StepRef]) -> tuple[str, ...]:
    return tuple(s.name if isinstance(s, Step) else str(s) for s in steps)


def _code_step(
    kind: StepKind,
    name: str | None,
    inputs: Mapping[str, Any] | None,
    outputs: Sequence[str],
    reads: Sequence[Any],
    timeout_s: float | None,
    retry: Sequence[RetryPolicy],
    cache: bool | CacheConfig | None,
    code: Sequence[str],
    depends_on: Iterable[StepRef],
) -> Callable[[Callable[..., Any]], Step]:
    outs = tuple(outputs)
    if kind is StepKind.EVALUATION and METRICS_OUTPUT not in outs:
        outs = (METRICS_OUTPUT, *outs)

    def wrap(fn: Callable[..., Any]) -> Step:
        if not callable(fn):
            raise PipelineError(f"@{kind.lower()} decorates a function, not {fn!r}")
        return Step(
            name=name or fn.__name__.replace("_", "-"),
            kind=kind,
            arguments=dict(inputs or {}),
            outputs=outs,
            depends_on=_names(depends_on),
            reads=tuple(reads),
            timeout_s=timeout_s,
            retry=tuple(retry),
            cache=_cache(cache),
            function=fn,
            function_path=f"{fn.__module__}:{fn.__qualname__}",
            code=tuple(code),
        )

    return wrap


def _decorator(kind: StepKind) -> Callable[..., Callable[[Callable[..., Any]], Step]]:
    def decorator(
        *,
        name: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        outputs: Sequence[str] = (),
        reads: Sequence[Any] = (),
        timeout_s: float | None = None,
        retry: Sequence[RetryPolicy] = (),
        cache: bool | CacheConfig | None = None,
        code: Sequence[str] = (),
        depends_on: Iterable[StepRef] = (),
    ) -> Callable[[Callable[..., Any]], Step]:
        return _code_step(kind, name, inputs, outputs, reads, timeout_s, retry, cache, code, depends_on)

    decorator.__name__ = kind.lower()
    decorator.__doc__ = f"Make the decorated function a {kind} step (see the module's docstring)."
    return decorator


processing = _decorator(StepKind.PROCESSING)
training = _decorator(StepKind.TRAINING)
evaluation = _decorator(StepKind.EVALUATION)
step = processing  # the plain spelling


def command(
    name: str,
    argv: Sequence[Any],
    *,
    kind: StepKind = StepKind.PROCESSING,
    outputs: Sequence[str] = (),
    reads: Sequence[Any] = (),
    timeout_s: float | None = None,
    retry: Sequence[RetryPolicy] = (),
    cache: bool | CacheConfig | None = None,
    code: Sequence[str] = (),
    depends_on: Iterable[StepRef] = (),
) -> Step:
    """A step that runs ``argv`` (items may be references). It finds each output folder in
    ``$SERVEKIT_OUTPUT_<NAME>`` (upper case, ``-`` as ``_``) and may write properties as JSON to
    ``$SERVEKIT_PROPERTIES``; an evaluation command writes ``evaluation.json`` into ``$SERVEKIT_OUTPUT_METRICS``."""
    outs = tuple(outputs)
    if kind is StepKind.EVALUATION and METRICS_OUTPUT not in outs:
        outs = (METRICS_OUTPUT, *outs)
    if not argv:
        raise PipelineError(f"command step {name!r} has an empty command")
    return Step(
        name=name,
        kind=kind,
        outputs=outs,
        command=tuple(argv),
        depends_on=_names(depends_on),
        reads=tuple(reads),
        timeout_s=timeout_s,
        retry=tuple(retry),
        cache=_cache(cache),
        code=tuple(code),
    )


def condition(
    name: str,
    conditions: Sequence[Condition],
    if_steps: Iterable[StepRef] = (),
    else_steps: Iterable[StepRef] = (),
) -> Step:
    """Runs ``if_steps`` when every condition holds, else ``else_steps``; the other branch never runs."""
    if not conditions:
        raise PipelineError(f"condition step {name!r} has no conditions")
    return Step(
        name=name,
        kind=StepKind.CONDITION,
        conditions=tuple(conditions),
        if_steps=_names(if_steps),
        else_steps=_names(else_steps),
    )


def fail(name: str, message: Any) -> Step:
    """Ends the run as Failed with ``message`` (text or a reference / Join)."""
    return Step(name=name, kind=StepKind.FAIL, arguments={"ErrorMessage": message})


def register_model(
    name: str,
    *,
    group: Any,
    model_data: Any,
    approval_status: Any = "PendingManualApproval",
    metrics: Any = None,
    description: Any = None,
    image: str = "servekit",
    customer_metadata: Mapping[str, Any] | None = None,
    retry: Sequence[RetryPolicy] = (),
    timeout_s: float | None = None,
) -> Step:
    """CreateModelPackage in ``group`` (created when missing) on the control plane: ``model_data`` as the
    container's ModelDataUrl, ``metrics`` (an evaluation's ``metrics`` output) as ModelMetrics, the run's ARN as
    MetadataProperties.GeneratedBy."""
    args: dict[str, Any] = {
        "ModelPackageGroupName": group,
        "ModelDataUrl": model_data,
        "ModelApprovalStatus": approval_status,
        "Image": image,
    }
    if metrics is not None:
        args["ModelMetrics"] = metrics
    if description is not None:
        args["ModelPackageDescription"] = description
    if customer_metadata:
        args["CustomerMetadataProperties"] = dict(customer_metadata)
    return Step(name=name, kind=StepKind.REGISTER, arguments=args, retry=tuple(retry), timeout_s=timeout_s)


def deploy(
    name: str,
    *,
    endpoint: Any,
    model_package_arn: Any = None,
    model_data: Any = None,
    instance_type: Any = "ml.m5.large",
    instance_count: Any = 1,
    deployment_config: Mapping[str, Any] | None = None,
    retry: Sequence[RetryPolicy] = (),
    timeout_s: float | None = None,
) -> Step:
    """Create ``endpoint`` or update it (UpdateEndpoint, with ``deployment_config``) to a model made from
    ``model_package_arn`` (CreateModel with ModelPackageName) or ``model_data``; done when it is InService."""
    if (model_package_arn is None) == (model_data is None):
        raise PipelineError(f"deploy step {name!r} takes either model_package_arn or model_data")
    args: dict[str, Any] = {
        "EndpointName": endpoint,
        "InstanceType": instance_type,
        "InitialInstanceCount": instance_count,
    }
    args["ModelPackageName" if model_package_arn is not None else "ModelDataUrl"] = (
        model_package_arn if model_package_arn is not None else model_data
    )
    if deployment_config:
        args["DeploymentConfig"] = dict(deployment_config)
    return Step(name=name, kind=StepKind.DEPLOY, arguments=args, retry=tuple(retry), timeout_s=timeout_s)


def transform(
    name: str,
    request: Mapping[str, Any],
    *,
    reads: Sequence[Any] = (),
    timeout_s: float | None = None,
    retry: Sequence[RetryPolicy] = (),
    cache: bool | CacheConfig | None = None,
    depends_on: Iterable[StepRef] = (),
) -> Step:
    """A batch transform job (servekit.services.transform) from a CreateTransformJob-shaped ``request`` whose values may
    be references (``ModelName``: a model version folder, e.g. a training step's output). Its output path is the
    step's own ``output`` folder; TransformJobName defaults to ``<pipeline>-<step>-<run id>``."""
    if "TransformOutput" in request and "S3OutputPath" in (request.get("TransformOutput") or {}):
        raise PipelineError(
            f"transform step {name!r}: S3OutputPath is the step's own output folder; leave it out of the request"
        )
    return Step(
        name=name,
        kind=StepKind.TRANSFORM,
        arguments=dict(request),
        outputs=(TRANSFORM_OUTPUT,),
        reads=tuple(reads),
        timeout_s=timeout_s,
        retry=tuple(retry),
        cache=_cache(cache),
        depends_on=_names(depends_on),
    )
