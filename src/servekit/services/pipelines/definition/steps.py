"""Steps: what each kind runs, what it declares (inputs, outputs, read prefixes, timeout, retries, cache) and what
the steps after it may reference."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servekit.services.pipelines.definition.conditions import Condition
from servekit.services.pipelines.definition.refs import Get
from servekit.services.pipelines.errors import PipelineError


class StepKind(enum.StrEnum):
    PROCESSING = "Processing"
    TRAINING = "Training"
    EVALUATION = "Evaluation"  # writes metrics JSON (its ``metrics`` output) and exposes ``Metrics.<key>``
    CONDITION = "Condition"
    REGISTER = "RegisterModel"  # CreateModelPackage on the control plane
    TRANSFORM = "Transform"  # a batch transform job (servekit.services.transform)
    DEPLOY = "Deploy"  # an endpoint update on the control plane (servekit's own kind)
    FAIL = "Fail"

    @property
    def runs_code(self) -> bool:
        """Runs a Python function or a command in a process of its own."""
        return self in (StepKind.PROCESSING, StepKind.TRAINING, StepKind.EVALUATION)

    @property
    def cacheable(self) -> bool:
        return self.runs_code or self is StepKind.TRANSFORM


METRICS_OUTPUT = "metrics"  # an evaluation step's output folder, holding METRICS_FILE
METRICS_FILE = "evaluation.json"
TRANSFORM_OUTPUT = "output"
NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62})$")
OUTPUT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
# Error names a retry policy may list besides exception class names: SageMaker's service faults, and a command's
# exit status.
SERVICE_FAULT = "Step.SERVICE_FAULT"
THROTTLING = "Step.THROTTLING"
EXIT_CODE_RE = re.compile(r"^ExitCode\.([0-9]{1,3})$")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry the step when it fails with one of ``errors``: exception class names (matched against the raised
    exception's classes, bases included: ``OSError`` covers ``ConnectionError``), ``ExitCode.<n>`` for a command,
    ``Step.SERVICE_FAULT`` / ``Step.THROTTLING`` for control-plane calls. Waits ``interval_s * backoff_rate^k``
    before retry k+1; at most ``max_attempts`` retries (SageMaker's MaxAttempts)."""

    errors: tuple[str, ...]
    interval_s: float = 1.0
    backoff_rate: float = 2.0
    max_attempts: int = 5

    def __post_init__(self) -> None:
        if not self.errors:
            raise PipelineError("a retry policy names the errors it retries (ExceptionType)")
        if not 0 < self.interval_s <= 43200:
            raise PipelineError(f"IntervalSeconds must be in (0, 43200], got {self.interval_s}")
        if self.backoff_rate < 1.0:
            raise PipelineError(f"BackoffRate must be at least 1.0, got {self.backoff_rate}")
        if not 1 <= self.max_attempts <= 20:
            raise PipelineError(f"MaxAttempts must be 1-20, got {self.max_attempts}")

    def matches(self, error_types: tuple[str, ...]) -> bool:
        return any(e in self.errors for e in error_types)

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 = the first retry)."""
        return float(self.interval_s * self.backoff_rate ** (retry - 1))

    def to_json(self) -> dict[str, Any]:
        return {
            "ExceptionType": list(self.errors),
            "IntervalSeconds": self.interval_s,
            "BackoffRate": self.backoff_rate,
            "MaxAttempts": self.max_attempts,
        }


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """SageMaker's CacheConfig: reuse the newest successful run of this step (same pipeline) whose code, inputs
    and parameters match, if it is younger than ``expire_after_s`` (None: no expiry)."""

    enabled: bool = True
    expire_after_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"Enabled": self.enabled}
        if self.expire_after_s is not None:
            doc["ExpireAfter"] = f"PT{self.expire_after_s:g}S"
        return doc


_DURATION = re.compile(
    r"^P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(text: str, where: str) -> float:
    """An ISO-8601 duration (``P30D``, ``PT1H``, ``PT90S``) in seconds."""
    match = _DURATION.match(text)
    if not match or text in ("P", "PT") or text.endswith("T"):
        raise PipelineError(f"{where}: {text!r} is not an ISO-8601 duration such as P30D, PT1H or PT90S")
    factors = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
    return sum(float(v) * factors[k] for k, v in match.groupdict().items() if v)


@dataclass(frozen=True, eq=False)
class Step:
    """One step. Build steps with the constructors in :mod:`servekit.services.pipelines.definition.dsl` (or from YAML);
    a step's ``output``, ``prop`` and ``metric`` give references for the steps after it."""

    name: str
    kind: StepKind
    arguments: Mapping[str, Any] = field(default_factory=dict)  # literals and references
    outputs: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    reads: tuple[Any, ...] = ()  # storage prefixes the step may read (literals or references)
    timeout_s: float | None = None
    retry: tuple[RetryPolicy, ...] = ()
    cache: CacheConfig | None = None
    function: Callable[..., Any] | None = None  # processing/training/evaluation: fn(ctx, **arguments)
    function_path: str = ""  # "module:qualname" (how YAML names it; shown by describe)
    command: tuple[Any, ...] = ()  # or argv (items may be references)
    code: tuple[str, ...] = ()  # files or folders whose content is part of the code hash
    conditions: tuple[Condition, ...] = ()
    if_steps: tuple[str, ...] = ()
    else_steps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise PipelineError(
                f"step name {self.name!r} must be 1-63 letters, digits, '-' or '_', starting with a letter or digit"
            )
        for out in self.outputs:
            if not OUTPUT_RE.match(out):
                raise PipelineError(f"step {self.name!r}: output name {out!r} must be letters, digits, '-' or '_'")
        if len(set(self.outputs)) != len(self.outputs):
            raise PipelineError(f"step {self.name!r}: an output is declared twice in {list(self.outputs)}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise PipelineError(f"step {self.name!r}: the timeout must be positive, got {self.timeout_s}")
        if self.kind.runs_code and (self.function is None) == (not self.command):
            raise PipelineError(f"step {self.name!r}: a {self.kind} step runs either a function or a command")
        if self.cache is not None and self.cache.enabled and not self.kind.cacheable:
            raise PipelineError(f"step {self.name!r}: {self.kind} steps are not cached (only code and transform)")
        if self.retry and self.kind in (StepKind.CONDITION, StepKind.FAIL):
            raise PipelineError(f"step {self.name!r}: {self.kind} steps have no retry policies")

    # ---- references ------------------------------------------------------------------------------------------

    def output(self, name: str) -> Get:
        """The URI of one of the step's declared outputs (a folder)."""
        if name not in self.outputs:
            raise PipelineError(f"step {self.name!r} has no output {name!r}; its outputs: {list(self.outputs)}")
        return Get(f"Steps.{self.name}.Outputs.{name}")

    def prop(self, key: str) -> Get:
        """A value of the mapping the step's function returned."""
        return Get(f"Steps.{self.name}.Properties.{key}")

    def metric(self, key: str) -> Get:
        """A metric of an evaluation step."""
        if self.kind is not StepKind.EVALUATION:
            raise PipelineError(f"step {self.name!r} is a {self.kind} step; only Evaluation steps have metrics")
        return Get(f"Steps.{self.name}.Metrics.{key}")

    @property
    def model_package_arn(self) -> Get:
        return Get(f"Steps.{self.name}.ModelPackageArn")

    @property
    def endpoint_arn(self) -> Get:
        return Get(f"Steps.{self.name}.EndpointArn")

    def exposes(self, parts: list[str]) -> str | None:
        """Why the reference ``Steps.<name>.<parts>`` is wrong (None when the step exposes it)."""
        head = parts[0] if parts else ""
        if head == "Outputs":
            if len(parts) == 2 and parts[1] in self.outputs:
                return None
            return f"step {self.name!r} has outputs {list(self.outputs)}"
        allowed = {
            "Properties": self.kind.runs_code,
            "Metrics": self.kind is StepKind.EVALUATION,
        }
        if head in allowed:
            return None if allowed[head] and len(parts) >= 2 else f"{self.kind} steps have no {head}.<key>"
        singles = {
            StepKind.REGISTER: ("ModelPackageArn", "ModelPackageVersion"),
            StepKind.DEPLOY: ("EndpointArn", "EndpointName", "EndpointConfigName"),
            StepKind.CONDITION: ("Outcome",),
            StepKind.TRANSFORM: ("TransformJobName",),
        }.get(self.kind, ())
        if len(parts) == 1 and head in singles:
            return None
        known = ["Outputs.<name>"] + (["Properties.<key>"] if self.kind.runs_code else [])
        known += ["Metrics.<key>"] if self.kind is StepKind.EVALUATION else []
        return f"a {self.kind} step exposes {', '.join(known + list(singles))}"

    @property
    def gate_steps(self) -> tuple[str, ...]:
        return self.if_steps + self.else_steps
