"""The lifecycle of an Inference Recommender job: SageMaker's ``RecommendationJobStatus`` values servekit uses, with
their legal transitions. servekit's jobs are not stopped by the API (StopInferenceRecommendationsJob is not served),
so STOPPING and STOPPED never occur."""

from __future__ import annotations

import enum

from servekit.errors import IllegalTransition


class RecommendJobStatus(enum.StrEnum):
    PENDING = "PENDING"  # accepted; its run has not started
    IN_PROGRESS = "IN_PROGRESS"  # instances are being measured
    COMPLETED = "COMPLETED"  # a recommendation met the SLO; the report is written
    FAILED = "FAILED"  # no instance type met the SLO, the run raised, or servekit up stopped while it ran

    @property
    def final(self) -> bool:
        return self in (RecommendJobStatus.COMPLETED, RecommendJobStatus.FAILED)


_S = RecommendJobStatus
TRANSITIONS: dict[RecommendJobStatus | None, frozenset[RecommendJobStatus]] = {
    None: frozenset({_S.PENDING}),
    _S.PENDING: frozenset({_S.IN_PROGRESS, _S.FAILED}),  # FAILED: servekit up stopped before the run started
    _S.IN_PROGRESS: frozenset({_S.COMPLETED, _S.FAILED}),
    _S.COMPLETED: frozenset(),
    _S.FAILED: frozenset(),
}
UNFINISHED = tuple(s for s in RecommendJobStatus if not s.final)


def check_transition(current: RecommendJobStatus | None, new: RecommendJobStatus) -> RecommendJobStatus:
    if new not in TRANSITIONS[current]:
        raise IllegalTransition(f"a recommendation job cannot go from {current or 'new'} to {new}")
    return new
