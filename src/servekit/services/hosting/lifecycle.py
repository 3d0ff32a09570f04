"""Lifecycles of an endpoint and of an instance, each an enum with its legal transitions as an explicit table.

Endpoint statuses are SageMaker's ``EndpointStatus`` values. ``None`` stands for "no endpoint yet" (a create)
and for "gone" (the row deleted once ``Deleting`` has stopped every instance); a deleted endpoint has no status.
Each edge, and why it exists:

=====================  =======================  ==================================================================
from                   to                       when
=====================  =======================  ==================================================================
(none)                 Creating                 CreateEndpoint
Creating               InService                every variant has its instances healthy
Creating               Failed                   an instance cannot start (model load error, bad artifact); the
                                                FailureReason says which and why
Creating               Deleting                 DeleteEndpoint while creating: the starting instances are stopped
InService              Updating                 UpdateEndpoint or UpdateEndpointWeightsAndCapacities
InService              SystemUpdating           the control plane itself replaces the fleet (a restart re-creating
                                                instances); traffic keeps flowing where an instance is healthy
InService              OutOfService             no variant has a healthy instance and none can be started now
InService              Deleting                 DeleteEndpoint
Updating               InService                the update finished, or failed and the old fleet still serves
                                                (SageMaker keeps the endpoint InService with a FailureReason)
Updating               RollingBack              an alarm fired during a blue/green or rolling update
Updating               Failed                   the update failed and no fleet is left serving
Updating               Deleting                 DeleteEndpoint during an update: both fleets are stopped
SystemUpdating         InService                the fleet is back
SystemUpdating         OutOfService             ... no instance could be brought back for now
SystemUpdating         Failed                   the fleet cannot be brought back (its artifact is gone)
SystemUpdating         Deleting                 DeleteEndpoint
RollingBack            InService                the old fleet takes all traffic again (FailureReason says why)
RollingBack            UpdateRollbackFailed     the rollback itself failed: a mix of fleets serves
RollingBack            Deleting                 DeleteEndpoint
UpdateRollbackFailed   Updating                 UpdateEndpoint to a good config is the way out, as in SageMaker
UpdateRollbackFailed   Deleting                 DeleteEndpoint
OutOfService           SystemUpdating           the control plane tries to bring the fleet back
OutOfService           InService                an instance became healthy again without a fleet change
OutOfService           Failed                   bringing the fleet back cannot succeed
OutOfService           Deleting                 DeleteEndpoint
Failed                 Deleting                 a failed endpoint can only be deleted (SageMaker refuses updates)
Deleting               (gone)                   every instance stopped; the row is deleted (not a status change)
=====================  =======================  ==================================================================

No status goes to itself: a second UpdateEndpoint while ``Updating`` is refused, as SageMaker refuses it.

Instances: ``Pending`` (recorded, no process yet) → ``Starting`` (process started, health check not yet passed)
→ ``Healthy`` (takes traffic) → ``Draining`` (takes no new requests, finishing those in flight) → ``Stopped``.
Any live state may go to ``Failed`` (did not start, died, breached its memory limit); ``Stopped`` and ``Failed``
are final: a replacement is a new instance. An instance never started may go straight to ``Stopped``, and so may a
``Starting`` one (it took no traffic, so there is nothing to drain).
"""

from __future__ import annotations

import enum

from servekit.errors import IllegalTransition


class EndpointStatus(enum.StrEnum):
    """SageMaker's ``EndpointStatus``."""

    OUT_OF_SERVICE = "OutOfService"  # not available to take requests
    CREATING = "Creating"  # CreateEndpoint is starting the fleet
    UPDATING = "Updating"  # UpdateEndpoint / UpdateEndpointWeightsAndCapacities in progress
    SYSTEM_UPDATING = "SystemUpdating"  # the platform is replacing instances on its own
    ROLLING_BACK = "RollingBack"  # an update is being undone
    IN_SERVICE = "InService"  # takes requests
    DELETING = "Deleting"  # DeleteEndpoint is stopping the fleet
    FAILED = "Failed"  # could not be created or updated; see FailureReason
    UPDATE_ROLLBACK_FAILED = "UpdateRollbackFailed"  # the update and its rollback both failed

    @property
    def takes_traffic(self) -> bool:
        """Whether InvokeEndpoint is routed (to the instances that are healthy) rather than refused."""
        return self in _SERVING

    @property
    def accepts_update(self) -> bool:
        """Whether UpdateEndpoint / UpdateEndpointWeightsAndCapacities may start from this status."""
        return EndpointStatus.UPDATING in ENDPOINT_TRANSITIONS[self]


_SERVING = frozenset(
    {
        EndpointStatus.IN_SERVICE,
        EndpointStatus.UPDATING,
        EndpointStatus.SYSTEM_UPDATING,
        EndpointStatus.ROLLING_BACK,
        EndpointStatus.UPDATE_ROLLBACK_FAILED,
    }
)

_E = EndpointStatus

ENDPOINT_TRANSITIONS: dict[EndpointStatus | None, frozenset[EndpointStatus]] = {
    None: frozenset({_E.CREATING}),
    _E.CREATING: frozenset({_E.IN_SERVICE, _E.FAILED, _E.DELETING}),
    _E.IN_SERVICE: frozenset({_E.UPDATING, _E.SYSTEM_UPDATING, _E.OUT_OF_SERVICE, _E.DELETING}),
    _E.UPDATING: frozenset({_E.IN_SERVICE, _E.ROLLING_BACK, _E.FAILED, _E.DELETING}),
    _E.SYSTEM_UPDATING: frozenset({_E.IN_SERVICE, _E.OUT_OF_SERVICE, _E.FAILED, _E.DELETING}),
    _E.ROLLING_BACK: frozenset({_E.IN_SERVICE, _E.UPDATE_ROLLBACK_FAILED, _E.DELETING}),
    _E.UPDATE_ROLLBACK_FAILED: frozenset({_E.UPDATING, _E.DELETING}),
    _E.OUT_OF_SERVICE: frozenset({_E.SYSTEM_UPDATING, _E.IN_SERVICE, _E.FAILED, _E.DELETING}),
    _E.FAILED: frozenset({_E.DELETING}),
    _E.DELETING: frozenset(),  # the end is the row's deletion, not a status
}


def check_transition(old: EndpointStatus | None, new: EndpointStatus) -> EndpointStatus:
    """``new`` when ``old -> new`` is an edge of :data:`ENDPOINT_TRANSITIONS`; :class:`IllegalTransition` else."""
    if new not in ENDPOINT_TRANSITIONS[old]:
        raise IllegalTransition(f"an endpoint cannot go from {old or 'nothing'} to {new}")
    return new


def predecessors(new: EndpointStatus) -> frozenset[EndpointStatus]:
    """Every status that may go to ``new`` (the ``expected`` of a compare-and-set status write)."""
    return frozenset(s for s, targets in ENDPOINT_TRANSITIONS.items() if s is not None and new in targets)


class InstanceState(enum.StrEnum):
    """One instance of a variant: a serving process (or actor, or pod) on a port of its own."""

    PENDING = "Pending"  # recorded; nothing started yet
    STARTING = "Starting"  # started; its health check has not passed yet
    HEALTHY = "Healthy"  # passed its health check; takes traffic
    DRAINING = "Draining"  # takes no new requests; those in flight finish
    STOPPED = "Stopped"  # ended on purpose
    FAILED = "Failed"  # did not start, died or breached its envelope; last_error says how

    @property
    def final(self) -> bool:
        return self in (InstanceState.STOPPED, InstanceState.FAILED)

    @property
    def takes_traffic(self) -> bool:
        return self is InstanceState.HEALTHY


_I = InstanceState

INSTANCE_TRANSITIONS: dict[InstanceState | None, frozenset[InstanceState]] = {
    None: frozenset({_I.PENDING}),
    _I.PENDING: frozenset({_I.STARTING, _I.STOPPED, _I.FAILED}),
    _I.STARTING: frozenset({_I.HEALTHY, _I.STOPPED, _I.FAILED}),
    _I.HEALTHY: frozenset({_I.DRAINING, _I.FAILED}),
    _I.DRAINING: frozenset({_I.STOPPED, _I.FAILED}),
    _I.STOPPED: frozenset(),
    _I.FAILED: frozenset(),
}


def check_instance_transition(old: InstanceState | None, new: InstanceState) -> InstanceState:
    """``new`` when ``old -> new`` is an edge of :data:`INSTANCE_TRANSITIONS`; :class:`IllegalTransition` else."""
    if new not in INSTANCE_TRANSITIONS[old]:
        raise IllegalTransition(f"an instance cannot go from {old or 'nothing'} to {new}")
    return new
