"""The endpoint and instance lifecycles: every (from, to) pair is classified here, so a status added to either enum
without deciding its edges fails this file."""

from __future__ import annotations

import itertools

import pytest

from servekit.errors import IllegalTransition
from servekit.services.hosting.lifecycle import (
    ENDPOINT_TRANSITIONS,
    INSTANCE_TRANSITIONS,
    EndpointStatus,
    InstanceState,
    check_instance_transition,
    check_transition,
    predecessors,
)

E = EndpointStatus
I = InstanceState  # noqa: E741

# The decided edges, written out again (not derived from the module): a change to either side must be deliberate.
ENDPOINT_EDGES: set[tuple[EndpointStatus | None, EndpointStatus]] = {
    (None, E.CREATING),
    (E.CREATING, E.IN_SERVICE),
    (E.CREATING, E.FAILED),
    (E.CREATING, E.DELETING),
    (E.IN_SERVICE, E.UPDATING),
    (E.IN_SERVICE, E.SYSTEM_UPDATING),
    (E.IN_SERVICE, E.OUT_OF_SERVICE),
    (E.IN_SERVICE, E.DELETING),
    (E.UPDATING, E.IN_SERVICE),
    (E.UPDATING, E.ROLLING_BACK),
    (E.UPDATING, E.FAILED),
    (E.UPDATING, E.DELETING),
    (E.SYSTEM_UPDATING, E.IN_SERVICE),
    (E.SYSTEM_UPDATING, E.OUT_OF_SERVICE),
    (E.SYSTEM_UPDATING, E.FAILED),
    (E.SYSTEM_UPDATING, E.DELETING),
    (E.ROLLING_BACK, E.IN_SERVICE),
    (E.ROLLING_BACK, E.UPDATE_ROLLBACK_FAILED),
    (E.ROLLING_BACK, E.DELETING),
    (E.UPDATE_ROLLBACK_FAILED, E.UPDATING),
    (E.UPDATE_ROLLBACK_FAILED, E.DELETING),
    (E.OUT_OF_SERVICE, E.SYSTEM_UPDATING),
    (E.OUT_OF_SERVICE, E.IN_SERVICE),
    (E.OUT_OF_SERVICE, E.FAILED),
    (E.OUT_OF_SERVICE, E.DELETING),
    (E.FAILED, E.DELETING),
}

INSTANCE_EDGES: set[tuple[InstanceState | None, InstanceState]] = {
    (None, I.PENDING),
    (I.PENDING, I.STARTING),
    (I.PENDING, I.STOPPED),
    (I.PENDING, I.FAILED),
    (I.STARTING, I.HEALTHY),
    (I.STARTING, I.STOPPED),
    (I.STARTING, I.FAILED),
    (I.HEALTHY, I.DRAINING),
    (I.HEALTHY, I.FAILED),
    (I.DRAINING, I.STOPPED),
    (I.DRAINING, I.FAILED),
}

_ENDPOINT_PAIRS = list(itertools.product([None, *EndpointStatus], EndpointStatus))
_INSTANCE_PAIRS = list(itertools.product([None, *InstanceState], InstanceState))


def test_the_values_are_sagemakers() -> None:
    assert {s.value for s in EndpointStatus} == {
        "OutOfService",
        "Creating",
        "Updating",
        "SystemUpdating",
        "RollingBack",
        "InService",
        "Deleting",
        "Failed",
        "UpdateRollbackFailed",
    }
    assert EndpointStatus("InService") is E.IN_SERVICE and str(E.IN_SERVICE) == "InService"


def test_every_status_has_a_row_in_each_table() -> None:
    assert set(ENDPOINT_TRANSITIONS) == {None, *EndpointStatus}
    assert set(INSTANCE_TRANSITIONS) == {None, *InstanceState}


@pytest.mark.parametrize(("old", "new"), _ENDPOINT_PAIRS, ids=lambda s: str(s))
def test_every_endpoint_pair_is_classified(old: EndpointStatus | None, new: EndpointStatus) -> None:
    if (old, new) in ENDPOINT_EDGES:
        assert check_transition(old, new) is new
    else:
        with pytest.raises(IllegalTransition, match=f"cannot go from {old or 'nothing'} to {new}"):
            check_transition(old, new)


@pytest.mark.parametrize(("old", "new"), _INSTANCE_PAIRS, ids=lambda s: str(s))
def test_every_instance_pair_is_classified(old: InstanceState | None, new: InstanceState) -> None:
    if (old, new) in INSTANCE_EDGES:
        assert check_instance_transition(old, new) is new
    else:
        with pytest.raises(IllegalTransition):
            check_instance_transition(old, new)


def test_the_tables_hold_exactly_the_decided_edges() -> None:
    assert {(o, n) for o, targets in ENDPOINT_TRANSITIONS.items() for n in targets} == ENDPOINT_EDGES
    assert {(o, n) for o, targets in INSTANCE_TRANSITIONS.items() for n in targets} == INSTANCE_EDGES


def test_no_status_goes_to_itself_and_every_status_can_reach_deletion() -> None:
    assert all(old != new for old, new in ENDPOINT_EDGES)
    for status in EndpointStatus:
        seen, todo = {status}, [status]
        while todo:
            for nxt in ENDPOINT_TRANSITIONS[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        assert E.DELETING in seen, status


def test_any_live_instance_may_fail_and_final_states_are_final() -> None:
    for state in InstanceState:
        if state.final:
            assert INSTANCE_TRANSITIONS[state] == frozenset()
        else:
            assert I.FAILED in INSTANCE_TRANSITIONS[state]
    assert {s for s in InstanceState if s.takes_traffic} == {I.HEALTHY}


def test_derived_views() -> None:
    assert {s for s in EndpointStatus if s.takes_traffic} == {
        E.IN_SERVICE,
        E.UPDATING,
        E.SYSTEM_UPDATING,
        E.ROLLING_BACK,
        E.UPDATE_ROLLBACK_FAILED,
    }
    assert {s for s in EndpointStatus if s.accepts_update} == {E.IN_SERVICE, E.UPDATE_ROLLBACK_FAILED}
    assert predecessors(E.DELETING) == frozenset(EndpointStatus) - {E.DELETING}
    assert predecessors(E.CREATING) == frozenset()
    assert predecessors(E.ROLLING_BACK) == {E.UPDATING}
