"""``servekit transform run --model`` takes a model base as ``servekit deploy`` does (its newest version) or a
version directory, and its summary's rate says something for a slow job (issue 46, item 8)."""

from __future__ import annotations

from pathlib import Path

from servekit.cli.transform_cmd import _newest_version
from servekit.cli.transform_display import summary_text
from servekit.services.transform.job import JobSummary
from servekit.services.transform.status import JobStatus


def test_a_base_means_its_newest_version_and_a_version_is_itself(tmp_path: Path) -> None:
    for version in ("1", "2", "10"):
        (tmp_path / "iris" / version).mkdir(parents=True)
    (tmp_path / "iris" / "notes").mkdir()
    assert _newest_version(str(tmp_path / "iris")) == str(tmp_path / "iris" / "10")
    assert _newest_version(str(tmp_path / "iris" / "2")) == str(tmp_path / "iris" / "2")
    assert _newest_version("s3://bucket/models/iris") == "s3://bucket/models/iris"
    assert _newest_version(None) is None


def test_a_slow_jobs_rate_is_not_rounded_to_zero() -> None:
    slow = JobSummary("j", JobStatus.COMPLETED, records=3, elapsed_s=8.0)
    assert "(0.38 records/s)" in summary_text(slow)
    fast = JobSummary("j", JobStatus.COMPLETED, records=12_345, elapsed_s=1.0)
    assert "(12,345 records/s)" in summary_text(fast)
