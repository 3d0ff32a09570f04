"""The SageMaker jobs aggregate: one row per kind and name, details merged, listed per kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.services.database import StateDB
from servekit.services.training.store import JobExists


def test_rows_by_kind_and_name(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as db:
        jobs = db.sagemaker_jobs
        jobs.create("training", "a", "arn:a", {"X": 1}, "InProgress", "Starting")
        jobs.create("processing", "a", "arn:pa", {}, "InProgress", "")  # another kind may reuse the name
        with pytest.raises(JobExists):
            jobs.create("training", "a", "arn:a", {}, "InProgress", "Starting")
        jobs.update("training", "a", details={"k": 1})
        jobs.update("training", "a", status="Completed", details={"m": 2}, final=True)
        row = jobs.get("training", "a")
        assert row is not None and row.details == {"k": 1, "m": 2} and row.status == "Completed"
        assert row.ended is not None and row.request == {"X": 1}
        assert [r.name for r in jobs.list("training").items] == ["a"]
        assert jobs.unfinished("processing", ("InProgress",)) == ["a"]
        assert jobs.unfinished("training", ("InProgress",)) == []


def test_a_failure_reason_is_kept_to_1024_characters(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as db:
        jobs = db.sagemaker_jobs
        jobs.create("training", "long", "arn:l", {}, "InProgress", "Starting")
        jobs.update("training", "long", status="Failed", reason="é" * 5000, final=True)
        row = jobs.get("training", "long")
        assert row is not None and row.failure_reason == "é" * 1024
