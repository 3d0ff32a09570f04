"""Values a step's arguments may hold: JSON literals, references (``{"Get": "Steps.train.Outputs.model"}``,
``{"Get": "Parameters.MinAccuracy"}``, ``{"Get": "Execution.PipelineExecutionId"}``) and ``Std:Join``.

References are SageMaker's spelling; what a step exposes is servekit's (``Outputs.<name>`` artifact URIs,
``Properties.<key>`` a function step's returned values, ``Metrics.<key>`` an evaluation's metrics,
``ModelPackageArn``, ``EndpointArn``, ``Outcome``). A reference to a step is a DAG edge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servekit.services.pipelines.errors import PipelineError

EXECUTION_FIELDS = ("PipelineExecutionId", "PipelineExecutionArn", "PipelineName", "StartDateTime")


@dataclass(frozen=True, slots=True)
class Get:
    """A reference, resolved when the step that holds it starts."""

    path: str

    @property
    def parts(self) -> list[str]:
        return self.path.split(".")

    @property
    def step(self) -> str | None:
        """The step it reads from (``Steps.<name>...``), else None."""
        parts = self.parts
        return parts[1] if parts[0] == "Steps" and len(parts) > 1 else None

    def to_json(self) -> dict[str, str]:
        return {"Get": self.path}


@dataclass(frozen=True, slots=True)
class Join:
    """``Std:Join``: the values, resolved and turned into text, joined with ``on``."""

    on: str
    values: Sequence[Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))  # hashable and immutable whatever was passed

    def to_json(self) -> dict[str, Any]:
        return {"Std:Join": {"On": self.on, "Values": [to_json(v) for v in self.values]}}


def Param(name: str) -> Get:
    """A reference to a pipeline parameter."""
    return Get(f"Parameters.{name}")


def Execution(field: str) -> Get:
    if field not in EXECUTION_FIELDS:
        raise PipelineError(f"Execution.{field} is not a reference; known: {', '.join(EXECUTION_FIELDS)}")
    return Get(f"Execution.{field}")


def from_json(value: Any, where: str) -> Any:
    """A value read from YAML/JSON: ``{"Get": ...}`` and ``{"Std:Join": ...}`` become references; anything else
    stays a literal (mappings and lists are walked)."""
    if isinstance(value, Mapping):
        if set(value) == {"Get"}:
            path = value["Get"]
            if not isinstance(path, str) or not path:
                raise PipelineError(f"{where}: Get takes a path such as Steps.<step>.Outputs.<name>, got {path!r}")
            return Get(path)
        if set(value) == {"Std:Join"}:
            spec = value["Std:Join"]
            if not isinstance(spec, Mapping) or not isinstance(spec.get("Values"), list):
                raise PipelineError(f"{where}: Std:Join takes {{On: <text>, Values: [...]}}, got {spec!r}")
            on = spec.get("On", "")
            vals = tuple(from_json(v, f"{where}.Std:Join.Values[{i}]") for i, v in enumerate(spec["Values"]))
            return Join(str(on), vals)
        return {str(k): from_json(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def to_json(value: Any) -> Any:
    if isinstance(value, (Get, Join)):
        return value.to_json()
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def references(value: Any) -> Iterator[Get]:
    """Every reference inside ``value``."""
    if isinstance(value, Get):
        yield value
    elif isinstance(value, Join):
        for v in value.values:
            yield from references(v)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from references(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from references(v)


def resolve(value: Any, lookup: Callable[[Get], Any]) -> Any:
    """``value`` with every reference replaced by ``lookup(ref)`` (pure: the caller's lookup decides)."""
    if isinstance(value, Get):
        return lookup(value)
    if isinstance(value, Join):
        return value.on.join(_text(resolve(v, lookup)) for v in value.values)
    if isinstance(value, Mapping):
        return {k: resolve(v, lookup) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [resolve(v, lookup) for v in value]
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def step_names(values: Sequence[Any]) -> set[str]:
    return {ref.step for v in values for ref in references(v) if ref.step is not None}
