"""Lifecycles of a monitoring schedule and of one of its executions, each an enum with its legal transitions.

Schedule (SageMaker's ``ScheduleStatus``):

=========  =========  ==========================================================================================
from       to         when
=========  =========  ==========================================================================================
(none)     Pending    CreateMonitoringSchedule (the request was valid)
Pending    Scheduled  the scheduler took it up: its job definition and endpoint (with data capture) are there
Pending    Failed     ... they are not any more (FailureReason says which)
Pending    Stopped    StopMonitoringSchedule before it was taken up
Scheduled  Stopped    StopMonitoringSchedule: no new executions (one running finishes)
Scheduled  Pending    UpdateMonitoringSchedule: the new configuration is taken up like a new schedule
Scheduled  Failed     the scheduler cannot use it any more (its job definition vanished)
Stopped    Scheduled  StartMonitoringSchedule: the next fire after now runs
Failed     Pending    UpdateMonitoringSchedule with a configuration that may work
=========  =========  ==========================================================================================

UpdateMonitoringSchedule leaves a Stopped schedule Stopped. DeleteMonitoringSchedule removes a schedule in any
status (not a status change); its executions stay.

Execution (SageMaker's ``ExecutionStatus``): ``Pending`` (made for a fire time, waiting for a slot) →
``InProgress`` (``servekit monitor`` runs) → ``Completed`` | ``CompletedWithViolations`` (the analysed window broke
a constraint) | ``Failed`` (no captured data, a monitor error, MaxRuntimeInSeconds exceeded). ``Pending`` or
``InProgress`` → ``Stopping`` → ``Stopped`` when the schedule is deleted or servekit up stops while it runs; one
left unfinished by a crashed servekit up is marked ``Failed`` when the next one starts. Finished statuses are final.
"""

from __future__ import annotations

import enum

from servekit.errors import IllegalTransition


class ScheduleStatus(enum.StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    STOPPED = "Stopped"
    FAILED = "Failed"


_S = ScheduleStatus

SCHEDULE_TRANSITIONS: dict[ScheduleStatus | None, frozenset[ScheduleStatus]] = {
    None: frozenset({_S.PENDING}),
    _S.PENDING: frozenset({_S.SCHEDULED, _S.FAILED, _S.STOPPED}),
    _S.SCHEDULED: frozenset({_S.STOPPED, _S.PENDING, _S.FAILED}),
    _S.STOPPED: frozenset({_S.SCHEDULED}),
    _S.FAILED: frozenset({_S.PENDING}),
}


def check_schedule_transition(old: ScheduleStatus | None, new: ScheduleStatus) -> ScheduleStatus:
    if new not in SCHEDULE_TRANSITIONS[old]:
        raise IllegalTransition(f"a monitoring schedule cannot go from {old or 'nothing'} to {new}")
    return new


def schedule_predecessors(new: ScheduleStatus) -> frozenset[ScheduleStatus]:
    """Every status that may go to ``new`` (the ``expected`` of a compare-and-set status write)."""
    return frozenset(s for s, targets in SCHEDULE_TRANSITIONS.items() if s is not None and new in targets)


class ExecutionStatus(enum.StrEnum):
    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    COMPLETED_WITH_VIOLATIONS = "CompletedWithViolations"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"

    @property
    def final(self) -> bool:
        return not EXECUTION_TRANSITIONS[self]

    @property
    def processing_status(self) -> str:
        """The status of the execution's processing job (DescribeProcessingJob has no Pending nor violations)."""
        return _PROCESSING.get(self, self.value)


_X = ExecutionStatus
_PROCESSING = {_X.PENDING: "InProgress", _X.COMPLETED_WITH_VIOLATIONS: "Completed"}

EXECUTION_TRANSITIONS: dict[ExecutionStatus | None, frozenset[ExecutionStatus]] = {
    None: frozenset({_X.PENDING}),
    _X.PENDING: frozenset({_X.IN_PROGRESS, _X.FAILED, _X.STOPPING}),
    _X.IN_PROGRESS: frozenset({_X.COMPLETED, _X.COMPLETED_WITH_VIOLATIONS, _X.FAILED, _X.STOPPING}),
    _X.STOPPING: frozenset({_X.STOPPED, _X.FAILED}),
    _X.COMPLETED: frozenset(),
    _X.COMPLETED_WITH_VIOLATIONS: frozenset(),
    _X.FAILED: frozenset(),
    _X.STOPPED: frozenset(),
}

UNFINISHED = tuple(s.value for s in ExecutionStatus if not s.final)


def check_execution_transition(old: ExecutionStatus | None, new: ExecutionStatus) -> ExecutionStatus:
    if new not in EXECUTION_TRANSITIONS[old]:
        raise IllegalTransition(f"a monitoring execution cannot go from {old or 'nothing'} to {new}")
    return new
