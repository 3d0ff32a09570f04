"""SageMaker's training, processing and tuning jobs: one row per Create*Job, its kind, request, status, secondary
status and (as the job goes) what its Describe* reports besides the request (times, transitions, model artifacts,
final metrics).

The repository stores what it is given; lifecycles and what the documents mean belong to ``servekit.services.training``.
**Time comes from the injected clock** (``clock``, seconds since the epoch).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration
from servekit.state.paging import Listing, Page, keyset_page, page_of

AGGREGATE = "sagemaker_jobs"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "SageMaker training, processing and tuning jobs",
        (
            """CREATE TABLE sagemaker_jobs (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                kind TEXT NOT NULL,
                name TEXT NOT NULL,
                arn TEXT NOT NULL,
                request TEXT NOT NULL,
                status TEXT NOT NULL,
                secondary TEXT NOT NULL DEFAULT '',
                failure_reason TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                modified REAL NOT NULL,
                ended REAL,
                details TEXT NOT NULL DEFAULT '{}',
                UNIQUE (kind, name)
            )""",
            "CREATE INDEX sagemaker_jobs_created ON sagemaker_jobs (kind, created)",
        ),
    ),
)

# FailureReason's length in SageMaker's model (botocore: the FailureReason shape's max), for every kind of job here
FAILURE_REASON_MAX = 1024

_COLUMNS = "seq, kind, name, arn, request, status, secondary, failure_reason, created, modified, ended, details"
_SORT = {"Name": "name", "CreationTime": "created", "Status": "status"}


class JobExists(Exception):
    """A job of that kind and name exists already."""


@dataclass(frozen=True, slots=True)
class SageMakerJobRow:
    kind: str
    name: str
    arn: str
    request: dict[str, Any]
    status: str
    secondary: str
    failure_reason: str
    created: float
    modified: float
    ended: float | None
    details: dict[str, Any]


def _row(r: tuple[Any, ...]) -> SageMakerJobRow:
    return SageMakerJobRow(
        kind=r[1],
        name=r[2],
        arn=r[3],
        request=orjson.loads(r[4]),
        status=r[5],
        secondary=r[6],
        failure_reason=r[7],
        created=r[8],
        modified=r[9],
        ended=r[10],
        details=orjson.loads(r[11]),
    )


class SageMakerJobs:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock

    def create(
        self, kind: str, name: str, arn: str, request: Mapping[str, Any], status: str, secondary: str
    ) -> SageMakerJobRow:
        now = self._clock()
        try:
            with transaction(self._db):
                self._db.execute(
                    "INSERT INTO sagemaker_jobs (kind, name, arn, request, status, secondary, created, modified) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (kind, name, arn, orjson.dumps(dict(request)).decode(), status, secondary, now, now),
                )
        except sqlite3.IntegrityError:  # PostgreSQL's unique violation arrives as one too (state/postgres.py)
            raise JobExists(name) from None
        row = self.get(kind, name)
        assert row is not None
        return row

    def get(self, kind: str, name: str) -> SageMakerJobRow | None:
        r = self._db.execute(
            f"SELECT {_COLUMNS} FROM sagemaker_jobs WHERE kind = ? AND name = ?", (kind, name)
        ).fetchone()
        return _row(r) if r else None

    def update(
        self,
        kind: str,
        name: str,
        *,
        status: str | None = None,
        secondary: str | None = None,
        reason: str | None = None,
        details: Mapping[str, Any] | None = None,
        final: bool = False,
    ) -> None:
        """Set what is given; ``details`` are merged into the stored ones; ``final`` stamps the end time. A reason is
        cut to :data:`FAILURE_REASON_MAX` characters, as AWS's are."""
        now = self._clock()
        reason = None if reason is None else reason[:FAILURE_REASON_MAX]
        with transaction(self._db):
            row = self._db.execute(
                "SELECT details FROM sagemaker_jobs WHERE kind = ? AND name = ?", (kind, name)
            ).fetchone()
            if row is None:
                return
            merged = {**orjson.loads(row[0]), **(details or {})}
            self._db.execute(
                "UPDATE sagemaker_jobs SET status = COALESCE(?, status), secondary = COALESCE(?, secondary), "
                "failure_reason = COALESCE(?, failure_reason), details = ?, modified = ?, "
                "ended = COALESCE(?, ended) WHERE kind = ? AND name = ?",
                (status, secondary, reason, orjson.dumps(merged).decode(), now, now if final else None, kind, name),
            )

    def unfinished(self, kind: str, statuses: tuple[str, ...]) -> list[str]:
        marks = ",".join("?" * len(statuses))
        return [
            r[0]
            for r in self._db.execute(
                f"SELECT name FROM sagemaker_jobs WHERE kind = ? AND status IN ({marks})", (kind, *statuses)
            )
        ]

    def list(
        self,
        kind: str,
        *,
        name_contains: str | None = None,
        status: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        modified_after: float | None = None,
        modified_before: float | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = 10,
        next_token: str | None = None,
    ) -> Page[SageMakerJobRow]:
        """One page of one kind's jobs; ``ValueError`` (``InvalidNextToken`` among them) for a bad sort, size or
        token."""
        where: list[str] = ["kind = ?"]
        args: list[Any] = [kind]
        for clause, value in (
            ("instr(lower(name), lower(?)) > 0", name_contains),
            ("status = ?", status),
            ("created > ?", created_after),
            ("created < ?", created_before),
            ("modified > ?", modified_after),
            ("modified < ?", modified_before),
        ):
            if value is not None:
                where.append(clause)
                args.append(value)
        listing = Listing(tuple(where), tuple(args), sort_by, sort_order, max_results, next_token)
        return page_of(keyset_page(self._db, "sagemaker_jobs", _COLUMNS, _SORT, listing), _row)
