"""Transform job state in SQLite (WAL) under the servekit home: one row per job, one per finished object.

Only the process running a job writes its rows; ``status`` and ``list`` read concurrently (WAL keeps
readers off the writer's back). Time comes from an injected clock.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from servekit.errors import ConfigError
from servekit.transform.spec import TransformSpec, changed_fields, spec_from_request, spec_to_request
from servekit.transform.status import JobStatus, ObjectStatus, check_transition

DB_NAME = "servekit.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS transform_jobs (
    name TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    status TEXT NOT NULL,
    failure_reason TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    started REAL,
    ended REAL,
    owner_pid INTEGER,
    owner_host TEXT,
    engine TEXT NOT NULL DEFAULT '',
    objects_total INTEGER NOT NULL DEFAULT 0,
    records_live INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS transform_objects (
    job TEXT NOT NULL,
    key TEXT NOT NULL,
    status TEXT NOT NULL,
    instance INTEGER NOT NULL,
    records INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    message TEXT NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (job, key)
);
"""


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class JobStore:
    def __init__(self, home: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = home / DB_NAME
        try:
            home.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the servekit home {home}: {exc}") from None
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._clock = clock

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reading ---------------------------------------------------------------------------------------------

    def get(self, name: str) -> JobRecord | None:
        row = self._db.execute("SELECT * FROM transform_jobs WHERE name = ?", (name,)).fetchone()
        return self._job(row) if row else None

    def jobs(self) -> list[JobRecord]:
        rows = self._db.execute("SELECT * FROM transform_jobs ORDER BY created, name").fetchall()
        return [self._job(r) for r in rows]

    def objects(self, name: str) -> list[ObjectRecord]:
        rows = self._db.execute(
            "SELECT key, status, instance, records, errors, message, updated FROM transform_objects "
            "WHERE job = ? ORDER BY key",
            (name,),
        ).fetchall()
        return [ObjectRecord(r[0], ObjectStatus(r[1]), r[2], r[3], r[4], r[5], r[6]) for r in rows]

    def done_keys(self, name: str) -> set[str]:
        rows = self._db.execute(
            "SELECT key FROM transform_objects WHERE job = ? AND status = ?", (name, ObjectStatus.DONE.value)
        ).fetchall()
        return {r[0] for r in rows}

    def _job(self, row: tuple[Any, ...]) -> JobRecord:
        name = row[0]
        agg = self._db.execute(
            "SELECT COALESCE(SUM(status = ?), 0), COALESCE(SUM(status = ?), 0), COALESCE(SUM(records), 0), "
            "COALESCE(SUM(errors), 0) FROM transform_objects WHERE job = ?",
            (ObjectStatus.DONE.value, ObjectStatus.FAILED.value, name),
        ).fetchone()
        return JobRecord(
            name=name,
            spec=spec_from_request(orjson.loads(row[1])),
            status=JobStatus(row[2]),
            failure_reason=row[3],
            created=row[4],
            started=row[5],
            ended=row[6],
            owner_pid=row[7],
            owner_host=row[8] or "",
            engine=row[9],
            objects_total=row[10],
            objects_done=int(agg[0]),
            objects_failed=int(agg[1]),
            records=int(agg[2]),
            errors=int(agg[3]),
            records_live=row[11],
        )

    # ---- the running process ---------------------------------------------------------------------------------

    def begin(self, spec: TransformSpec, engine: str) -> JobRecord:
        """Create the job, or take it up again (resume); the caller then owns it until :meth:`finish`.

        Raises :class:`JobConflict` when another live process runs it or when output-deciding fields changed.
        A Completed job is returned as it is (nothing to do)."""
        now = self._clock()
        host, pid = socket.gethostname(), os.getpid()
        request = orjson.dumps(spec_to_request(spec)).decode()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            current = self.get(spec.name)
            if current is None:
                check_transition(None, JobStatus.IN_PROGRESS)
                self._db.execute(
                    "INSERT INTO transform_jobs (name, request, status, created, started, owner_pid, owner_host, "
                    "engine) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (spec.name, request, JobStatus.IN_PROGRESS.value, now, now, pid, host, engine),
                )
            else:
                changed = changed_fields(current.spec, spec)
                if changed:
                    raise JobConflict(
                        f"job {spec.name!r} exists with different {', '.join(changed)}; a job resumes with the "
                        "spec it started with; give another name for a new job"
                    )
                if current.status.terminal:
                    self._db.execute("COMMIT")
                    return current
                if current.status in (JobStatus.IN_PROGRESS, JobStatus.STOPPING) and current.owner_pid:
                    if current.owner_host == host and current.owner_pid != pid and _alive(current.owner_pid):
                        raise JobConflict(f"job {spec.name!r} is running in process {current.owner_pid}")
                status = JobStatus.STOPPED if current.status is JobStatus.STOPPING else current.status
                check_transition(status, JobStatus.IN_PROGRESS)
                self._db.execute(
                    "UPDATE transform_jobs SET request = ?, status = ?, failure_reason = '', started = ?, "
                    "ended = NULL, owner_pid = ?, owner_host = ?, engine = ?, records_live = 0 WHERE name = ?",
                    (request, JobStatus.IN_PROGRESS.value, now, pid, host, engine, spec.name),
                )
                # objects that failed last time are tried again
                self._db.execute(
                    "DELETE FROM transform_objects WHERE job = ? AND status != ?", (spec.name, ObjectStatus.DONE.value)
                )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        job = self.get(spec.name)
        assert job is not None
        return job

    def set_total(self, name: str, objects_total: int) -> None:
        self._db.execute("UPDATE transform_jobs SET objects_total = ? WHERE name = ?", (objects_total, name))

    def set_live(self, name: str, records_live: int) -> None:
        self._db.execute("UPDATE transform_jobs SET records_live = ? WHERE name = ?", (records_live, name))

    def record_objects(self, name: str, results: Iterable[tuple[str, ObjectStatus, int, int, int, str]]) -> None:
        """(key, status, instance, records, errors, message) for objects that ended (Done or Failed)."""
        now = self._clock()
        rows = [(name, k, s.value, i, r, e, m, now) for k, s, i, r, e, m in results]
        self._db.executemany("INSERT OR REPLACE INTO transform_objects VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def set_status(self, name: str, status: JobStatus, reason: str = "") -> None:
        current = self.get(name)
        if current is None:
            raise KeyError(name)
        check_transition(current.status, status)
        ended = self._clock() if status is not JobStatus.STOPPING else None
        self._db.execute(
            "UPDATE transform_jobs SET status = ?, failure_reason = ?, ended = ?, records_live = 0 WHERE name = ?",
            (status.value, reason[:1024], ended, name),
        )
