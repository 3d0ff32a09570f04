"""Lifecycles of a transform job and of each input object, with their legal transitions."""

from __future__ import annotations

import enum

from servekit.errors import IllegalTransition


class JobStatus(enum.StrEnum):
    """SageMaker's TransformJobStatus plus CompletedWithErrors (records failed, every object has an output)."""

    IN_PROGRESS = "InProgress"  # a process is running the job (or died running it: a re-run takes over)
    COMPLETED = "Completed"  # every object has its whole output
    COMPLETED_WITH_ERRORS = "CompletedWithErrors"  # ... and some records are in <name>.out.errors.jsonl
    FAILED = "Failed"  # at least one object has no output (strict-mode record failure, unreadable object, ...)
    STOPPING = "Stopping"  # asked to stop; mini-batches in flight are finishing
    STOPPED = "Stopped"  # stopped before the end; a re-run resumes

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS)


_ENDINGS = frozenset({JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS, JobStatus.FAILED, JobStatus.STOPPED})

TRANSITIONS: dict[JobStatus | None, frozenset[JobStatus]] = {
    None: frozenset({JobStatus.IN_PROGRESS}),  # created
    # InProgress -> InProgress: a re-run takes over a job whose process died (SIGKILL, power loss).
    JobStatus.IN_PROGRESS: _ENDINGS | {JobStatus.STOPPING, JobStatus.IN_PROGRESS},
    JobStatus.STOPPING: frozenset({JobStatus.STOPPED, JobStatus.FAILED}),
    JobStatus.STOPPED: frozenset({JobStatus.IN_PROGRESS}),  # resume
    JobStatus.FAILED: frozenset({JobStatus.IN_PROGRESS}),  # re-run the objects that have no output
    JobStatus.COMPLETED: frozenset(),
    JobStatus.COMPLETED_WITH_ERRORS: frozenset(),
}


def check_transition(current: JobStatus | None, new: JobStatus) -> JobStatus:
    if new not in TRANSITIONS[current]:
        raise IllegalTransition(f"a transform job cannot go from {current or 'new'} to {new}")
    return new


class ObjectStatus(enum.StrEnum):
    """One input object. Only DONE objects are skipped when a job runs again."""

    PENDING = "Pending"
    DONE = "Done"  # its .out (and errors file, if any) is in place
    FAILED = "Failed"  # no output: strict-mode record failure, unreadable input, worker died
