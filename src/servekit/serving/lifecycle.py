"""The servable lifecycle as an explicit state machine."""

from __future__ import annotations

import enum

from servekit.errors import IllegalTransition


class ServableState(enum.Enum):
    NEW = "NEW"  # aspired, not started loading
    LOADING = "LOADING"  # loading, warming up, or waiting to retry a failed load
    AVAILABLE = "AVAILABLE"  # takes requests
    UNLOADING = "UNLOADING"  # takes no new requests; waits for leases, then unloads
    END = "END"  # gone
    ERROR = "ERROR"  # failed to load after every retry; never takes traffic

    @property
    def tf_name(self) -> str:
        """The name TF Serving's GetModelStatus uses (NEW is START; ERROR is END with an error status)."""
        return {"NEW": "START", "ERROR": "END"}.get(self.value, self.value)


_ALLOWED: dict[ServableState, frozenset[ServableState]] = {
    ServableState.NEW: frozenset({ServableState.LOADING, ServableState.END}),
    ServableState.LOADING: frozenset({ServableState.AVAILABLE, ServableState.END}),
    ServableState.AVAILABLE: frozenset({ServableState.UNLOADING}),
    ServableState.UNLOADING: frozenset({ServableState.END}),
    ServableState.END: frozenset(),
    ServableState.ERROR: frozenset({ServableState.END}),
}


def check_transition(old: ServableState, new: ServableState) -> None:
    """Raise unless ``old -> new`` is an edge; any live state may go to ERROR."""
    if new is ServableState.ERROR and old not in (ServableState.END, ServableState.ERROR):
        return
    if new not in _ALLOWED[old]:
        raise IllegalTransition(f"servable state {old.value} -> {new.value} is not allowed")
