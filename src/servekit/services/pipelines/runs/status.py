"""Lifecycles of a pipeline run and of each of its steps (SageMaker's PipelineExecutionStatus and StepStatus
words), with their legal transitions."""

from __future__ import annotations

import enum

from servekit.errors import IllegalTransition


class RunStatus(enum.StrEnum):
    """SageMaker's PipelineExecutionStatus."""

    EXECUTING = "Executing"
    STOPPING = "Stopping"  # asked to stop: running steps are being killed
    STOPPED = "Stopped"  # a resume continues it
    FAILED = "Failed"  # a step failed (or a Fail step ran); a resume re-runs the failed steps
    SUCCEEDED = "Succeeded"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.STOPPED, RunStatus.FAILED, RunStatus.SUCCEEDED)


RUN_TRANSITIONS: dict[RunStatus | None, frozenset[RunStatus]] = {
    None: frozenset({RunStatus.EXECUTING}),
    # Executing -> Executing: a resume takes over a run whose process died (SIGKILL, power loss).
    RunStatus.EXECUTING: frozenset(
        {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPING, RunStatus.STOPPED, RunStatus.EXECUTING}
    ),
    RunStatus.STOPPING: frozenset({RunStatus.STOPPED, RunStatus.FAILED}),
    RunStatus.STOPPED: frozenset({RunStatus.EXECUTING}),  # resume
    RunStatus.FAILED: frozenset({RunStatus.EXECUTING}),  # resume: the failed steps run again
    RunStatus.SUCCEEDED: frozenset(),
}


class StepStatus(enum.StrEnum):
    """SageMaker's StepStatus. A step of a run that never started (a condition's other branch, a run that failed
    first) has no status at all, as in ListPipelineExecutionSteps."""

    STARTING = "Starting"  # resolving inputs, looking up the cache
    EXECUTING = "Executing"  # running (or waiting out a retry's backoff)
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    FAILED = "Failed"
    SUCCEEDED = "Succeeded"


STEP_TRANSITIONS: dict[StepStatus | None, frozenset[StepStatus]] = {
    None: frozenset({StepStatus.STARTING}),
    # Starting -> Succeeded: a cache hit (or a condition, evaluated at once); Starting -> Failed: an input that
    # does not resolve.
    StepStatus.STARTING: frozenset({StepStatus.EXECUTING, StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.STOPPED}),
    # Executing -> Executing: the next attempt of a retried step.
    StepStatus.EXECUTING: frozenset(
        {StepStatus.EXECUTING, StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.STOPPING, StepStatus.STOPPED}
    ),
    StepStatus.STOPPING: frozenset({StepStatus.STOPPED, StepStatus.FAILED, StepStatus.SUCCEEDED}),
    StepStatus.STOPPED: frozenset({StepStatus.STARTING}),  # resume
    StepStatus.FAILED: frozenset({StepStatus.STARTING}),  # resume
    StepStatus.SUCCEEDED: frozenset(),
}


def check_run_transition(current: RunStatus | None, new: RunStatus) -> RunStatus:
    if new not in RUN_TRANSITIONS[current]:
        raise IllegalTransition(f"a pipeline run cannot go from {current or 'new'} to {new}")
    return new


def check_step_transition(step: str, current: StepStatus | None, new: StepStatus) -> StepStatus:
    if new not in STEP_TRANSITIONS[current]:
        raise IllegalTransition(f"step {step!r} cannot go from {current or 'not started'} to {new}")
    return new
