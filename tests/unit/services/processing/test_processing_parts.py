"""Processing jobs' pure parts: where LocalPaths may be, nested mounts, statuses against botocore's model."""

from __future__ import annotations

from pathlib import Path

import botocore.session
import pytest

from servekit.services.processing.lifecycle import IllegalTransition, ProcessingJobStatus, check_transition
from servekit.services.processing.runner import local_path_problem, nest


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("/opt/ml/processing/input", True),
        ("/opt/ml/processing/input/code", True),
        ("/opt/ml/processing/../../etc", False),
        ("/etc/input", False),
        ("opt/ml/processing/x", False),
    ],
)
def test_local_paths_live_under_opt_ml_processing(path: str, ok: bool) -> None:
    assert (local_path_problem(path) is None) is ok


def test_an_inner_mount_gets_its_point_in_the_outer_folder(tmp_path: Path) -> None:
    outer, inner, out = tmp_path / "in", tmp_path / "code", tmp_path / "out"
    for d in (outer, inner, out):
        d.mkdir()
    mounts = [
        (inner, "/opt/ml/processing/input/code", False),
        (out, "/opt/ml/processing/train", True),
        (outer, "/opt/ml/processing/input", False),
    ]
    ordered = nest(mounts)
    assert next(m[1] for m in ordered) in ("/opt/ml/processing/input", "/opt/ml/processing/train")
    assert [m[1] for m in ordered].index("/opt/ml/processing/input") < [m[1] for m in ordered].index(
        "/opt/ml/processing/input/code"
    )
    assert (outer / "code").is_dir() and not (out / "code").exists()


def test_statuses() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    assert {s.value for s in ProcessingJobStatus} == set(model.shape_for("ProcessingJobStatus").enum)
    check_transition(ProcessingJobStatus.IN_PROGRESS, ProcessingJobStatus.STOPPING)
    with pytest.raises(IllegalTransition):
        check_transition(ProcessingJobStatus.FAILED, ProcessingJobStatus.COMPLETED)


def test_describe_of_a_name_that_is_not_a_processing_job_asks_monitoring(tmp_path: Path) -> None:
    import asyncio

    from servekit.aws.names import Account
    from servekit.services.database import StateDB
    from servekit.services.processing.api import ProcessingJobsApi
    from servekit.services.processing.runner import ProcessingRunner

    asked: list[str] = []

    async def monitoring_describe(p: dict[str, object]) -> dict[str, object]:
        asked.append(str(p["ProcessingJobName"]))
        return {"ProcessingJobName": p["ProcessingJobName"], "ProcessingJobStatus": "Completed"}

    with StateDB.open(tmp_path) as db:
        runner = ProcessingRunner(db.sagemaker_jobs, tmp_path, files=None, logs=None, python="python3")  # type: ignore[arg-type]
        api = ProcessingJobsApi(db.sagemaker_jobs, runner, Account(), monitoring_describe)
        got = asyncio.run(api.describe_processing_job({"ProcessingJobName": "model-monitor-exec-1"}))
    assert asked == ["model-monitor-exec-1"] and got["ProcessingJobStatus"] == "Completed"
