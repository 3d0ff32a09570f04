"""A SageMaker pipeline definition (``"Version": "2020-12-01"``, what the SDK's ``Pipeline.definition()`` writes) as
typed, frozen data. Step ``Arguments`` stay the Create* request they are (deep-frozen JSON: mappings are read-only,
lists are tuples), with expressions (``{"Get": ...}``, ``{"Std:Join": ...}``, ``{"Std:JsonGet": ...}``) where they
stand; :mod:`servekit.services.pipelines.sagemaker.evaluate` turns them into plain JSON for the service call."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

VERSION = "2020-12-01"

ParameterValue = str | int | float | bool


class ParameterType(enum.StrEnum):
    STRING = "String"
    INTEGER = "Integer"
    FLOAT = "Float"
    BOOLEAN = "Boolean"


class StepType(enum.StrEnum):
    """The step types servekit runs; each calls the service it stands for (Model = CreateModel)."""

    PROCESSING = "Processing"
    TRAINING = "Training"
    TRANSFORM = "Transform"
    MODEL = "Model"
    REGISTER_MODEL = "RegisterModel"
    TUNING = "Tuning"
    CONDITION = "Condition"
    FAIL = "Fail"


# Step types SageMaker has and servekit refuses at CreatePipeline (with the step's name).
REFUSED_STEP_TYPES = frozenset(
    {"Lambda", "Callback", "EMR", "ClarifyCheck", "QualityCheck", "AutoML", "EndpointConfig", "Endpoint"}
)
# Steps whose job a CacheConfig may reuse (SageMaker also caches the refused check, AutoML and EMR steps).
CACHEABLE = frozenset({StepType.PROCESSING, StepType.TRAINING, StepType.TRANSFORM, StepType.TUNING})
# Steps that take RetryPolicies: the job steps, CreateModel and RegisterModel.
RETRYABLE = CACHEABLE | {StepType.MODEL, StepType.REGISTER_MODEL}

EXECUTION_VARIABLES = frozenset(
    {
        "StartDateTime",
        "CurrentDateTime",
        "PipelineName",
        "PipelineArn",
        "PipelineExecutionId",
        "PipelineExecutionArn",
        "TrainingJobName",
        "ProcessingJobName",
    }
)


def freeze(value: Any) -> Any:
    """JSON made immutable: mappings become read-only views of copies, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Frozen JSON back to dicts and lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Parameter:
    name: str
    type: ParameterType
    default: ParameterValue | None = None  # None: no DefaultValue, so every execution must give one
    enum_values: tuple[str, ...] = ()  # ParameterString(enum_values=...): the only values allowed


@dataclass(frozen=True, slots=True)
class PropertyFile:
    """A JSON file a processing step writes: ``<the output's S3Uri>/<file_path>``, read by ``Std:JsonGet``."""

    name: str
    output_name: str
    file_path: str


@dataclass(frozen=True, slots=True)
class CacheConfig:
    enabled: bool
    expire_after: str | None = None  # ISO-8601 duration as written (``P30D``, ``PT12H``)
    expire_after_seconds: float | None = None  # the same, parsed


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    exception_types: tuple[str, ...]
    interval_seconds: float = 1.0
    backoff_rate: float = 2.0
    max_attempts: int | None = None
    expire_after_min: int | None = None


# Conditions: a ConditionStep's ``Conditions`` (all must hold), each one of these.
@dataclass(frozen=True, slots=True)
class Comparison:
    """Equals, GreaterThan, GreaterThanOrEqualTo, LessThan, LessThanOrEqualTo over two values (expressions or
    literals)."""

    type: str
    left: Any
    right: Any


@dataclass(frozen=True, slots=True)
class InValues:
    query: Any
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class NotCondition:
    condition: Condition


@dataclass(frozen=True, slots=True)
class OrConditions:
    conditions: tuple[Condition, ...]


Condition = Comparison | InValues | NotCondition | OrConditions

COMPARISONS = frozenset({"Equals", "GreaterThan", "GreaterThanOrEqualTo", "LessThan", "LessThanOrEqualTo"})


def condition_values(condition: Condition) -> Iterator[Any]:
    """Every value a condition compares (where its references are)."""
    if isinstance(condition, Comparison):
        yield condition.left
        yield condition.right
    elif isinstance(condition, InValues):
        yield condition.query
        yield from condition.values
    elif isinstance(condition, NotCondition):
        yield from condition_values(condition.condition)
    else:
        for c in condition.conditions:
            yield from condition_values(c)


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    type: StepType
    arguments: Mapping[str, Any]  # frozen; for Condition and Fail steps what the fields below hold too
    depends_on: tuple[str, ...] = ()
    display_name: str | None = None
    description: str | None = None
    property_files: tuple[PropertyFile, ...] = ()
    cache_config: CacheConfig | None = None
    retry_policies: tuple[RetryPolicy, ...] = ()
    # Condition steps
    conditions: tuple[Condition, ...] = ()
    if_steps: tuple[Step, ...] = ()
    else_steps: tuple[Step, ...] = ()
    # Fail steps: the message (an expression or a literal); None when the step gives none
    error_message: Any = None

    def property_file(self, name: str) -> PropertyFile | None:
        return next((f for f in self.property_files if f.name == name), None)

    def expression_values(self) -> list[Any]:
        """Everything in the step that may hold expressions (a condition step's branches are steps of their own)."""
        if self.type is StepType.CONDITION:
            return [v for c in self.conditions for v in condition_values(c)]
        if self.type is StepType.FAIL:
            return [self.error_message]
        return [self.arguments]


@dataclass(frozen=True, slots=True)
class Definition:
    parameters: tuple[Parameter, ...]
    steps: tuple[Step, ...]  # the top level; condition branches hold theirs
    version: str = VERSION
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    experiment_config: Mapping[str, Any] | None = None  # PipelineExperimentConfig: ExperimentName, TrialName

    def all_steps(self) -> tuple[Step, ...]:
        """Every step, branches included: each condition step followed by its IfSteps then its ElseSteps."""
        out: list[Step] = []

        def walk(steps: tuple[Step, ...]) -> None:
            for s in steps:
                out.append(s)
                walk(s.if_steps)
                walk(s.else_steps)

        walk(self.steps)
        return tuple(out)

    def step(self, name: str) -> Step:
        for s in self.all_steps():
            if s.name == name:
                return s
        raise KeyError(name)

    def parameter(self, name: str) -> Parameter | None:
        return next((p for p in self.parameters if p.name == name), None)
