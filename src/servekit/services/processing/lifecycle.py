"""A processing job's status (SageMaker's words, checked against botocore's model in a test) and its legal moves."""

from __future__ import annotations

from enum import StrEnum


class ProcessingJobStatus(StrEnum):
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"

    @property
    def terminal(self) -> bool:
        return self in (ProcessingJobStatus.COMPLETED, ProcessingJobStatus.FAILED, ProcessingJobStatus.STOPPED)


_LEGAL: dict[ProcessingJobStatus, frozenset[ProcessingJobStatus]] = {
    ProcessingJobStatus.IN_PROGRESS: frozenset(
        {
            ProcessingJobStatus.COMPLETED,
            ProcessingJobStatus.FAILED,
            ProcessingJobStatus.STOPPING,
            ProcessingJobStatus.STOPPED,
        }
    ),
    ProcessingJobStatus.STOPPING: frozenset(
        {ProcessingJobStatus.STOPPED, ProcessingJobStatus.COMPLETED, ProcessingJobStatus.FAILED}
    ),
    ProcessingJobStatus.COMPLETED: frozenset(),
    ProcessingJobStatus.FAILED: frozenset(),
    ProcessingJobStatus.STOPPED: frozenset(),
}


class IllegalTransition(ValueError):
    pass


def check_transition(old: ProcessingJobStatus, new: ProcessingJobStatus) -> None:
    if new not in _LEGAL[old]:
        raise IllegalTransition(f"a processing job cannot go from {old} to {new}")
