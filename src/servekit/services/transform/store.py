"""Transform job state: the job lifecycle over the ``transform_jobs`` repository of the state database.

The rows (one per job, one per finished object) and their SQL live in ``servekit.services.transform.repo``; this
module gives them their meaning: specs, statuses and their transitions, who owns a running job. Only the process
running a job writes its rows; ``status`` and ``list`` read concurrently (WAL keeps readers off the writer's
back). Time comes from an injected clock.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from servekit._utils.processes import pid_alive
from servekit.services.transform.repo import AGGREGATE, MIGRATIONS, TransformJobRow, TransformJobs, TransformObjectRow
from servekit.services.transform.spec import TransformSpec, changed_fields, spec_from_request, spec_to_request
from servekit.services.transform.status import JobStatus, ObjectStatus, check_transition
from servekit.state.database import Database


@dataclass(frozen=True, slots=True)
class JobRecord:
    name: str
    spec: TransformSpec
    status: JobStatus
    failure_reason: str
    created: float
    started: float | None
    ended: float | None
    owner_pid: int | None
    owner_host: str
    engine: str
    objects_total: int
    objects_done: int
    objects_failed: int
    records: int  # records of finished objects
    errors: int
    records_live: int  # records of objects still running (updated while the job runs)


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    key: str
    status: ObjectStatus
    instance: int
    records: int
    errors: int
    message: str
    updated: float


class JobConflict(Exception):
    """The job cannot run now: another live process runs it, or its spec changed."""


class JobStore:
    """Transform jobs in the state database of the servekit home ``home`` (opened, migrated and closed by the
    store, which migrates only the transform aggregate), or in an open :class:`Database` (its owner closes it)."""

    def __init__(
        self, home: Path | Database, clock: Callable[[], float] = time.time, *, database_url: str | None = None
    ) -> None:
        self._owns_db = not isinstance(home, Database)
        self._state = (
            home
            if isinstance(home, Database)
            else Database.open(home, database_url=database_url, migrations={AGGREGATE: MIGRATIONS})
        )
        self.path = self._state.path
        self._jobs = TransformJobs(self._state.conn)
        self._clock = clock

    def close(self) -> None:
        if self._owns_db:
            self._state.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reading ---------------------------------------------------------------------------------------------

    def get(self, name: str) -> JobRecord | None:
        row = self._jobs.get(name)
        return _job(row) if row else None

    def jobs(self) -> list[JobRecord]:
        return [_job(r) for r in self._jobs.list()]

    def objects(self, name: str) -> list[ObjectRecord]:
        return [
            ObjectRecord(o.key, ObjectStatus(o.status), o.instance, o.records, o.errors, o.message, o.updated)
            for o in self._jobs.objects(name)
        ]

    def done_keys(self, name: str) -> set[str]:
        return self._jobs.keys_with_status(name, ObjectStatus.DONE.value)

    # ---- the running process ---------------------------------------------------------------------------------

    def begin(self, spec: TransformSpec, engine: str) -> JobRecord:
        """Create the job, or take it up again (resume); the caller then owns it until :meth:`finish`.

        Raises :class:`JobConflict` when another live process runs it or when output-deciding fields changed.
        A Completed job is returned as it is (nothing to do)."""
        now = self._clock()
        host, pid = socket.gethostname(), os.getpid()
        request = spec_to_request(spec)
        with self._jobs.transaction():
            current = self.get(spec.name)
            if current is None:
                check_transition(None, JobStatus.IN_PROGRESS)
                self._jobs.insert(
                    spec.name,
                    request,
                    JobStatus.IN_PROGRESS.value,
                    created=now,
                    owner_pid=pid,
                    owner_host=host,
                    engine=engine,
                )
            else:
                changed = changed_fields(current.spec, spec)
                if changed:
                    raise JobConflict(
                        f"job {spec.name!r} exists with different {', '.join(changed)}; a job resumes with the "
                        "spec it started with; give another name for a new job"
                    )
                if current.status.terminal:
                    return current
                if current.status in (JobStatus.IN_PROGRESS, JobStatus.STOPPING) and current.owner_pid:
                    if current.owner_host == host and current.owner_pid != pid and pid_alive(current.owner_pid):
                        raise JobConflict(f"job {spec.name!r} is running in process {current.owner_pid}")
                status = JobStatus.STOPPED if current.status is JobStatus.STOPPING else current.status
                check_transition(status, JobStatus.IN_PROGRESS)
                self._jobs.restart(
                    spec.name,
                    request,
                    JobStatus.IN_PROGRESS.value,
                    started=now,
                    owner_pid=pid,
                    owner_host=host,
                    engine=engine,
                )
                # objects that failed last time are tried again
                self._jobs.delete_objects_except(spec.name, ObjectStatus.DONE.value)
        job = self.get(spec.name)
        assert job is not None
        return job

    def set_total(self, name: str, objects_total: int) -> None:
        self._jobs.set_total(name, objects_total)

    def set_live(self, name: str, records_live: int) -> None:
        self._jobs.set_live(name, records_live)

    def record_objects(self, name: str, results: Iterable[tuple[str, ObjectStatus, int, int, int, str]]) -> None:
        """(key, status, instance, records, errors, message) for objects that ended (Done or Failed)."""
        now = self._clock()
        self._jobs.put_objects(name, (TransformObjectRow(k, s.value, i, r, e, m, now) for k, s, i, r, e, m in results))

    def set_status(self, name: str, status: JobStatus, reason: str = "") -> None:
        current = self.get(name)
        if current is None:
            raise KeyError(name)
        check_transition(current.status, status)
        ended = self._clock() if status is not JobStatus.STOPPING else None
        self._jobs.set_status(name, status.value, reason=reason[:1024], ended=ended)


def _job(row: TransformJobRow) -> JobRecord:
    return JobRecord(
        name=row.name,
        spec=spec_from_request(row.request),
        status=JobStatus(row.status),
        failure_reason=row.failure_reason,
        created=row.created,
        started=row.started,
        ended=row.ended,
        owner_pid=row.owner_pid,
        owner_host=row.owner_host,
        engine=row.engine,
        objects_total=row.objects_total,
        objects_done=row.objects_by_status.get(ObjectStatus.DONE.value, 0),
        objects_failed=row.objects_by_status.get(ObjectStatus.FAILED.value, 0),
        records=row.records,
        errors=row.errors,
        records_live=row.records_live,
    )
