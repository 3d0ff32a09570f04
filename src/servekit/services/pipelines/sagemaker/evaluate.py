"""Expressions evaluated while an execution runs (pure over a :class:`Context`, but for the injected reader of
property files): a step's Arguments become the plain Create* request its service gets, a fail step's message
its text. Anything that cannot be evaluated raises :class:`EvaluationError`, which fails the step with that
message.

The context is what SageMaker has when the step starts: the parameters (defaults overridden by
``PipelineParameters``, :func:`resolve_parameters`), the execution's variables (:func:`execution_variables`) and
each finished step's properties, the shape of its Describe* response (DescribeProcessingJob for a Processing step,
DescribeTrainingJob, DescribeTransformJob, DescribeHyperParameterTuningJob plus ``TrainingJobSummaries``,
DescribeModel, DescribeModelPackage; ``{"Outcome": "True"|"False"}`` for a condition step)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from servekit.services.pipelines.sagemaker.errors import EvaluationError, ParameterValueError
from servekit.services.pipelines.sagemaker.expressions import JOIN, JSON_GET, RefKind, is_function, is_get, parse_get
from servekit.services.pipelines.sagemaker.model import Definition, ParameterType, ParameterValue, Step, StepType
from servekit.services.pipelines.sagemaker.parse import article
from servekit.services.pipelines.sagemaker.paths import Key, Member, PathNotFound, PathSyntaxError, follow, parse_path

# Reads the object at an S3 URI (a property file, or Std:JsonGet's S3Uri): its bytes or text.
FileReader = Callable[[str], str | bytes]

_INTEGER = re.compile(r"[+-]?\d+\Z")


def _coerce(name: str, ptype: ParameterType, value: Any) -> ParameterValue:
    """A ``PipelineParameters`` value (a string on the wire; a JSON value of the right type is taken too) as the
    declared type."""
    bad = ParameterValueError(f"Parameter {name!r} is of type {ptype}; the value {value!r} is not {article(ptype)}.")
    if ptype is ParameterType.STRING:
        if isinstance(value, str):
            return value
        raise bad
    if isinstance(value, str):
        text = value.strip()
        if ptype is ParameterType.INTEGER and _INTEGER.match(text):
            return int(text)
        if ptype is ParameterType.FLOAT:
            try:
                number = float(text)
            except ValueError:
                raise bad from None
            if math.isfinite(number):
                return number
        if ptype is ParameterType.BOOLEAN and text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise bad
    if isinstance(value, bool):
        if ptype is ParameterType.BOOLEAN:
            return value
        raise bad
    if ptype is ParameterType.INTEGER and isinstance(value, int):
        return value
    if ptype is ParameterType.FLOAT and isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    raise bad


def resolve_parameters(
    definition: Definition, overrides: Sequence[Mapping[str, Any]] | Mapping[str, Any] = ()
) -> dict[str, ParameterValue]:
    """Every parameter's value for one execution: the overrides (StartPipelineExecution's ``PipelineParameters``,
    ``[{"Name": ..., "Value": ...}]``, or a mapping name -> value) coerced to the declared type, else the default.
    :class:`ParameterValueError` for an undeclared name, a name given twice, a value of the wrong type or outside
    the parameter's EnumValues, and a parameter with neither."""
    given: dict[str, Any] = {}
    if isinstance(overrides, Mapping):
        given = dict(overrides)
    else:
        for item in overrides:
            if not isinstance(item, Mapping) or "Name" not in item or "Value" not in item:
                raise ParameterValueError(f"Each of PipelineParameters is {{Name, Value}}, got {item!r}.")
            if item["Name"] in given:
                raise ParameterValueError(f"PipelineParameters gives parameter {item['Name']!r} twice.")
            given[item["Name"]] = item["Value"]
    unknown = sorted(set(given) - {p.name for p in definition.parameters})
    if unknown:
        declared = ", ".join(p.name for p in definition.parameters) or "none"
        raise ParameterValueError(
            f"PipelineParameters names {unknown[0]!r}, which the pipeline does not declare (its parameters: "
            f"{declared})."
        )
    values: dict[str, ParameterValue] = {}
    for p in definition.parameters:
        if p.name in given:
            value = _coerce(p.name, p.type, given[p.name])
        elif p.default is not None:
            value = p.default
        else:
            raise ParameterValueError(
                f"Parameter {p.name!r} has no DefaultValue, so PipelineParameters must give it a value."
            )
        if p.enum_values and value not in p.enum_values:
            raise ParameterValueError(f"Parameter {p.name!r} takes one of {list(p.enum_values)}, not {value!r}.")
        values[p.name] = value
    return values


def execution_variables(
    *,
    pipeline_name: str,
    pipeline_arn: str,
    execution_arn: str,
    start: datetime,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The ``Execution.*`` values of one execution (``PipelineExecutionId`` is the ARN's last part). A step's
    context adds ``TrainingJobName``/``ProcessingJobName`` (the job it creates) and ``CurrentDateTime``."""
    variables: dict[str, Any] = {
        "PipelineName": pipeline_name,
        "PipelineArn": pipeline_arn,
        "PipelineExecutionArn": execution_arn,
        "PipelineExecutionId": execution_arn.rsplit("/", 1)[-1],
        "StartDateTime": start,
    }
    if now is not None:
        variables["CurrentDateTime"] = now
    return variables


@dataclass(frozen=True, slots=True)
class Context:
    definition: Definition
    parameters: Mapping[str, ParameterValue]
    execution: Mapping[str, Any]
    steps: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))  # finished steps
    read_file: FileReader | None = None


def to_text(value: Any) -> str:
    """A value as ``Std:Join`` writes it: strings as they are, booleans ``true``/``false``, numbers and JSON as
    JSON, times in ISO 8601."""
    if isinstance(value, str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    return json.dumps(plain(value), separators=(",", ":"))


def plain(value: Any) -> Any:
    """A value as the JSON a service call carries (frozen mappings thawed, times in ISO 8601)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


class Evaluator:
    """Evaluates expressions in one context; a property file read once is remembered for the evaluator's life."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self._files: dict[str, Any] = {}

    def arguments(self, step: Step) -> dict[str, Any]:
        """The step's Arguments with every expression evaluated: the request its service gets. A condition step
        has none (:func:`servekit.services.pipelines.sagemaker.conditions.outcome`), nor a fail step
        (:meth:`error_message`)."""
        if step.type in (StepType.CONDITION, StepType.FAIL):
            raise TypeError(f"step {step.name!r} is a {step.type} step, which calls no service")
        result = self.value(step.arguments)
        assert isinstance(result, dict)
        return result

    def error_message(self, step: Step) -> str:
        """A fail step's message as text ("" when it gives none)."""
        if step.error_message is None:
            return ""
        return to_text(self.value(step.error_message))

    def value(self, expr: Any) -> Any:
        """``expr`` with every expression in it (at any depth) evaluated, as plain JSON."""
        if isinstance(expr, Mapping):
            if is_get(expr):
                return plain(self._get(expr["Get"]))
            if is_function(expr):
                name, spec = next(iter(expr.items()))
                if name == JOIN:
                    on = spec.get("On", "")
                    return str(on).join(to_text(self.value(v)) for v in spec["Values"])
                if name == JSON_GET:
                    return plain(self._json_get(spec))
                raise EvaluationError(f"Unknown function {name!r}; servekit evaluates {JOIN} and {JSON_GET}.")
            return {str(k): self.value(v) for k, v in expr.items()}
        if isinstance(expr, list | tuple):
            return [self.value(v) for v in expr]
        return plain(expr)

    def _get(self, text: str) -> Any:
        ref = parse_get(text, "Get")
        ctx = self.context
        if ref.kind is RefKind.PARAMETER:
            if ref.name not in ctx.parameters:
                raise EvaluationError(f"Unable to resolve {text!r}: the execution has no parameter {ref.name!r}.")
            return ctx.parameters[ref.name]
        if ref.kind is RefKind.EXECUTION:
            if ref.name not in ctx.execution:
                raise EvaluationError(f"Unable to resolve {text!r}: no execution variable {ref.name!r} here.")
            return ctx.execution[ref.name]
        properties = self._properties(ref.name, text)
        try:
            return follow(properties, ref.segments)
        except PathNotFound as exc:
            raise EvaluationError(
                f"Unable to resolve property {text!r}: step {ref.name!r} has no property {ref.path!r} ({exc})."
            ) from None

    def _properties(self, step: str, text: str) -> Mapping[str, Any]:
        properties = self.context.steps.get(step)
        if properties is None:
            raise EvaluationError(
                f"Unable to resolve {text!r}: step {step!r} has not succeeded in this execution, so it has no"
                " properties."
            )
        return properties

    def property_file_uri(self, step_name: str, file_name: str, text: str) -> str:
        """Where a finished step's property file is: its output's ``S3Output.S3Uri`` + ``/`` + ``FilePath``."""
        try:
            step = self.context.definition.step(step_name)
        except KeyError:
            raise EvaluationError(f"Unable to resolve {text!r}: no step {step_name!r} in the definition.") from None
        declared = step.property_file(file_name)
        if declared is None:
            raise EvaluationError(f"Unable to resolve {text!r}: step {step_name!r} has no property file {file_name!r}.")
        path = (
            Member("ProcessingOutputConfig"),
            Member("Outputs"),
            Key(declared.output_name),
            Member("S3Output"),
            Member("S3Uri"),
        )
        try:
            uri = follow(self._properties(step_name, text), path)
        except PathNotFound:
            raise EvaluationError(
                f"Unable to resolve property file {file_name!r} of step {step_name!r}: the step has no output"
                f" {declared.output_name!r} with an S3Uri."
            ) from None
        return f"{str(uri).rstrip('/')}/{declared.file_path.lstrip('/')}"

    def _json_get(self, spec: Mapping[str, Any]) -> Any:
        json_path = spec["Path"]
        if "PropertyFile" in spec:
            text = spec["PropertyFile"]["Get"]
            ref = parse_get(text, "Std:JsonGet.PropertyFile", property_file=True)
            uri = self.property_file_uri(ref.name, ref.path, text)
            what = f"property file {ref.path!r} of step {ref.name!r} ({uri})"
        else:
            uri = self.value(spec["S3Uri"])
            if not isinstance(uri, str):
                raise EvaluationError(f"Std:JsonGet's S3Uri must evaluate to a string, got {uri!r}.")
            what = uri
        document = self._read_json(uri, what)
        try:
            return follow(document, parse_path(json_path, json_path=True))
        except PathSyntaxError as exc:
            raise EvaluationError(f"Std:JsonGet: invalid JSON path {json_path!r}: {exc}.") from None
        except PathNotFound as exc:
            raise EvaluationError(
                f"Std:JsonGet failed: the JSON path {json_path!r} was not found in {what}: {exc}."
            ) from None

    def _read_json(self, uri: str, what: str) -> Any:
        if uri in self._files:
            return self._files[uri]
        reader = self.context.read_file
        if reader is None:
            raise EvaluationError(f"Std:JsonGet failed: no reader for {what}.")
        try:
            raw = reader(uri)
        except Exception as exc:  # the reader's failure is the step's: S3 NoSuchKey, permissions, ...
            raise EvaluationError(f"Std:JsonGet failed: unable to read {what}: {exc}.") from None
        try:
            document = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EvaluationError(f"Std:JsonGet failed: {what} is not valid JSON: {exc}.") from None
        self._files[uri] = document
        return document
