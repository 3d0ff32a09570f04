"""The decisions of a SageMaker pipeline's execution that are not scheduling, as pure functions: a step's cache key
(which earlier job a ``CacheConfig`` may reuse) and whether a failed attempt is retried, and when (``RetryPolicies``).

Caching follows SageMaker's default cache-key attributes per step type: the arguments that say what the job
computes and from what (its image, code, inputs and hyperparameters), not where it writes. An SDK step's output
paths hold ``Execution.PipelineExecutionId``, so keying on them would never hit; SageMaker leaves them out for the
same reason, and a hit reuses the earlier job's outputs where they are."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servekit.services.pipelines.sagemaker.model import RetryPolicy, StepType

CACHE_KEY_ATTRIBUTES: dict[StepType, tuple[str, ...]] = {
    StepType.PROCESSING: ("AppSpecification", "Environment", "ProcessingInputs"),
    StepType.TRAINING: (
        "AlgorithmSpecification",
        "CheckpointConfig",
        "DebugHookConfig",
        "DebugRuleConfigurations",
        "Environment",
        "HyperParameters",
        "InputDataConfig",
    ),
    StepType.TRANSFORM: ("DataProcessing", "Environment", "ModelName", "TransformInput"),
    StepType.TUNING: ("HyperParameterTuningJobConfig", "TrainingJobDefinition", "TrainingJobDefinitions"),
}


def cache_key(step_type: StepType, arguments: Mapping[str, Any]) -> str:
    """The key of a step's evaluated arguments (the request it would send): equal keys, reusable job."""
    attributes = CACHE_KEY_ATTRIBUTES.get(step_type)
    if attributes is None:
        return ""
    picked = {a: arguments[a] for a in attributes if a in arguments}
    text = json.dumps({"Type": str(step_type), "Arguments": picked}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# What went wrong, as RetryPolicies' ExceptionType names it.
SERVICE_FAULT = "Step.SERVICE_FAULT"
THROTTLING = "Step.THROTTLING"
JOB_INTERNAL_ERROR = "SageMaker.JOB_INTERNAL_ERROR"
CAPACITY_ERROR = "SageMaker.CAPACITY_ERROR"
RESOURCE_LIMIT = "SageMaker.RESOURCE_LIMIT"


def call_failure_type(code: str, status: int) -> str | None:
    """A service call's error (its code and HTTP status) as a retryable exception type, or None (a client error:
    the same request fails again)."""
    if code in ("ThrottlingException", "Throttling", "TooManyRequestsException") or status == 429:
        return THROTTLING
    if code == "ResourceLimitExceeded":
        return RESOURCE_LIMIT
    if status >= 500:
        return SERVICE_FAULT
    return None


def job_failure_type(reason: str) -> str | None:
    """A failed job's FailureReason as a retryable exception type: the job's own error (the script raised, the
    data was wrong) is not retried, as on SageMaker; what the platform did to it is."""
    lowered = reason.lower()
    # (servekit up's own words when a restart ended a job its previous run had started)
    if lowered.startswith(("internalservererror", "internal error", "internalfailure", "servekit up stopped while")):
        return JOB_INTERNAL_ERROR
    if "capacity" in lowered or "out of memory" in lowered:
        return CAPACITY_ERROR
    return None


@dataclass(frozen=True, slots=True)
class Retry:
    delay_s: float  # wait this long before the next attempt


def retry(
    policies: Sequence[RetryPolicy], failure_type: str | None, retries_done: int, first_failure_s: float, now_s: float
) -> Retry | None:
    """Whether to retry a step whose attempt failed with ``failure_type`` (None: never), given the retries already
    made and when its first attempt failed. The first policy naming the type decides: the n-th retry waits
    ``IntervalSeconds * BackoffRate^(n-1)``, for at most ``MaxAttempts`` retries or until ``ExpireAfterMin``
    after the first failure (neither given: one retry)."""
    if failure_type is None:
        return None
    policy = next((p for p in policies if failure_type in p.exception_types), None)
    if policy is None:
        return None
    delay = policy.interval_seconds * policy.backoff_rate**retries_done
    if policy.expire_after_min is not None:
        if now_s + delay > first_failure_s + policy.expire_after_min * 60:
            return None
    elif retries_done >= (policy.max_attempts if policy.max_attempts is not None else 1):
        return None
    return Retry(delay)
