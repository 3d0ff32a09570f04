"""An Inference Recommender job's lifecycle: SageMaker's words (from botocore's model) and the legal edges."""

from __future__ import annotations

import botocore.session
import pytest

from servekit.errors import IllegalTransition
from servekit.tools.recommend.lifecycle import TRANSITIONS, UNFINISHED, RecommendJobStatus, check_transition


def test_every_status_is_one_of_sagemakers_recommendation_job_statuses() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    allowed = set(model.shape_for("RecommendationJobStatus").enum)
    assert {str(s) for s in RecommendJobStatus} <= allowed


def test_a_job_runs_once_and_ends_completed_or_failed() -> None:
    assert check_transition(None, RecommendJobStatus.PENDING) is RecommendJobStatus.PENDING
    assert (
        check_transition(RecommendJobStatus.PENDING, RecommendJobStatus.IN_PROGRESS) is RecommendJobStatus.IN_PROGRESS
    )
    for end in (RecommendJobStatus.COMPLETED, RecommendJobStatus.FAILED):
        assert check_transition(RecommendJobStatus.IN_PROGRESS, end) is end
        assert end.final and TRANSITIONS[end] == frozenset()
    assert UNFINISHED == (RecommendJobStatus.PENDING, RecommendJobStatus.IN_PROGRESS)


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (None, RecommendJobStatus.IN_PROGRESS),
        (RecommendJobStatus.PENDING, RecommendJobStatus.COMPLETED),
        (RecommendJobStatus.COMPLETED, RecommendJobStatus.IN_PROGRESS),
        (RecommendJobStatus.FAILED, RecommendJobStatus.PENDING),
    ],
)
def test_illegal_moves_are_refused(current: RecommendJobStatus | None, new: RecommendJobStatus) -> None:
    with pytest.raises(IllegalTransition, match="a recommendation job cannot go from"):
        check_transition(current, new)
