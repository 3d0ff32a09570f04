"""The monitoring aggregate: monitoring job definitions (data quality, model quality), monitoring schedules and
their executions, as SageMaker's monitoring API keeps them (and the schedules' alerts: ``alert_store``).

The repository stores what it is given (statuses as text, requests as JSON objects); what the statuses mean, which
transitions are legal and when an execution is due belong to ``servekit.services.monitoring.schedules.api`` above it.
Names are unique ignoring case, as SageMaker's are (its ARNs are lowercased). **Time comes from the injected clock**
(``clock``, seconds since the epoch).
"""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from servekit.services.monitoring.schedules import alert_store
from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration
from servekit.state.paging import Listing, Page, keyset_page, page_of, where_set

AGGREGATE = "monitoring"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "Monitoring job definitions, schedules and executions",
        (
            """CREATE TABLE monitoring_job_definitions (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE COLLATE NOCASE,
                arn TEXT NOT NULL,
                type TEXT NOT NULL,
                endpoint_name TEXT NOT NULL,
                request TEXT NOT NULL,
                created REAL NOT NULL
            )""",
            """CREATE TABLE monitoring_schedules (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE COLLATE NOCASE,
                arn TEXT NOT NULL,
                type TEXT NOT NULL,
                endpoint_name TEXT NOT NULL,
                definition_name TEXT,
                config TEXT NOT NULL,
                tags TEXT NOT NULL,
                status TEXT NOT NULL,
                failure_reason TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                modified REAL NOT NULL,
                since REAL NOT NULL,
                last_fire REAL
            )""",
            """CREATE TABLE monitoring_executions (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                job_name TEXT NOT NULL UNIQUE,
                arn TEXT NOT NULL,
                schedule_name TEXT NOT NULL,
                schedule_arn TEXT NOT NULL,
                endpoint_name TEXT NOT NULL,
                definition_name TEXT,
                type TEXT NOT NULL,
                scheduled REAL NOT NULL,
                created REAL NOT NULL,
                modified REAL NOT NULL,
                started REAL,
                ended REAL,
                status TEXT NOT NULL,
                failure_reason TEXT NOT NULL DEFAULT '',
                exit_message TEXT NOT NULL DEFAULT '',
                output_uri TEXT NOT NULL,
                job TEXT NOT NULL,
                outcome TEXT,
                UNIQUE (schedule_arn, scheduled)
            )""",
            "CREATE INDEX monitoring_executions_schedule ON monitoring_executions (schedule_name, scheduled)",
            "CREATE INDEX monitoring_executions_created ON monitoring_executions (created)",
        ),
    ),
    Migration(2, "Monitoring alerts and their history", alert_store.TABLES),
)


class AlreadyExists(Exception):
    """A definition or schedule of that name (ignoring case) exists already, or an execution for that time."""


class NotFound(Exception):
    """No row of that name."""


# ---------------------------------------------------------------------------------------------- rows
@dataclass(frozen=True, slots=True)
class JobDefinitionRow:
    name: str
    arn: str
    type: str  # DataQuality | ModelQuality
    endpoint_name: str
    request: dict[str, Any]  # the Create*JobDefinition request (without Tags)
    created: float


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    name: str
    arn: str
    type: str
    endpoint_name: str
    definition_name: str | None  # None: the job is defined inline (MonitoringJobDefinition)
    config: dict[str, Any]  # MonitoringScheduleConfig as given
    tags: dict[str, str]
    status: str
    failure_reason: str
    created: float
    modified: float
    since: float  # when its configuration took effect (created, or last updated)
    last_fire: float | None  # fires up to this time are handled (run, or skipped by a Start)


@dataclass(frozen=True, slots=True)
class ExecutionRow:
    job_name: str  # the processing job's name
    arn: str  # the processing job's ARN
    schedule_name: str
    schedule_arn: str
    endpoint_name: str
    definition_name: str | None
    type: str
    scheduled: float
    created: float
    modified: float
    started: float | None
    ended: float | None
    status: str
    failure_reason: str
    exit_message: str
    output_uri: str
    job: dict[str, Any]  # what ran: command, inputs, window (DescribeProcessingJob's material)
    outcome: dict[str, Any] | None  # what it found (the metrics recorded), once finished


_DEF_COLUMNS = "seq, name, arn, type, endpoint_name, request, created"
_SCHEDULE_COLUMNS = (
    "seq, name, arn, type, endpoint_name, definition_name, config, tags, status, failure_reason, created, modified, "
    "since, last_fire"
)
_EXEC_COLUMNS = (
    "seq, job_name, arn, schedule_name, schedule_arn, endpoint_name, definition_name, type, scheduled, created, "
    "modified, started, ended, status, failure_reason, exit_message, output_uri, job, outcome"
)
_DEF_SORT = {"Name": "name", "CreationTime": "created"}
_SCHEDULE_SORT = {"Name": "name", "CreationTime": "created", "Status": "status"}
_EXEC_SORT = {"CreationTime": "created", "ScheduledTime": "scheduled", "Status": "status"}


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _definition(r: tuple[Any, ...]) -> JobDefinitionRow:
    return JobDefinitionRow(r[1], r[2], r[3], r[4], orjson.loads(r[5]), r[6])


def _schedule(r: tuple[Any, ...]) -> ScheduleRow:
    return ScheduleRow(
        name=r[1],
        arn=r[2],
        type=r[3],
        endpoint_name=r[4],
        definition_name=r[5],
        config=orjson.loads(r[6]),
        tags=orjson.loads(r[7]),
        status=r[8],
        failure_reason=r[9],
        created=r[10],
        modified=r[11],
        since=r[12],
        last_fire=r[13],
    )


def _execution(r: tuple[Any, ...]) -> ExecutionRow:
    return ExecutionRow(
        job_name=r[1],
        arn=r[2],
        schedule_name=r[3],
        schedule_arn=r[4],
        endpoint_name=r[5],
        definition_name=r[6],
        type=r[7],
        scheduled=r[8],
        created=r[9],
        modified=r[10],
        started=r[11],
        ended=r[12],
        status=r[13],
        failure_reason=r[14],
        exit_message=r[15],
        output_uri=r[16],
        job=orjson.loads(r[17]),
        outcome=orjson.loads(r[18]) if r[18] else None,
    )


class Monitoring:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock
        self.alerts = alert_store.MonitoringAlerts(conn, clock)  # each schedule's alerts and their history

    # ---- job definitions -----------------------------------------------------------------------------------------
    def create_definition(
        self, name: str, arn: str, type_: str, endpoint_name: str, request: Mapping[str, Any]
    ) -> JobDefinitionRow:
        try:
            with transaction(self._db):
                self._db.execute(
                    "INSERT INTO monitoring_job_definitions (name, arn, type, endpoint_name, request, created) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (name, arn, type_, endpoint_name, _json(dict(request)), self._clock()),
                )
        except sqlite3.IntegrityError:
            raise AlreadyExists(name) from None
        row = self.get_definition(name)
        assert row is not None
        return row

    def get_definition(self, name: str) -> JobDefinitionRow | None:
        r = self._db.execute(
            f"SELECT {_DEF_COLUMNS} FROM monitoring_job_definitions WHERE name = ?", (name,)
        ).fetchone()
        return _definition(r) if r else None

    def delete_definition(self, name: str) -> None:
        with transaction(self._db):
            if self._db.execute("DELETE FROM monitoring_job_definitions WHERE name = ?", (name,)).rowcount == 0:
                raise NotFound(name)

    def list_definitions(
        self,
        type_: str,
        *,
        endpoint_name: str | None = None,
        name_contains: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = 10,
        next_token: str | None = None,
    ) -> Page[JobDefinitionRow]:
        """One page of ``type_``'s definitions; ``ValueError`` (``InvalidNextToken`` among them) for a bad sort,
        size or token."""
        where, args = where_set(
            *(
                ("type = ?", type_),
                ("endpoint_name = ?", endpoint_name),
                ("instr(lower(name), lower(?)) > 0", name_contains),
                ("created > ?", created_after),
                ("created < ?", created_before),
            )
        )
        listing = Listing(where, args, sort_by, sort_order, max_results, next_token)
        return page_of(
            keyset_page(self._db, "monitoring_job_definitions", _DEF_COLUMNS, _DEF_SORT, listing), _definition
        )

    # ---- schedules -----------------------------------------------------------------------------------------------
    def create_schedule(
        self,
        name: str,
        arn: str,
        type_: str,
        endpoint_name: str,
        definition_name: str | None,
        config: Mapping[str, Any],
        tags: Mapping[str, str],
        status: str,
    ) -> ScheduleRow:
        now = self._clock()
        try:
            with transaction(self._db):
                self._db.execute(
                    "INSERT INTO monitoring_schedules (name, arn, type, endpoint_name, definition_name, config, tags, "
                    "status, created, modified, since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        name,
                        arn,
                        type_,
                        endpoint_name,
                        definition_name,
                        _json(dict(config)),
                        _json(dict(tags)),
                        status,
                        now,
                        now,
                        now,
                    ),
                )
        except sqlite3.IntegrityError:
            raise AlreadyExists(name) from None
        row = self.get_schedule(name)
        assert row is not None
        return row

    def get_schedule(self, name: str) -> ScheduleRow | None:
        r = self._db.execute(f"SELECT {_SCHEDULE_COLUMNS} FROM monitoring_schedules WHERE name = ?", (name,)).fetchone()
        return _schedule(r) if r else None

    def schedules(self, statuses: Collection[str] | None = None) -> builtins.list[ScheduleRow]:
        """Every schedule (in one of ``statuses``), oldest first."""
        sql = f"SELECT {_SCHEDULE_COLUMNS} FROM monitoring_schedules"
        args: tuple[str, ...] = ()
        if statuses is not None:
            sql += f" WHERE status IN ({','.join('?' * len(statuses))})"
            args = tuple(statuses)
        return [_schedule(r) for r in self._db.execute(sql + " ORDER BY seq", args)]

    def schedules_using(self, definition_name: str) -> builtins.list[str]:
        rows = self._db.execute(
            "SELECT name FROM monitoring_schedules WHERE definition_name = ? ORDER BY seq", (definition_name,)
        )
        return [str(r[0]) for r in rows]

    def update_schedule(
        self,
        name: str,
        *,
        status: str | None = None,
        failure_reason: str | None = None,
        config: Mapping[str, Any] | None = None,
        type_: str | None = None,
        endpoint_name: str | None = None,
        definition_name: str | None = None,
        replace_definition: bool = False,
        since: float | None = None,
        expected: Collection[str] | None = None,
    ) -> ScheduleRow:
        """Change what is given (``replace_definition`` writes ``definition_name`` even when it is None). With
        ``expected``, only if the status is still one of those: :class:`StaleStatus` otherwise."""
        sets = ["modified = ?"]
        args: builtins.list[Any] = [self._clock()]
        for column, value in (
            ("status", status),
            ("failure_reason", failure_reason),
            ("config", None if config is None else _json(dict(config))),
            ("type", type_),
            ("endpoint_name", endpoint_name),
            ("since", since),
        ):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        if replace_definition:
            sets.append("definition_name = ?")
            args.append(definition_name)
        where = "name = ?"
        args.append(name)
        if expected is not None:
            where += f" AND status IN ({','.join('?' * len(expected))})"
            args.extend(expected)
        with transaction(self._db):
            changed = self._db.execute(f"UPDATE monitoring_schedules SET {', '.join(sets)} WHERE {where}", args)
        row = self.get_schedule(name)
        if row is None:
            raise NotFound(name)
        if changed.rowcount == 0:
            raise StaleStatus(name, row.status)
        return row

    def mark_fired(self, name: str, fire: float) -> None:
        """Record that ``fire`` (a scheduled time) was handled, so it is never run twice, even across a restart."""
        with transaction(self._db):
            self._db.execute("UPDATE monitoring_schedules SET last_fire = ? WHERE name = ?", (fire, name))

    def delete_schedule(self, name: str) -> None:
        """The schedule goes; its executions stay (SageMaker keeps a deleted schedule's execution history)."""
        with transaction(self._db):
            if self._db.execute("DELETE FROM monitoring_schedules WHERE name = ?", (name,)).rowcount == 0:
                raise NotFound(name)

    def list_schedules(
        self,
        *,
        endpoint_name: str | None = None,
        name_contains: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        modified_after: float | None = None,
        modified_before: float | None = None,
        status: str | None = None,
        definition_name: str | None = None,
        type_: str | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = 10,
        next_token: str | None = None,
    ) -> Page[ScheduleRow]:
        where, args = where_set(
            *(
                ("endpoint_name = ?", endpoint_name),
                ("instr(lower(name), lower(?)) > 0", name_contains),
                ("created > ?", created_after),
                ("created < ?", created_before),
                ("modified > ?", modified_after),
                ("modified < ?", modified_before),
                ("status = ?", status),
                ("definition_name = ?", definition_name),
                ("type = ?", type_),
            )
        )
        listing = Listing(where, args, sort_by, sort_order, max_results, next_token)
        return page_of(
            keyset_page(self._db, "monitoring_schedules", _SCHEDULE_COLUMNS, _SCHEDULE_SORT, listing), _schedule
        )

    # ---- executions ----------------------------------------------------------------------------------------------
    def create_execution(
        self,
        job_name: str,
        arn: str,
        schedule: ScheduleRow,
        scheduled: float,
        status: str,
        output_uri: str,
        job: Mapping[str, Any],
    ) -> ExecutionRow:
        now = self._clock()
        try:
            with transaction(self._db):
                self._db.execute(
                    "INSERT INTO monitoring_executions (job_name, arn, schedule_name, schedule_arn, endpoint_name, "
                    "definition_name, type, scheduled, created, modified, status, output_uri, job) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        job_name,
                        arn,
                        schedule.name,
                        schedule.arn,
                        schedule.endpoint_name,
                        schedule.definition_name,
                        schedule.type,
                        scheduled,
                        now,
                        now,
                        status,
                        output_uri,
                        _json(dict(job)),
                    ),
                )
        except sqlite3.IntegrityError:
            raise AlreadyExists(job_name) from None
        row = self.get_execution(job_name)
        assert row is not None
        return row

    def get_execution(self, job_name: str) -> ExecutionRow | None:
        r = self._db.execute(
            f"SELECT {_EXEC_COLUMNS} FROM monitoring_executions WHERE job_name = ?", (job_name,)
        ).fetchone()
        return _execution(r) if r else None

    def latest_execution(self, schedule_arn: str) -> ExecutionRow | None:
        r = self._db.execute(
            f"SELECT {_EXEC_COLUMNS} FROM monitoring_executions WHERE schedule_arn = ? "
            "ORDER BY scheduled DESC, seq DESC LIMIT 1",
            (schedule_arn,),
        ).fetchone()
        return _execution(r) if r else None

    def executions_in(self, statuses: Collection[str]) -> builtins.list[ExecutionRow]:
        marks = ",".join("?" * len(statuses))
        rows = self._db.execute(
            f"SELECT {_EXEC_COLUMNS} FROM monitoring_executions WHERE status IN ({marks}) ORDER BY seq", tuple(statuses)
        )
        return [_execution(r) for r in rows]

    def update_execution(
        self,
        job_name: str,
        status: str,
        *,
        failure_reason: str | None = None,
        exit_message: str | None = None,
        started: float | None = None,
        ended: float | None = None,
        outcome: Mapping[str, Any] | None = None,
        job: Mapping[str, Any] | None = None,
    ) -> ExecutionRow:
        sets = ["status = ?", "modified = ?"]
        args: builtins.list[Any] = [status, self._clock()]
        for column, value in (
            ("failure_reason", failure_reason),
            ("exit_message", exit_message),
            ("started", started),
            ("ended", ended),
            ("outcome", None if outcome is None else _json(dict(outcome))),
            ("job", None if job is None else _json(dict(job))),
        ):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        with transaction(self._db):
            self._db.execute(
                f"UPDATE monitoring_executions SET {', '.join(sets)} WHERE job_name = ?", (*args, job_name)
            )
        row = self.get_execution(job_name)
        if row is None:
            raise NotFound(job_name)
        return row

    def list_executions(
        self,
        *,
        schedule_name: str | None = None,
        endpoint_name: str | None = None,
        scheduled_after: float | None = None,
        scheduled_before: float | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        modified_after: float | None = None,
        modified_before: float | None = None,
        status: str | None = None,
        definition_name: str | None = None,
        type_: str | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = 10,
        next_token: str | None = None,
    ) -> Page[ExecutionRow]:
        where, args = where_set(
            *(
                ("schedule_name = ? COLLATE NOCASE", schedule_name),
                ("endpoint_name = ?", endpoint_name),
                ("scheduled > ?", scheduled_after),
                ("scheduled < ?", scheduled_before),
                ("created > ?", created_after),
                ("created < ?", created_before),
                ("modified > ?", modified_after),
                ("modified < ?", modified_before),
                ("status = ?", status),
                ("definition_name = ?", definition_name),
                ("type = ?", type_),
            )
        )
        listing = Listing(where, args, sort_by, sort_order, max_results, next_token)
        return page_of(keyset_page(self._db, "monitoring_executions", _EXEC_COLUMNS, _EXEC_SORT, listing), _execution)


class StaleStatus(Exception):
    """A compare-and-set status write found another status (``status``) than it expected."""

    def __init__(self, name: str, status: str) -> None:
        super().__init__(f"{name} is {status}")
        self.name = name
        self.status = status
