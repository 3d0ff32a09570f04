"""Job state in SQLite under the servekit home: create, resume, refuse, take over, settle."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.errors import IllegalTransition
from servekit.services.transform.spec import TransformSpec
from servekit.services.transform.status import JobStatus, ObjectStatus
from servekit.services.transform.store import JobConflict, JobStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


SPEC = TransformSpec(name="job-1", input_uri="/in", output_path="/out", model="/m/1")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JobStore]:
    with JobStore(tmp_path / "home", Clock()) as s:
        yield s


def test_a_new_job_is_in_progress_and_uses_wal(store: JobStore, tmp_path: Path) -> None:
    job = store.begin(SPEC, "local")
    assert job.status is JobStatus.IN_PROGRESS and job.spec == SPEC and job.owner_pid == os.getpid()
    assert (job.created, job.started, job.ended) == (1000.0, 1000.0, None)
    with sqlite3.connect(tmp_path / "home" / "servekit.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_objects_and_counts(store: JobStore) -> None:
    store.begin(SPEC, "local")
    store.set_total(SPEC.name, 3)
    store.record_objects(
        SPEC.name, [("a", ObjectStatus.DONE, 0, 10, 1, ""), ("b", ObjectStatus.FAILED, 1, 0, 0, "boom")]
    )
    job = store.get(SPEC.name)
    assert job is not None
    assert (job.objects_total, job.objects_done, job.objects_failed, job.records, job.errors) == (3, 1, 1, 10, 1)
    assert store.done_keys(SPEC.name) == {"a"}
    assert [(o.key, o.status, o.instance) for o in store.objects(SPEC.name)] == [
        ("a", ObjectStatus.DONE, 0),
        ("b", ObjectStatus.FAILED, 1),
    ]


def test_resume_keeps_done_objects_and_forgets_failed_ones(store: JobStore) -> None:
    store.begin(SPEC, "local")
    store.record_objects(SPEC.name, [("a", ObjectStatus.DONE, 0, 1, 0, ""), ("b", ObjectStatus.FAILED, 0, 0, 0, "x")])
    store.set_status(SPEC.name, JobStatus.FAILED, "b failed")
    job = store.begin(SPEC.with_changes(instance_count=4), "ray")
    assert job.status is JobStatus.IN_PROGRESS and job.failure_reason == "" and job.engine == "ray"
    assert store.done_keys(SPEC.name) == {"a"} and [o.key for o in store.objects(SPEC.name)] == ["a"]


def test_stopping_and_stopped(store: JobStore) -> None:
    store.begin(SPEC, "local")
    store.set_status(SPEC.name, JobStatus.STOPPING)
    store.set_status(SPEC.name, JobStatus.STOPPED, "stopped by the user")
    assert store.begin(SPEC, "local").status is JobStatus.IN_PROGRESS


def test_completed_jobs_are_returned_as_they_are(store: JobStore) -> None:
    store.begin(SPEC, "local")
    store.set_status(SPEC.name, JobStatus.COMPLETED)
    assert store.begin(SPEC, "local").status is JobStatus.COMPLETED
    with pytest.raises(IllegalTransition):
        store.set_status(SPEC.name, JobStatus.IN_PROGRESS)


def test_a_changed_spec_is_refused(store: JobStore) -> None:
    store.begin(SPEC, "local")
    store.set_status(SPEC.name, JobStatus.STOPPED)
    with pytest.raises(JobConflict, match="different output_path"):
        store.begin(SPEC.with_changes(output_path="/elsewhere"), "local")


def test_a_live_owner_blocks_a_second_run_and_a_dead_one_is_taken_over(store: JobStore, tmp_path: Path) -> None:
    store.begin(SPEC, "local")
    with sqlite3.connect(tmp_path / "home" / "servekit.db") as db:
        db.execute("UPDATE transform_jobs SET owner_pid = ?", (os.getppid(),))  # alive, not us
    with pytest.raises(JobConflict, match="is running in process"):
        store.begin(SPEC, "local")
    with sqlite3.connect(tmp_path / "home" / "servekit.db") as db:
        db.execute("UPDATE transform_jobs SET owner_pid = ?", (2**22 + 12345,))  # no such process
    assert store.begin(SPEC, "local").owner_pid == os.getpid()


def test_jobs_are_listed_in_creation_order(tmp_path: Path) -> None:
    clock = Clock()
    store = JobStore(tmp_path / "home", clock)
    for name in ("zeta", "alpha"):
        store.begin(SPEC.with_changes(name=name), "local")
        clock.now += 1
    assert [j.name for j in store.jobs()] == ["zeta", "alpha"]
    store.close()
