"""The transform jobs aggregate: one row per job, one per object that ended; its migrations and its SQL.

The repository stores what it is given (statuses as text, the job's request as a JSON object); the meaning
of statuses, transitions and conflicts belongs to ``servekit.services.transform.store.JobStore`` above it.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration

AGGREGATE = "transform_jobs"

# Version 1 is the schema servekit used before it had migrations (``CREATE TABLE IF NOT EXISTS``, the same
# columns), so a home written by it is adopted as it is.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "transform_jobs and transform_objects",
        (
            """CREATE TABLE IF NOT EXISTS transform_jobs (
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
            )""",
            """CREATE TABLE IF NOT EXISTS transform_objects (
                job TEXT NOT NULL,
                key TEXT NOT NULL,
                status TEXT NOT NULL,
                instance INTEGER NOT NULL,
                records INTEGER NOT NULL,
                errors INTEGER NOT NULL,
                message TEXT NOT NULL,
                updated REAL NOT NULL,
                PRIMARY KEY (job, key)
            )""",
        ),
    ),
)

_JOB_COLUMNS = (
    "name, request, status, failure_reason, created, started, ended, owner_pid, owner_host, engine, objects_total, "
    "records_live"
)


@dataclass(frozen=True, slots=True)
class TransformObjectRow:
    key: str
    status: str
    instance: int
    records: int
    errors: int
    message: str
    updated: float


@dataclass(frozen=True, slots=True)
class TransformJobRow:
    name: str
    request: dict[str, Any]
    status: str
    failure_reason: str
    created: float
    started: float | None
    ended: float | None
    owner_pid: int | None
    owner_host: str
    engine: str
    objects_total: int
    records_live: int
    objects_by_status: dict[str, int] = field(default_factory=dict)  # rows in transform_objects per status
    records: int = 0  # sum over the job's object rows
    errors: int = 0


class TransformJobs:
    """Typed access to the transform tables over one connection (see :class:`servekit.services.database.StateDB`)."""

    def __init__(self, conn: Connection) -> None:
        self._db = conn

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with transaction(self._db):
            yield

    # ---- reading -------------------------------------------------------------------------------------------

    def get(self, name: str) -> TransformJobRow | None:
        row = self._db.execute(f"SELECT {_JOB_COLUMNS} FROM transform_jobs WHERE name = ?", (name,)).fetchone()
        return self._job(row) if row else None

    def list(self) -> builtins.list[TransformJobRow]:
        """Every job, oldest first (then by name)."""
        rows = self._db.execute(f"SELECT {_JOB_COLUMNS} FROM transform_jobs ORDER BY created, name").fetchall()
        return [self._job(r) for r in rows]

    def names_running_or_ended_since(self, running: Iterable[str], since: float) -> builtins.list[str]:
        """The names of the jobs in any of the ``running`` statuses or that ended at ``since`` or later (no per-job
        counts: cheap enough to ask often)."""
        wanted = builtins.list(running)
        status = f"status IN ({', '.join('?' * len(wanted))}) OR " if wanted else ""
        rows = self._db.execute(
            f"SELECT name FROM transform_jobs WHERE {status}ended >= ? ORDER BY name", (*wanted, since)
        )
        return [str(r[0]) for r in rows]

    def objects(self, name: str) -> builtins.list[TransformObjectRow]:
        rows = self._db.execute(
            "SELECT key, status, instance, records, errors, message, updated FROM transform_objects "
            "WHERE job = ? ORDER BY key",
            (name,),
        ).fetchall()
        return [TransformObjectRow(*r) for r in rows]

    def keys_with_status(self, name: str, status: str) -> set[str]:
        rows = self._db.execute("SELECT key FROM transform_objects WHERE job = ? AND status = ?", (name, status))
        return {r[0] for r in rows.fetchall()}

    def _job(self, row: tuple[Any, ...]) -> TransformJobRow:
        counts = self._db.execute(
            "SELECT status, COUNT(*), COALESCE(SUM(records), 0), COALESCE(SUM(errors), 0) FROM transform_objects "
            "WHERE job = ? GROUP BY status",
            (row[0],),
        ).fetchall()
        return TransformJobRow(
            name=row[0],
            request=orjson.loads(row[1]),
            status=row[2],
            failure_reason=row[3],
            created=row[4],
            started=row[5],
            ended=row[6],
            owner_pid=row[7],
            owner_host=row[8] or "",
            engine=row[9],
            objects_total=row[10],
            records_live=row[11],
            objects_by_status={str(s): int(n) for s, n, _, _ in counts},
            records=sum(int(r) for _, _, r, _ in counts),
            errors=sum(int(e) for _, _, _, e in counts),
        )

    # ---- writing -------------------------------------------------------------------------------------------

    def insert(
        self,
        name: str,
        request: dict[str, Any],
        status: str,
        *,
        created: float,
        owner_pid: int,
        owner_host: str,
        engine: str,
    ) -> None:
        """A new job, started at ``created`` by ``owner_pid`` on ``owner_host``."""
        self._db.execute(
            "INSERT INTO transform_jobs (name, request, status, created, started, owner_pid, owner_host, engine) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (name, orjson.dumps(request).decode(), status, created, created, owner_pid, owner_host, engine),
        )

    def restart(
        self,
        name: str,
        request: dict[str, Any],
        status: str,
        *,
        started: float,
        owner_pid: int,
        owner_host: str,
        engine: str,
    ) -> None:
        """An existing job taken up again: new owner and start time, no end, no failure, no live records."""
        self._db.execute(
            "UPDATE transform_jobs SET request = ?, status = ?, failure_reason = '', started = ?, ended = NULL, "
            "owner_pid = ?, owner_host = ?, engine = ?, records_live = 0 WHERE name = ?",
            (orjson.dumps(request).decode(), status, started, owner_pid, owner_host, engine, name),
        )

    def delete_objects_except(self, name: str, keep_status: str) -> None:
        self._db.execute("DELETE FROM transform_objects WHERE job = ? AND status != ?", (name, keep_status))

    def set_total(self, name: str, objects_total: int) -> None:
        self._db.execute("UPDATE transform_jobs SET objects_total = ? WHERE name = ?", (objects_total, name))

    def set_live(self, name: str, records_live: int) -> None:
        self._db.execute("UPDATE transform_jobs SET records_live = ? WHERE name = ?", (records_live, name))

    def put_objects(self, name: str, objects: Iterable[TransformObjectRow]) -> None:
        """Insert or replace object rows (keyed by job and key)."""
        rows = [(name, o.key, o.status, o.instance, o.records, o.errors, o.message, o.updated) for o in objects]
        self._db.executemany(
            "INSERT INTO transform_objects (job, key, status, instance, records, errors, message, updated) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job, key) DO UPDATE SET status = excluded.status, "
            "instance = excluded.instance, records = excluded.records, errors = excluded.errors, "
            "message = excluded.message, updated = excluded.updated",
            rows,
        )

    def set_status(self, name: str, status: str, *, reason: str, ended: float | None) -> None:
        """Status, failure reason and end time; live records go back to 0."""
        self._db.execute(
            "UPDATE transform_jobs SET status = ?, failure_reason = ?, ended = ?, records_live = 0 WHERE name = ?",
            (status, reason, ended, name),
        )
