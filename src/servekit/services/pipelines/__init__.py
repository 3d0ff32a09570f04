"""Pipelines: steps (process data, train, evaluate, condition, register, transform, deploy, fail) whose
references to each other make a DAG, run with append-only artifacts, lineage, caching, retries, timeouts and
least-privilege storage. See docs/pipelines.md."""

from servekit.services.pipelines.definition.conditions import (
    Condition,
    Equals,
    GreaterThan,
    GreaterThanOrEqualTo,
    In,
    LessThan,
    LessThanOrEqualTo,
    Not,
    Or,
)
from servekit.services.pipelines.definition.dsl import (
    command,
    condition,
    deploy,
    evaluation,
    fail,
    processing,
    register_model,
    step,
    training,
    transform,
)
from servekit.services.pipelines.definition.loading import load_pipeline
from servekit.services.pipelines.definition.pipeline import Parameter, ParameterType, Pipeline, parameter
from servekit.services.pipelines.definition.refs import Execution, Get, Join, Param
from servekit.services.pipelines.definition.steps import CacheConfig, RetryPolicy, Step, StepKind
from servekit.services.pipelines.errors import PipelineError, StepAccessDenied

__all__ = [
    "CacheConfig",
    "Condition",
    "Equals",
    "Execution",
    "Get",
    "GreaterThan",
    "GreaterThanOrEqualTo",
    "In",
    "Join",
    "LessThan",
    "LessThanOrEqualTo",
    "Not",
    "Or",
    "Param",
    "Parameter",
    "ParameterType",
    "Pipeline",
    "PipelineError",
    "RetryPolicy",
    "Step",
    "StepAccessDenied",
    "StepKind",
    "command",
    "condition",
    "deploy",
    "evaluation",
    "fail",
    "load_pipeline",
    "parameter",
    "processing",
    "register_model",
    "step",
    "training",
    "transform",
]
