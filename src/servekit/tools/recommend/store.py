"""The inference recommendation jobs aggregate: one row per CreateInferenceRecommendationsJob, its request, status
and (once completed) its result document.

The repository stores what it is given; statuses and what the result means belong to ``servekit.tools.recommend.api``.
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

AGGREGATE = "recommend_jobs"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "Inference recommendation jobs",
        (
            """CREATE TABLE recommend_jobs (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE,
                arn TEXT NOT NULL,
                model_name TEXT NOT NULL,
                request TEXT NOT NULL,
                status TEXT NOT NULL,
                failure_reason TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                modified REAL NOT NULL,
                completed REAL,
                result TEXT
            )""",
            "CREATE INDEX recommend_jobs_created ON recommend_jobs (created)",
        ),
    ),
)

_COLUMNS = "seq, name, arn, model_name, request, status, failure_reason, created, modified, completed, result"
_SORT = {"Name": "name", "CreationTime": "created", "Status": "status"}


class JobExists(Exception):
    """A job of that name exists already."""


@dataclass(frozen=True, slots=True)
class RecommendJobRow:
    name: str
    arn: str
    model_name: str
    request: dict[str, Any]
    status: str
    failure_reason: str
    created: float
    modified: float
    completed: float | None
    result: dict[str, Any] | None


def _row(r: tuple[Any, ...]) -> RecommendJobRow:
    return RecommendJobRow(
        name=r[1],
        arn=r[2],
        model_name=r[3],
        request=orjson.loads(r[4]),
        status=r[5],
        failure_reason=r[6],
        created=r[7],
        modified=r[8],
        completed=r[9],
        result=orjson.loads(r[10]) if r[10] else None,
    )


class RecommendJobs:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock

    def create(self, name: str, arn: str, model_name: str, request: Mapping[str, Any], status: str) -> RecommendJobRow:
        now = self._clock()
        try:
            with transaction(self._db):
                self._db.execute(
                    "INSERT INTO recommend_jobs (name, arn, model_name, request, status, created, modified) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (name, arn, model_name, orjson.dumps(dict(request)).decode(), status, now, now),
                )
        except sqlite3.IntegrityError:
            raise JobExists(name) from None
        row = self.get(name)
        assert row is not None
        return row

    def get(self, name: str) -> RecommendJobRow | None:
        r = self._db.execute(f"SELECT {_COLUMNS} FROM recommend_jobs WHERE name = ?", (name,)).fetchone()
        return _row(r) if r else None

    def set_status(
        self, name: str, status: str, *, reason: str = "", result: Mapping[str, Any] | None = None, final: bool = False
    ) -> None:
        now = self._clock()
        with transaction(self._db):
            self._db.execute(
                "UPDATE recommend_jobs SET status = ?, failure_reason = ?, modified = ?, completed = ?, "
                "result = COALESCE(?, result) WHERE name = ?",
                (
                    status,
                    reason,
                    now,
                    now if final else None,
                    None if result is None else orjson.dumps(dict(result)).decode(),
                    name,
                ),
            )

    def fail_unfinished(self, unfinished: tuple[str, ...], status: str, reason: str) -> list[str]:
        """Jobs left in one of the ``unfinished`` statuses (their runner is gone) set to ``status`` with ``reason``."""
        marks = ",".join("?" * len(unfinished))
        names = [
            r[0] for r in self._db.execute(f"SELECT name FROM recommend_jobs WHERE status IN ({marks})", unfinished)
        ]
        for name in names:
            self.set_status(name, status, reason=reason, final=True)
        return names

    def list(
        self,
        *,
        name_contains: str | None = None,
        status: str | None = None,
        model_name: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = 10,
        next_token: str | None = None,
    ) -> Page[RecommendJobRow]:
        """One page; ``ValueError`` (``InvalidNextToken`` among them) for a bad sort, size or token."""
        where: list[str] = []
        args: list[Any] = []
        for clause, value in (
            ("instr(lower(name), lower(?)) > 0", name_contains),
            ("status = ?", status),
            ("model_name = ?", model_name),
            ("created > ?", created_after),
            ("created < ?", created_before),
        ):
            if value is not None:
                where.append(clause)
                args.append(value)
        listing = Listing(tuple(where), tuple(args), sort_by, sort_order, max_results, next_token)
        return page_of(keyset_page(self._db, "recommend_jobs", _COLUMNS, _SORT, listing), _row)
