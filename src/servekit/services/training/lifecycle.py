"""A training job's status and secondary status (SageMaker's words, checked against botocore's model in a test),
with the moves a job may make."""

from __future__ import annotations

from enum import StrEnum


class TrainingJobStatus(StrEnum):
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"

    @property
    def terminal(self) -> bool:
        return self in (TrainingJobStatus.COMPLETED, TrainingJobStatus.FAILED, TrainingJobStatus.STOPPED)


class SecondaryStatus(StrEnum):
    STARTING = "Starting"
    DOWNLOADING = "Downloading"
    TRAINING = "Training"
    UPLOADING = "Uploading"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
    COMPLETED = "Completed"
    FAILED = "Failed"


_LEGAL: dict[TrainingJobStatus | None, frozenset[TrainingJobStatus]] = {
    None: frozenset({TrainingJobStatus.IN_PROGRESS}),
    TrainingJobStatus.IN_PROGRESS: frozenset(
        {TrainingJobStatus.COMPLETED, TrainingJobStatus.FAILED, TrainingJobStatus.STOPPING, TrainingJobStatus.STOPPED}
    ),
    # a stop that arrives while the model uploads lets the job finish; one that kills the script ends it Stopped
    TrainingJobStatus.STOPPING: frozenset(
        {TrainingJobStatus.STOPPED, TrainingJobStatus.COMPLETED, TrainingJobStatus.FAILED}
    ),
    TrainingJobStatus.COMPLETED: frozenset(),
    TrainingJobStatus.FAILED: frozenset(),
    TrainingJobStatus.STOPPED: frozenset(),
}


class IllegalTransition(ValueError):
    pass


def check_transition(old: TrainingJobStatus | None, new: TrainingJobStatus) -> None:
    if new not in _LEGAL[old]:
        raise IllegalTransition(f"a training job cannot go from {old} to {new}")
