"""A model package version's approval: SageMaker's ``ModelApprovalStatus`` as a lifecycle with legal transitions,
(who made a change comes from the API front's ``current_caller``).

SageMaker documents these changes for CI/CD (Pending → Approved, Pending → Rejected, Rejected → Approved,
Approved → Rejected); servekit allows exactly those, plus "no change" (which may update the ApprovalDescription
and records no history event). Going back to ``PendingManualApproval`` is refused: a decision, once made, is
changed by another decision, never undone into "undecided", so the history always reads as decisions.
"""

from __future__ import annotations

import enum


class ModelApproval(enum.StrEnum):
    # PENDING: registered (by a pipeline's register step, or by hand) and waiting for a person; the default.
    PENDING = "PendingManualApproval"
    # APPROVED: may be deployed: CreateModel accepts it by ModelPackageName, and a group's deploy rule deploys it.
    APPROVED = "Approved"
    # REJECTED: must not be deployed; kept (never deleted by servekit) so its history and lineage stay readable.
    REJECTED = "Rejected"


_A = ModelApproval
TRANSITIONS: dict[ModelApproval, frozenset[ModelApproval]] = {
    _A.PENDING: frozenset({_A.APPROVED, _A.REJECTED}),
    _A.APPROVED: frozenset({_A.REJECTED}),
    _A.REJECTED: frozenset({_A.APPROVED}),
}


class IllegalApproval(ValueError):
    """A change of approval status that the lifecycle does not allow."""


def check_approval(current: ModelApproval, to: ModelApproval) -> None:
    """Nothing when ``current`` → ``to`` is legal (or no change); :class:`IllegalApproval` saying what is."""
    if to is current or to in TRANSITIONS[current]:
        return
    allowed = " or ".join(sorted(TRANSITIONS[current])) or "nothing"
    raise IllegalApproval(f"A model package that is {current} can be changed to {allowed}, not to {to}.")
