"""Read a SageMaker pipeline definition (JSON text or the decoded document) into :class:`Definition`, checking its
shape: every message starts as SageMaker's does (``Unable to parse pipeline definition.``) and names the field.
The checks across steps (references, names, cycles) are :func:`servekit.services.pipelines.sagemaker.dag.check`'s;
:func:`load_definition` does both."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from servekit.services.pipelines.sagemaker.errors import DefinitionError
from servekit.services.pipelines.sagemaker.model import (
    COMPARISONS,
    REFUSED_STEP_TYPES,
    RETRYABLE,
    VERSION,
    CacheConfig,
    Comparison,
    Condition,
    Definition,
    InValues,
    NotCondition,
    OrConditions,
    Parameter,
    ParameterType,
    ParameterValue,
    PropertyFile,
    RetryPolicy,
    Step,
    StepType,
    freeze,
)

PREFIX = "Unable to parse pipeline definition."
NAME = re.compile(r"[A-Za-z0-9\-_]{1,256}\Z")
_TOP = {"Version", "Metadata", "Parameters", "PipelineExperimentConfig", "Steps"}
_STEP = {
    "Name",
    "Type",
    "Arguments",
    "DependsOn",
    "DisplayName",
    "Description",
    "PropertyFiles",
    "CacheConfig",
    "RetryPolicies",
}
_DURATION = re.compile(
    r"P(?!\Z)(?:(?P<y>\d+)Y)?(?:(?P<mo>\d+)M)?(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<h>\d+)H)?(?:(?P<mi>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?\Z"
)
_SECONDS = {"y": 365 * 86400, "mo": 30 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "mi": 60, "s": 1}


def _fail(detail: str) -> DefinitionError:
    return DefinitionError(f"{PREFIX} {detail}")


def parse_duration(text: str) -> float:
    """Seconds in an ISO-8601 duration (``P30D``, ``PT12H``, ``P1DT30M``; a month is 30 days, a year 365)."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"{text!r} is not an ISO-8601 duration such as P30D or PT12H")
    return sum(float(v) * _SECONDS[k] for k, v in m.groupdict().items() if v)


def parse_definition(source: str | bytes | Mapping[str, Any]) -> Definition:
    """The definition in ``source`` (its shape checked, not yet its references)."""
    if isinstance(source, str | bytes):
        try:
            doc = json.loads(source)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _fail(f"The definition is not valid JSON: {exc}.") from None
    else:
        doc = source
    if not isinstance(doc, Mapping):
        raise _fail(f"The definition must be a JSON object, got {type(doc).__name__}.")
    unknown = sorted(set(doc) - _TOP)
    if unknown:
        raise _fail(f"Cannot parse object, unknown property {unknown[0]!r}.")
    version = doc.get("Version")
    if version != VERSION:
        raise _fail(f"Version must be {VERSION!r}, got {version!r}.")
    metadata = doc.get("Metadata", {})
    if not isinstance(metadata, Mapping):
        raise _fail("Metadata must be an object.")
    experiment = doc.get("PipelineExperimentConfig")
    if experiment is not None:
        if not isinstance(experiment, Mapping) or set(experiment) - {"ExperimentName", "TrialName"}:
            raise _fail("PipelineExperimentConfig takes ExperimentName and TrialName only.")
    params = doc.get("Parameters", [])
    if not isinstance(params, list):
        raise _fail("Parameters must be a list.")
    parameters = tuple(_parameter(p, i) for i, p in enumerate(params))
    seen: set[str] = set()
    for p in parameters:
        if p.name in seen:
            raise DefinitionError(f"Parameter names must be unique: {p.name!r} is declared twice.")
        seen.add(p.name)
    steps = doc.get("Steps")
    if not isinstance(steps, list) or not steps:
        raise _fail("Steps must be a non-empty list.")
    return Definition(
        parameters=parameters,
        steps=tuple(_step(s, f"Steps[{i}]") for i, s in enumerate(steps)),
        version=VERSION,
        metadata=freeze(metadata),
        experiment_config=None if experiment is None else freeze(experiment),
    )


def _parameter(doc: Any, index: int) -> Parameter:
    where = f"Parameters[{index}]"
    if not isinstance(doc, Mapping):
        raise _fail(f"{where} must be an object.")
    unknown = sorted(set(doc) - {"Name", "Type", "DefaultValue", "EnumValues"})
    if unknown:
        raise _fail(f"{where}: Cannot parse object, unknown property {unknown[0]!r}.")
    name = doc.get("Name")
    if not isinstance(name, str) or not NAME.match(name):
        raise _fail(f"{where}.Name must be 1-256 letters, digits, '-' or '_', got {name!r}.")
    try:
        raw_type = doc.get("Type")
        ptype = ParameterType(raw_type if isinstance(raw_type, str) else "")
    except ValueError:
        kinds = ", ".join(t.value for t in ParameterType)
        raise DefinitionError(f"Parameter {name!r} has type {doc.get('Type')!r}; the types are {kinds}.") from None
    enum_values: tuple[str, ...] = ()
    if "EnumValues" in doc:
        raw = doc["EnumValues"]
        if ptype is not ParameterType.STRING:
            raise DefinitionError(f"Parameter {name!r}: EnumValues are for String parameters, not {ptype}.")
        if not isinstance(raw, list) or not raw or not all(isinstance(v, str) for v in raw):
            raise DefinitionError(f"Parameter {name!r}: EnumValues must be a non-empty list of strings.")
        enum_values = tuple(raw)
    default = doc.get("DefaultValue")
    if default is not None:
        default = check_value(name, ptype, default)
        if enum_values and default not in enum_values:
            raise DefinitionError(
                f"Parameter {name!r}: DefaultValue {default!r} is not one of its EnumValues {list(enum_values)}."
            )
    return Parameter(name, ptype, default, enum_values)


def article(ptype: ParameterType) -> str:
    """``an Integer``, ``a Float``: the type with its article, for messages."""
    return f"{'an' if ptype.value[0] in 'AEIOU' else 'a'} {ptype.value}"


def check_value(name: str, ptype: ParameterType, value: Any) -> ParameterValue:
    """``value`` (a JSON value) as the parameter's type; :class:`DefinitionError` when it is another type."""
    ok: bool
    if ptype is ParameterType.STRING:
        ok = isinstance(value, str)
    elif ptype is ParameterType.INTEGER:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif ptype is ParameterType.FLOAT:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            value = float(value)
    else:
        ok = isinstance(value, bool)
    if not ok:
        raise DefinitionError(
            f"Parameter {name!r} is of type {ptype}, but its DefaultValue {json.dumps(value)} is not {article(ptype)}."
        )
    assert isinstance(value, str | int | float | bool)
    return value


def _names(doc: Any, where: str) -> tuple[str, ...]:
    if doc is None:
        return ()
    if not isinstance(doc, list) or not all(isinstance(n, str) for n in doc):
        raise _fail(f"{where} must be a list of step names.")
    return tuple(doc)


def _step(doc: Any, where: str) -> Step:
    if not isinstance(doc, Mapping):
        raise _fail(f"{where} must be an object.")
    name = doc.get("Name")
    if not isinstance(name, str) or not NAME.match(name):
        raise _fail(f"{where}.Name must be 1-256 letters, digits, '-' or '_', got {name!r}.")
    where = f"Step {name!r}"
    unknown = sorted(set(doc) - _STEP)
    if unknown:
        raise _fail(f"{where}: Cannot parse object, unknown property {unknown[0]!r}.")
    raw_type = doc.get("Type")
    if raw_type in REFUSED_STEP_TYPES:
        runs = ", ".join(t.value for t in StepType)
        raise DefinitionError(f"Step {name!r} is of type {raw_type}, which servekit does not run; it runs {runs}.")
    try:
        stype = StepType(raw_type if isinstance(raw_type, str) else "")
    except ValueError:
        runs = ", ".join(t.value for t in StepType)
        raise DefinitionError(f"Step {name!r} has unknown type {raw_type!r}; servekit runs {runs}.") from None
    arguments = doc.get("Arguments", {})
    if not isinstance(arguments, Mapping):
        raise _fail(f"{where}: Arguments must be an object.")
    for text_field in ("DisplayName", "Description"):
        if text_field in doc and not isinstance(doc[text_field], str):
            raise _fail(f"{where}: {text_field} must be a string.")
    cache = _cache_config(doc.get("CacheConfig"), where)
    retries = _retry_policies(doc.get("RetryPolicies"), where)
    if retries and stype not in RETRYABLE:
        raise DefinitionError(f"{where}: RetryPolicies apply to job, Model and RegisterModel steps, not {stype}.")
    files = _property_files(doc.get("PropertyFiles"), where)
    if files and stype is not StepType.PROCESSING:
        raise DefinitionError(f"{where}: PropertyFiles belong to Processing steps, not {stype}.")
    outputs = _literal_output_names(arguments)
    for f in files:
        if outputs is not None and f.output_name not in outputs:
            raise DefinitionError(
                f"{where}: PropertyFile {f.name!r} names output {f.output_name!r}, which the step does not define"
                f" (its outputs: {sorted(outputs)})."
            )
    conditions: tuple[Condition, ...] = ()
    if_steps: tuple[Step, ...] = ()
    else_steps: tuple[Step, ...] = ()
    error_message: Any = None
    if stype is StepType.CONDITION:
        unknown = sorted(set(arguments) - {"Conditions", "IfSteps", "ElseSteps"})
        if unknown:
            raise _fail(f"{where}: Cannot parse object, unknown property {unknown[0]!r} in Arguments.")
        raw_conditions = arguments.get("Conditions")
        if not isinstance(raw_conditions, list) or not raw_conditions:
            raise _fail(f"{where}: Arguments.Conditions must be a non-empty list.")
        conditions = tuple(_condition(c, f"{where}: Conditions[{i}]") for i, c in enumerate(raw_conditions))
        if_steps = _branch(arguments.get("IfSteps", []), f"{where}: IfSteps")
        else_steps = _branch(arguments.get("ElseSteps", []), f"{where}: ElseSteps")
    elif stype is StepType.FAIL:
        unknown = sorted(set(arguments) - {"ErrorMessage"})
        if unknown:
            raise _fail(f"{where}: Cannot parse object, unknown property {unknown[0]!r} in Arguments.")
        error_message = freeze(arguments.get("ErrorMessage"))
    return Step(
        name=name,
        type=stype,
        arguments=freeze(arguments),
        depends_on=_names(doc.get("DependsOn"), f"{where}: DependsOn"),
        display_name=doc.get("DisplayName"),
        description=doc.get("Description"),
        property_files=files,
        cache_config=cache,
        retry_policies=retries,
        conditions=conditions,
        if_steps=if_steps,
        else_steps=else_steps,
        error_message=error_message,
    )


def _branch(doc: Any, where: str) -> tuple[Step, ...]:
    if not isinstance(doc, list):
        raise _fail(f"{where} must be a list of steps.")
    return tuple(_step(s, f"{where}[{i}]") for i, s in enumerate(doc))


def _literal_output_names(arguments: Mapping[str, Any]) -> set[str] | None:
    """A processing step's OutputNames when written as literals; None when they cannot be known before it runs."""
    config = arguments.get("ProcessingOutputConfig")
    outputs = config.get("Outputs") if isinstance(config, Mapping) else None
    if not isinstance(outputs, list):
        return None if config is not None else set()
    names = [o.get("OutputName") if isinstance(o, Mapping) else None for o in outputs]
    return {n for n in names if isinstance(n, str)} if all(isinstance(n, str) for n in names) else None


def _condition(doc: Any, where: str) -> Condition:
    if not isinstance(doc, Mapping):
        raise _fail(f"{where} must be an object.")
    ctype = doc.get("Type")

    def fields(*allowed: str) -> None:
        extra = sorted(set(doc) - {"Type", *allowed})
        if extra:
            raise _fail(f"{where}: Cannot parse object, unknown property {extra[0]!r} for a {ctype} condition.")
        missing = [f for f in allowed if f not in doc]
        if missing:
            raise _fail(f"{where}: a {ctype} condition needs {missing[0]}.")

    if ctype in COMPARISONS:
        fields("LeftValue", "RightValue")
        return Comparison(ctype, freeze(doc["LeftValue"]), freeze(doc["RightValue"]))
    if ctype == "In":
        fields("QueryValue", "Values")
        values = doc["Values"]
        if not isinstance(values, list):
            raise _fail(f"{where}: an In condition's Values must be a list.")
        return InValues(freeze(doc["QueryValue"]), tuple(freeze(v) for v in values))
    if ctype == "Not":
        fields("Condition")
        return NotCondition(_condition(doc["Condition"], f"{where}.Condition"))
    if ctype == "Or":
        fields("Conditions")
        inner = doc["Conditions"]
        if not isinstance(inner, list) or not inner:
            raise _fail(f"{where}: an Or condition's Conditions must be a non-empty list.")
        return OrConditions(tuple(_condition(c, f"{where}.Conditions[{i}]") for i, c in enumerate(inner)))
    kinds = ", ".join([*sorted(COMPARISONS), "In", "Not", "Or"])
    raise _fail(f"{where}: unknown condition type {ctype!r}; the types are {kinds}.")


def _cache_config(doc: Any, where: str) -> CacheConfig | None:
    if doc is None:
        return None
    if not isinstance(doc, Mapping) or set(doc) - {"Enabled", "ExpireAfter"}:
        raise _fail(f"{where}: CacheConfig takes Enabled and ExpireAfter.")
    enabled = doc.get("Enabled", False)
    if not isinstance(enabled, bool):
        raise _fail(f"{where}: CacheConfig.Enabled must be true or false.")
    expire = doc.get("ExpireAfter")
    seconds = None
    if expire is not None:
        if not isinstance(expire, str):
            raise _fail(f"{where}: CacheConfig.ExpireAfter must be an ISO-8601 duration string.")
        try:
            seconds = parse_duration(expire)
        except ValueError as exc:
            raise DefinitionError(f"{where}: CacheConfig.ExpireAfter: {exc}.") from None
    return CacheConfig(enabled, expire, seconds)


def _number(doc: Mapping[str, Any], key: str, where: str, low: float, high: float) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise DefinitionError(f"{where}: {key} must be a number from {low:g} to {high:g}, got {value!r}.")
    return float(value)


def _retry_policies(doc: Any, where: str) -> tuple[RetryPolicy, ...]:
    if doc is None:
        return ()
    if not isinstance(doc, list):
        raise _fail(f"{where}: RetryPolicies must be a list.")
    out: list[RetryPolicy] = []
    for i, p in enumerate(doc):
        here = f"{where}: RetryPolicies[{i}]"
        allowed = {"ExceptionType", "IntervalSeconds", "BackoffRate", "MaxAttempts", "ExpireAfterMin"}
        if not isinstance(p, Mapping) or set(p) - allowed:
            raise _fail(f"{here} takes {', '.join(sorted(allowed))}.")
        types = p.get("ExceptionType")
        if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
            raise _fail(f"{here}: ExceptionType must be a non-empty list.")
        bad = [t for t in types if not re.match(r"(Step|SageMaker)\.[A-Z_]+\Z", t)]
        if bad:
            raise DefinitionError(f"{here}: unknown ExceptionType {bad[0]!r}.")
        if "MaxAttempts" in p and "ExpireAfterMin" in p:
            raise DefinitionError(f"{here}: give MaxAttempts or ExpireAfterMin, not both.")
        interval = _number(p, "IntervalSeconds", here, 1, 43200)
        backoff = _number(p, "BackoffRate", here, 0, 1e6)
        attempts = _number(p, "MaxAttempts", here, 1, 20)
        expire = _number(p, "ExpireAfterMin", here, 0, 14400)
        out.append(
            RetryPolicy(
                exception_types=tuple(types),
                interval_seconds=1.0 if interval is None else interval,
                backoff_rate=2.0 if backoff is None else backoff,
                max_attempts=None if attempts is None else int(attempts),
                expire_after_min=None if expire is None else int(expire),
            )
        )
    return tuple(out)


def _property_files(doc: Any, where: str) -> tuple[PropertyFile, ...]:
    if doc is None:
        return ()
    if not isinstance(doc, list):
        raise _fail(f"{where}: PropertyFiles must be a list.")
    out: list[PropertyFile] = []
    for i, f in enumerate(doc):
        here = f"{where}: PropertyFiles[{i}]"
        keys = ("PropertyFileName", "OutputName", "FilePath")
        if not isinstance(f, Mapping) or set(f) != set(keys) or not all(isinstance(f[k], str) and f[k] for k in keys):
            raise _fail(f"{here} takes PropertyFileName, OutputName and FilePath, all strings.")
        if any(p.name == f["PropertyFileName"] for p in out):
            raise DefinitionError(f"{where}: two PropertyFiles are named {f['PropertyFileName']!r}.")
        out.append(PropertyFile(f["PropertyFileName"], f["OutputName"], f["FilePath"]))
    return tuple(out)
