"""Where a data-quality job definition's baseline is: a local folder, one of its JSON files, or an ``s3://`` URI of
servekit up's own store (a baselining job's output), found through the store's resolver the plane hands in."""

from __future__ import annotations

from pathlib import Path

import pytest

from servekit.services.monitoring.schedules.jobs import JobSpecError, baseline_folder


def test_an_s3_uri_of_the_planes_store_is_the_folder_holding_the_job_output(tmp_path: Path) -> None:
    results = tmp_path / "store" / "bucket" / "model-monitor" / "results"
    results.mkdir(parents=True)
    for name in ("statistics.json", "constraints.json", "baseline.json", "thresholds.json"):
        (results / name).write_text("{}")
    asked: list[str] = []

    def objects(uri: str) -> Path | None:
        asked.append(uri)
        return results if uri == "s3://bucket/model-monitor/results/" else None

    for uri in (
        "s3://bucket/model-monitor/results/constraints.json",
        "s3://bucket/model-monitor/results/statistics.json",
        "s3://bucket/model-monitor/results",
        "s3://bucket/model-monitor/results/",
    ):
        assert baseline_folder(uri, "ConstraintsResource.S3Uri", objects) == str(results)
    assert set(asked) == {"s3://bucket/model-monitor/results/"}
    assert baseline_folder(f"file://{results}/constraints.json", "C") == str(results)  # local as before


def test_an_s3_uri_elsewhere_or_without_servekits_summaries_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(JobSpecError, match="is not in servekit up's own S3 store"):
        baseline_folder("s3://other/constraints.json", "ConstraintsResource.S3Uri", lambda _: None)
    with pytest.raises(JobSpecError, match="is not in servekit up's own S3 store"):
        baseline_folder("s3://bucket/constraints.json", "ConstraintsResource.S3Uri")  # no store handed in
    (tmp_path / "constraints.json").write_text("{}")  # SageMaker's files only, e.g. from the real analyzer
    with pytest.raises(JobSpecError, match=r"DefaultModelMonitor\.suggest_baseline"):
        baseline_folder("s3://bucket/b/constraints.json", "ConstraintsResource.S3Uri", lambda _: tmp_path)
