"""A pipeline: its parameters (with defaults), its steps and the DAG between them, validated when built."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servekit.services.pipelines.definition.dag import Dag, build_dag
from servekit.services.pipelines.definition.refs import to_json
from servekit.services.pipelines.definition.steps import NAME_RE, Step, StepKind
from servekit.services.pipelines.errors import PipelineError

DOCUMENT_VERSION = "servekit-2025-01"  # our definition format (SageMaker's is "2020-12-01"); not interchangeable
MAX_PARALLEL = 4


class ParameterType(enum.StrEnum):
    STRING = "String"
    INTEGER = "Integer"
    FLOAT = "Float"
    BOOLEAN = "Boolean"


_PY = {str: ParameterType.STRING, int: ParameterType.INTEGER, float: ParameterType.FLOAT, bool: ParameterType.BOOLEAN}


@dataclass(frozen=True, slots=True)
class Parameter:
    name: str
    type: ParameterType = ParameterType.STRING
    default: Any = None  # None: the run must give a value

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise PipelineError(f"parameter name {self.name!r} must be letters, digits, '-' or '_'")
        if self.default is not None:
            object.__setattr__(self, "default", self.coerce(self.default))

    def coerce(self, value: Any) -> Any:
        """``value`` as this parameter's type; text (``--param k=v``) is parsed. :class:`PipelineError` if it
        is not one."""
        bad = PipelineError(f"parameter {self.name!r} is {self.type}, and {value!r} is not one")
        if self.type is ParameterType.STRING:
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                return str(value)
            raise bad
        if self.type is ParameterType.BOOLEAN:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            raise bad
        if isinstance(value, bool):
            raise bad
        kind = int if self.type is ParameterType.INTEGER else float
        if isinstance(value, str):
            try:
                return kind(value)
            except ValueError:
                raise bad from None
        if isinstance(value, int) or (kind is float and isinstance(value, float)):
            return kind(value)
        if kind is int and isinstance(value, float) and value.is_integer():
            return int(value)
        raise bad

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"Name": self.name, "Type": str(self.type)}
        if self.default is not None:
            doc["DefaultValue"] = self.default
        return doc


def parameter(name: str, default: Any = None, type: type | ParameterType | None = None) -> Parameter:
    """A parameter whose type is given or follows from its default (``str``, ``int``, ``float``, ``bool``)."""
    if isinstance(type, ParameterType):
        kind = type
    elif type is not None:
        if type not in _PY:
            raise PipelineError(f"parameter {name!r}: type must be str, int, float or bool, not {type!r}")
        kind = _PY[type]
    elif default is not None and default.__class__ in _PY:
        kind = _PY[default.__class__]
    else:
        kind = ParameterType.STRING
    return Parameter(name, kind, default)


@dataclass(frozen=True, eq=False)
class Pipeline:
    name: str
    steps: tuple[Step, ...]
    parameters: tuple[Parameter, ...] = ()
    max_parallel: int = MAX_PARALLEL  # steps running at once (SageMaker's MaxParallelExecutionSteps)
    dag: Dag = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise PipelineError(f"pipeline name {self.name!r} must be 1-63 letters, digits, '-' or '_'")
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "parameters", tuple(self.parameters))
        if not self.steps:
            raise PipelineError(f"pipeline {self.name!r} has no steps")
        names = [p.name for p in self.parameters]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise PipelineError(f"pipeline {self.name!r}: parameter(s) {sorted(dup)} declared twice")
        if self.max_parallel < 1:
            raise PipelineError(f"max_parallel must be at least 1, got {self.max_parallel}")
        for s in self.steps:
            if not isinstance(s, Step):
                raise PipelineError(f"pipeline {self.name!r}: {s!r} is not a step (decorate functions with @step)")
        object.__setattr__(self, "dag", build_dag(self.steps, names))

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise PipelineError(f"pipeline {self.name!r} has no step {name!r}; steps: {[s.name for s in self.steps]}")

    def bind(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter's value for a run: ``given`` (typed or text) over the defaults."""
        known = {p.name: p for p in self.parameters}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise PipelineError(f"pipeline {self.name!r} has no parameter(s) {unknown}; parameters: {list(known)}")
        values: dict[str, Any] = {}
        for p in self.parameters:
            if p.name in given:
                values[p.name] = p.coerce(given[p.name])
            elif p.default is not None:
                values[p.name] = p.default
            else:
                raise PipelineError(f"parameter {p.name!r} has no default: give it (--param {p.name}=...)")
        return values

    def to_document(self) -> dict[str, Any]:
        """The definition as JSON (servekit's format, shaped like SageMaker's PipelineDefinition)."""
        return {
            "Version": DOCUMENT_VERSION,
            "Name": self.name,
            "Parameters": [p.to_json() for p in self.parameters],
            "MaxParallelExecutionSteps": self.max_parallel,
            "Steps": [step_document(s) for s in self.steps],
        }


def step_document(s: Step) -> dict[str, Any]:
    doc: dict[str, Any] = {"Name": s.name, "Type": str(s.kind)}
    if s.arguments:
        doc["Arguments"] = to_json(dict(s.arguments))
    if s.function is not None:
        doc["Function"] = s.function_path or f"{s.function.__module__}:{s.function.__qualname__}"
    if s.command:
        doc["Command"] = to_json(list(s.command))
    for key, value in (
        ("Outputs", list(s.outputs)),
        ("DependsOn", list(s.depends_on)),
        ("Reads", to_json(list(s.reads))),
        ("Code", list(s.code)),
    ):
        if value:
            doc[key] = value
    if s.timeout_s is not None:
        doc["TimeoutSeconds"] = s.timeout_s
    if s.retry:
        doc["RetryPolicies"] = [r.to_json() for r in s.retry]
    if s.cache is not None:
        doc["CacheConfig"] = s.cache.to_json()
    if s.kind is StepKind.CONDITION:
        doc["Arguments"] = {
            "Conditions": [c.to_json() for c in s.conditions],
            "IfSteps": list(s.if_steps),
            "ElseSteps": list(s.else_steps),
        }
    return doc
