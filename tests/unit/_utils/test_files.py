"""read_beneath: a file a job wrote is read without following a link out of the job's folder (issue 44)."""

from __future__ import annotations

import os
from pathlib import Path

import botocore.session
import pytest

from servekit._utils.files import read_beneath
from servekit.services.training.store import FAILURE_REASON_MAX


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "secret.json").write_text('{"key": "s3cr3t"}')
    (tmp_path / "ml" / "output").mkdir(parents=True)
    return tmp_path / "ml"


def test_a_regular_file_is_read_up_to_the_limit(job: Path) -> None:
    (job / "output" / "failure").write_bytes("é".encode() * 3000)
    assert read_beneath(job, "output/failure", 10) == "é" * 5
    assert read_beneath(job, "output/failure", 1 << 20) == "é" * 3000
    assert read_beneath(job, "output/message", 100) is None  # none written


def test_a_link_anywhere_in_the_path_is_not_followed(job: Path, tmp_path: Path) -> None:
    (job / "output" / "failure").symlink_to(tmp_path / "secret.json")
    assert read_beneath(job, "output/failure", 100) is None
    os.rename(job / "output", job / "real")
    (job / "real" / "failure").unlink()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "failure").write_text("s3cr3t")
    (job / "output").symlink_to(tmp_path / "elsewhere")  # a folder on the way replaced with a link
    assert read_beneath(job, "output/failure", 100) is None


def test_a_fifo_or_a_hard_link_is_refused(job: Path, tmp_path: Path) -> None:
    os.mkfifo(job / "output" / "failure")  # opening it for reading would block the plane
    assert read_beneath(job, "output/failure", 100) is None
    os.link(tmp_path / "secret.json", job / "output" / "message")
    assert read_beneath(job, "output/message", 100) is None


def test_paths_that_climb_are_a_programming_error(job: Path) -> None:
    for bad in ("../secret.json", "output/../../secret.json", "./x", ""):
        with pytest.raises(ValueError):
            read_beneath(job, bad, 10)


def test_failure_reasons_are_as_long_as_sagemakers_model_allows() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    assert model.shape_for("FailureReason").metadata["max"] == FAILURE_REASON_MAX
