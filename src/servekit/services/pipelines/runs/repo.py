"""The pipelines aggregate: runs, their steps, and the artifacts they wrote with their lineage.

The repository stores what it is given (statuses as text, documents as JSON); what statuses mean and which
transitions are legal belong to ``servekit.services.pipelines.runs.store`` above it. Run status changes are
compare-and-set
(``expected``), so a ``stop`` from another process and the run's own end cannot both win. Artifact rows are only
ever inserted: the system never rewrites or deletes what a step produced. **Time comes from the injected clock.**
"""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration
from servekit.state.paging import Listing, Page, keyset_page, page_of, where_set

AGGREGATE = "pipelines"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "pipeline runs, steps, artifacts and artifact files",
        (
            """CREATE TABLE pipeline_runs (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                run_id TEXT NOT NULL UNIQUE,
                pipeline TEXT NOT NULL,
                arn TEXT NOT NULL,
                source TEXT NOT NULL,
                definition TEXT NOT NULL,
                parameters TEXT NOT NULL,
                artifact_root TEXT NOT NULL,
                status TEXT NOT NULL,
                failure_reason TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                modified REAL NOT NULL,
                ended REAL,
                owner_pid INTEGER,
                owner_host TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX pipeline_runs_pipeline ON pipeline_runs (pipeline, created)",
            """CREATE TABLE pipeline_steps (
                run_id TEXT NOT NULL REFERENCES pipeline_runs (run_id),
                step TEXT NOT NULL,
                kind TEXT NOT NULL,
                status TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                started REAL,
                ended REAL,
                failure_reason TEXT NOT NULL DEFAULT '',
                code_hash TEXT NOT NULL DEFAULT '',
                cache_key TEXT NOT NULL DEFAULT '',
                cache_source_run TEXT NOT NULL DEFAULT '',
                outputs TEXT NOT NULL DEFAULT '{}',
                properties TEXT NOT NULL DEFAULT '{}',
                metadata TEXT NOT NULL DEFAULT '{}',
                PRIMARY KEY (run_id, step)
            )""",
            "CREATE INDEX pipeline_steps_cache ON pipeline_steps (step, cache_key, status)",
            """CREATE TABLE pipeline_artifacts (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                uri TEXT NOT NULL UNIQUE,
                sha256 TEXT NOT NULL,
                pipeline TEXT NOT NULL,
                run_id TEXT NOT NULL REFERENCES pipeline_runs (run_id),
                step TEXT NOT NULL,
                attempt INTEGER NOT NULL,
                output TEXT NOT NULL,
                code_hash TEXT NOT NULL,
                parameters TEXT NOT NULL,
                inputs TEXT NOT NULL,
                created REAL NOT NULL
            )""",
            "CREATE INDEX pipeline_artifacts_sha ON pipeline_artifacts (sha256)",
            """CREATE TABLE pipeline_artifact_files (
                artifact INTEGER NOT NULL REFERENCES pipeline_artifacts (seq),
                key TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                size INTEGER NOT NULL,
                PRIMARY KEY (artifact, key)
            )""",
            "CREATE INDEX pipeline_artifact_files_sha ON pipeline_artifact_files (sha256)",
        ),
    ),
    Migration(
        2,
        "pipeline trigger claims: each data partition or schedule fire starts one run",
        (
            """CREATE TABLE pipeline_trigger_claims (
                pipeline TEXT NOT NULL,
                trigger TEXT NOT NULL,
                key TEXT NOT NULL,
                run_id TEXT NOT NULL REFERENCES pipeline_runs (run_id),
                claimed REAL NOT NULL,
                PRIMARY KEY (pipeline, trigger, key)
            )""",
        ),
    ),
    Migration(
        3,
        "pipelines registered through the API (CreatePipeline) and the executions it started",
        (
            """CREATE TABLE pipeline_definitions (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE,
                arn TEXT NOT NULL,
                display_name TEXT NOT NULL,
                description TEXT NOT NULL,
                role_arn TEXT NOT NULL,
                definition TEXT NOT NULL,
                created REAL NOT NULL,
                modified REAL NOT NULL,
                last_run REAL
            )""",
            """CREATE TABLE pipeline_api_executions (
                run_id TEXT PRIMARY KEY,
                pipeline TEXT NOT NULL,
                arn TEXT NOT NULL,
                display_name TEXT NOT NULL,
                description TEXT NOT NULL,
                parameters TEXT NOT NULL,
                token TEXT NOT NULL,
                created REAL NOT NULL,
                pid INTEGER,
                log TEXT NOT NULL,
                exit_code INTEGER
            )""",
            "CREATE UNIQUE INDEX pipeline_api_executions_token ON pipeline_api_executions (pipeline, token)",
        ),
    ),
    Migration(
        4,
        "a registered pipeline's ParallelismConfiguration (MaxParallelExecutionSteps)",
        ("ALTER TABLE pipeline_definitions ADD COLUMN parallelism INTEGER",),
    ),
)

_RUN_COLUMNS = (
    "seq, run_id, pipeline, arn, source, definition, parameters, artifact_root, status, failure_reason, created, "
    "modified, ended, owner_pid, owner_host"
)
_STEP_COLUMNS = (
    "run_id, step, kind, status, attempts, started, ended, failure_reason, code_hash, cache_key, cache_source_run, "
    "outputs, properties, metadata"
)
_ARTIFACT_COLUMNS = "seq, uri, sha256, pipeline, run_id, step, attempt, output, code_hash, parameters, inputs, created"
_SORT = {"CreationTime": "created"}


class StaleRunStatus(Exception):
    """The run's status was not the one expected (another process moved it first)."""


class AlreadyClaimed(Exception):
    """The trigger's key (a partition, a schedule fire) already started a run."""


@dataclass(frozen=True, slots=True)
class Claim:
    """What starts a run: ``trigger`` (a watched prefix, a cron expression) and its ``key`` (a partition, a fire
    time). Recorded with the run, in the run's transaction, so a key starts at most one run."""

    trigger: str
    key: str


@dataclass(frozen=True, slots=True)
class ClaimRow:
    pipeline: str
    trigger: str
    key: str
    run_id: str
    claimed: float


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    pipeline: str
    arn: str
    source: str
    definition: dict[str, Any]
    parameters: dict[str, Any]
    artifact_root: str
    status: str
    failure_reason: str
    created: float
    modified: float
    ended: float | None
    owner_pid: int | None
    owner_host: str


@dataclass(frozen=True, slots=True)
class StepRow:
    run_id: str
    step: str
    kind: str
    status: str
    attempts: int = 0
    started: float | None = None
    ended: float | None = None
    failure_reason: str = ""
    code_hash: str = ""
    cache_key: str = ""
    cache_source_run: str = ""  # a cache hit: the run whose output this step reuses
    outputs: Mapping[str, Any] | None = None  # output name -> {"uri", "sha256"}
    properties: Mapping[str, Any] | None = None  # what later steps may reference
    metadata: Mapping[str, Any] | None = None  # kind-specific (ModelPackageArn, Condition outcome, log path)


@dataclass(frozen=True, slots=True)
class ArtifactFile:
    key: str
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class ArtifactRow:
    uri: str
    sha256: str
    pipeline: str
    run_id: str
    step: str
    attempt: int
    output: str
    code_hash: str
    parameters: dict[str, Any]
    inputs: builtins.list[dict[str, Any]]  # [{"name", "uri", "sha256"} | {"name", "value"}]
    created: float = 0.0
    seq: int = 0


class DefinitionExists(Exception):
    """A pipeline of that name is registered already."""


@dataclass(frozen=True, slots=True)
class DefinitionRow:
    name: str
    arn: str
    display_name: str
    description: str
    role_arn: str
    definition: str  # the definition document as JSON text (servekit's format)
    created: float
    modified: float
    last_run: float | None
    parallelism: int | None = None  # ParallelismConfiguration.MaxParallelExecutionSteps (None: not given)


@dataclass(frozen=True, slots=True)
class ApiExecutionRow:
    """An execution StartPipelineExecution started: its process writes the run (``pipeline_runs``) itself."""

    run_id: str
    pipeline: str
    arn: str
    display_name: str
    description: str
    parameters: dict[str, Any]
    token: str
    created: float
    pid: int | None
    log: str
    exit_code: int | None


_DEFINITION_COLUMNS = (
    "seq, name, arn, display_name, description, role_arn, definition, created, modified, last_run, parallelism"
)
_API_EXECUTION_COLUMNS = (
    "run_id, pipeline, arn, display_name, description, parameters, token, created, pid, log, exit_code"
)
_DEFINITION_SORT = {"CreationTime": "created", "Name": "name"}


def _definition(r: tuple[Any, ...]) -> DefinitionRow:
    return DefinitionRow(*r[1:])


def _api_execution(r: tuple[Any, ...]) -> ApiExecutionRow:
    return ApiExecutionRow(r[0], r[1], r[2], r[3], r[4], orjson.loads(r[5]), *r[6:])


def _run(r: tuple[Any, ...]) -> RunRow:  # the columns in RunRow's order (_RUN_COLUMNS)
    loads = orjson.loads
    return RunRow(
        r[1], r[2], r[3], r[4], loads(r[5]), loads(r[6]), r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14] or ""
    )


def _step(r: tuple[Any, ...]) -> StepRow:  # the columns in StepRow's order (_STEP_COLUMNS)
    loads = orjson.loads
    return StepRow(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], loads(r[11]), loads(r[12]), loads(r[13])
    )


def _artifact(r: tuple[Any, ...]) -> ArtifactRow:  # seq first in _ARTIFACT_COLUMNS, last in ArtifactRow
    return ArtifactRow(
        r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], orjson.loads(r[9]), orjson.loads(r[10]), r[11], r[0]
    )


def _excluded(columns: str, *key: str) -> str:
    """``col = excluded.col`` for each of ``columns`` but the conflict ``key``: an upsert that replaces the row
    (``INSERT OR REPLACE`` is SQLite's alone)."""
    return ", ".join(f"{c} = excluded.{c}" for c in (c.strip() for c in columns.split(",")) if c not in key)


def _json(value: Any) -> str:
    return orjson.dumps(value if value is not None else {}).decode()


class Pipelines:
    """Typed access to the pipeline tables over one connection (see :class:`servekit.services.database.StateDB`)."""

    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock

    # ---- runs ------------------------------------------------------------------------------------------------

    def create_run(
        self,
        *,
        run_id: str,
        pipeline: str,
        arn: str,
        source: str,
        definition: Mapping[str, Any],
        parameters: Mapping[str, Any],
        artifact_root: str,
        status: str,
        owner_pid: int,
        owner_host: str,
        claim: Claim | None = None,
    ) -> RunRow:
        """Insert the run; with ``claim``, record the claim in the same transaction (:class:`AlreadyClaimed`, and
        no run, when its key was claimed before: by this process, a restarted one or another at the same time)."""
        now = self._clock()
        with transaction(self._db):
            if claim is not None:
                taken = self._db.execute(
                    "SELECT run_id FROM pipeline_trigger_claims WHERE pipeline = ? AND trigger = ? AND key = ?",
                    (pipeline, claim.trigger, claim.key),
                ).fetchone()
                if taken is not None:
                    raise AlreadyClaimed(f"{claim.trigger} {claim.key} started run {taken[0]}")
            self._db.execute(
                f"INSERT INTO pipeline_runs ({_RUN_COLUMNS.removeprefix('seq, ')}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, NULL, ?, ?)",
                (
                    run_id,
                    pipeline,
                    arn,
                    source,
                    _json(dict(definition)),
                    _json(dict(parameters)),
                    artifact_root,
                    status,
                    now,
                    now,
                    owner_pid,
                    owner_host,
                ),
            )
            if claim is not None:  # BEGIN IMMEDIATE holds the write lock: no one claims between check and insert
                self._db.execute(
                    "INSERT INTO pipeline_trigger_claims (pipeline, trigger, key, run_id, claimed) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (pipeline, claim.trigger, claim.key, run_id, now),
                )
        row = self.get_run(run_id)
        assert row is not None
        return row

    def get_run(self, run_id: str) -> RunRow | None:
        r = self._db.execute(
            f"SELECT {_RUN_COLUMNS} FROM pipeline_runs WHERE run_id = ? OR lower(arn) = lower(?)", (run_id, run_id)
        ).fetchone()
        return _run(r) if r else None

    def list_runs(
        self,
        *,
        pipeline: str | None = None,
        sort_order: str = "Descending",
        max_results: int = 50,
        next_token: str | None = None,
    ) -> Page[RunRow]:
        where, args = ((), ()) if pipeline is None else (("pipeline = ?",), (pipeline,))
        listing = Listing(where, args, "CreationTime", sort_order, max_results, next_token)
        return page_of(keyset_page(self._db, "pipeline_runs", _RUN_COLUMNS, _SORT, listing), _run)

    def set_run_status(
        self,
        run_id: str,
        status: str,
        *,
        reason: str = "",
        final: bool = False,
        expected: Iterable[str] | None = None,
    ) -> None:
        """Set the status (and failure reason; the end time when ``final``). With ``expected``, only from one
        of those statuses: :class:`StaleRunStatus` otherwise."""
        now = self._clock()
        sql = "UPDATE pipeline_runs SET status = ?, failure_reason = ?, modified = ?, ended = ? WHERE run_id = ?"
        args: list[Any] = [status, reason, now, now if final else None, run_id]
        if expected is not None:
            allowed = list(expected)
            sql += f" AND status IN ({','.join('?' * len(allowed))})"
            args += allowed
        with transaction(self._db):
            if self._db.execute(sql, args).rowcount != 1:
                raise StaleRunStatus(run_id)

    def take_over(self, run_id: str, status: str, *, owner_pid: int, owner_host: str, expected: Iterable[str]) -> None:
        """A resume: the run belongs to ``owner_pid`` now, ``status`` again, no failure, no end."""
        allowed = list(expected)
        with transaction(self._db):
            changed = self._db.execute(
                "UPDATE pipeline_runs SET status = ?, failure_reason = '', modified = ?, ended = NULL, "
                f"owner_pid = ?, owner_host = ? WHERE run_id = ? AND status IN ({','.join('?' * len(allowed))})",
                (status, self._clock(), owner_pid, owner_host, run_id, *allowed),
            ).rowcount
        if changed != 1:
            raise StaleRunStatus(run_id)

    def claims(self, pipeline: str, trigger: str) -> builtins.list[ClaimRow]:
        """The keys of ``trigger`` that started runs of ``pipeline``, oldest first."""
        rows = self._db.execute(
            "SELECT pipeline, trigger, key, run_id, claimed FROM pipeline_trigger_claims "
            "WHERE pipeline = ? AND trigger = ? ORDER BY claimed, key",
            (pipeline, trigger),
        ).fetchall()
        return [ClaimRow(*r) for r in rows]

    # ---- pipelines registered through the API ------------------------------------------------------------------

    def create_definition(
        self,
        *,
        name: str,
        arn: str,
        display_name: str,
        description: str,
        role_arn: str,
        definition: str,
        parallelism: int | None = None,
    ) -> DefinitionRow:
        now = self._clock()
        try:
            with transaction(self._db):
                self._db.execute(
                    f"INSERT INTO pipeline_definitions ({_DEFINITION_COLUMNS.removeprefix('seq, ')}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                    (name, arn, display_name, description, role_arn, definition, now, now, parallelism),
                )
        except sqlite3.IntegrityError:
            raise DefinitionExists(name) from None
        row = self.get_definition(name)
        assert row is not None
        return row

    def get_definition(self, name: str) -> DefinitionRow | None:
        r = self._db.execute(
            f"SELECT {_DEFINITION_COLUMNS} FROM pipeline_definitions WHERE name = ? OR lower(arn) = lower(?)",
            (name, name),
        ).fetchone()
        return _definition(r) if r else None

    def list_definitions(
        self,
        *,
        name_prefix: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = 50,
        next_token: str | None = None,
    ) -> Page[DefinitionRow]:
        where, args = where_set(
            ("name LIKE ? ESCAPE '\\'", None if name_prefix is None else _like_prefix(name_prefix)),
            ("created > ?", created_after),
            ("created < ?", created_before),
        )
        listing = Listing(where, args, sort_by, sort_order, max_results, next_token)
        return page_of(
            keyset_page(self._db, "pipeline_definitions", _DEFINITION_COLUMNS, _DEFINITION_SORT, listing), _definition
        )

    def update_definition(self, name: str, **columns: str | int) -> None:
        """UpdatePipeline: the given columns (definition, display_name, description, role_arn, parallelism) and the
        time."""
        sets = "".join(f"{c} = ?, " for c in columns)
        with transaction(self._db):
            self._db.execute(
                f"UPDATE pipeline_definitions SET {sets}modified = ? WHERE name = ?",
                (*columns.values(), self._clock(), name),
            )

    def delete_definition(self, name: str) -> bool:
        with transaction(self._db):
            return self._db.execute("DELETE FROM pipeline_definitions WHERE name = ?", (name,)).rowcount == 1

    def add_api_execution(self, row: ApiExecutionRow) -> ApiExecutionRow:
        """Record an execution about to start (and the definition's last run); the same ``token`` for the same
        pipeline answers the execution it started before (an idempotent retry)."""
        with transaction(self._db):
            same = self._db.execute(
                f"SELECT {_API_EXECUTION_COLUMNS} FROM pipeline_api_executions WHERE pipeline = ? AND token = ?",
                (row.pipeline, row.token),
            ).fetchone()
            if same is not None:
                return _api_execution(same)
            self._db.execute(
                f"INSERT INTO pipeline_api_executions ({_API_EXECUTION_COLUMNS}) VALUES ({','.join('?' * 11)})",
                (
                    row.run_id,
                    row.pipeline,
                    row.arn,
                    row.display_name,
                    row.description,
                    _json(row.parameters),
                    row.token,
                    row.created or self._clock(),
                    row.pid,
                    row.log,
                    row.exit_code,
                ),
            )
            self._db.execute(
                "UPDATE pipeline_definitions SET last_run = ? WHERE name = ?", (self._clock(), row.pipeline)
            )
        found = self.get_api_execution(row.run_id)
        assert found is not None
        return found

    def set_api_execution_process(self, run_id: str, *, pid: int | None = None, exit_code: int | None = None) -> None:
        with transaction(self._db):
            if pid is not None:
                self._db.execute("UPDATE pipeline_api_executions SET pid = ? WHERE run_id = ?", (pid, run_id))
            if exit_code is not None:
                self._db.execute(
                    "UPDATE pipeline_api_executions SET exit_code = ? WHERE run_id = ?", (exit_code, run_id)
                )

    def get_api_execution(self, run_id: str) -> ApiExecutionRow | None:
        r = self._db.execute(
            f"SELECT {_API_EXECUTION_COLUMNS} FROM pipeline_api_executions WHERE run_id = ? OR lower(arn) = lower(?)",
            (run_id, run_id),
        ).fetchone()
        return _api_execution(r) if r else None

    def api_executions(self, pipeline: str) -> builtins.list[ApiExecutionRow]:
        rows = self._db.execute(
            f"SELECT {_API_EXECUTION_COLUMNS} FROM pipeline_api_executions WHERE pipeline = ? ORDER BY created DESC",
            (pipeline,),
        ).fetchall()
        return [_api_execution(r) for r in rows]

    # ---- steps -----------------------------------------------------------------------------------------------

    def steps(self, run_id: str) -> builtins.list[StepRow]:
        rows = self._db.execute(
            f"SELECT {_STEP_COLUMNS} FROM pipeline_steps WHERE run_id = ? ORDER BY started IS NULL, started, step",
            (run_id,),
        ).fetchall()
        return [_step(r) for r in rows]

    def put_step(self, row: StepRow) -> None:
        """Insert or replace the step's row."""
        with transaction(self._db):
            self._db.execute(
                f"INSERT INTO pipeline_steps ({_STEP_COLUMNS}) VALUES ({','.join('?' * 14)}) "
                f"ON CONFLICT (run_id, step) DO UPDATE SET {_excluded(_STEP_COLUMNS, 'run_id', 'step')}",
                (
                    row.run_id,
                    row.step,
                    row.kind,
                    row.status,
                    row.attempts,
                    row.started,
                    row.ended,
                    row.failure_reason,
                    row.code_hash,
                    row.cache_key,
                    row.cache_source_run,
                    _json(row.outputs),
                    _json(row.properties),
                    _json(row.metadata),
                ),
            )

    def cache_hit(self, pipeline: str, step: str, cache_key: str, status: str, since: float | None) -> StepRow | None:
        """The newest step row of ``pipeline`` named ``step`` with ``cache_key`` in ``status`` that ended after
        ``since`` (None: any time)."""
        r = self._db.execute(
            f"SELECT {', '.join('s.' + c.strip() for c in _STEP_COLUMNS.split(','))} FROM pipeline_steps s "
            "JOIN pipeline_runs r ON r.run_id = s.run_id WHERE r.pipeline = ? AND s.step = ? AND s.cache_key = ? "
            "AND s.status = ? AND s.ended >= ? ORDER BY s.ended DESC LIMIT 1",
            (pipeline, step, cache_key, status, -1.0 if since is None else since),
        ).fetchone()
        return _step(r) if r else None

    # ---- artifacts -------------------------------------------------------------------------------------------

    def add_artifact(self, row: ArtifactRow, files: Iterable[ArtifactFile]) -> None:
        """Record an artifact and its files (once: a URI is never recorded twice)."""
        with transaction(self._db):
            cur = self._db.execute(
                f"INSERT INTO pipeline_artifacts ({_ARTIFACT_COLUMNS.removeprefix('seq, ')}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",  # SQLite >= 3.35 and PostgreSQL
                (
                    row.uri,
                    row.sha256,
                    row.pipeline,
                    row.run_id,
                    row.step,
                    row.attempt,
                    row.output,
                    row.code_hash,
                    _json(row.parameters),
                    orjson.dumps(row.inputs).decode(),
                    self._clock(),
                ),
            )
            seq = int(cur.fetchall()[0][0])  # all rows read: SQLite's statement is finished
            self._db.executemany(
                "INSERT INTO pipeline_artifact_files (artifact, key, sha256, size) VALUES (?, ?, ?, ?)",
                [(seq, f.key, f.sha256, f.size) for f in files],
            )

    def artifacts(
        self, *, uri: str | None = None, sha256: str | None = None, run_id: str | None = None
    ) -> builtins.list[ArtifactRow]:
        """Artifacts with that URI, that content hash (of the artifact or of one of its files), or of that run."""
        args: tuple[str, ...]
        if uri is not None:
            sql, args = "uri = ?", (uri,)
        elif sha256 is not None:
            sql = "sha256 = ? OR seq IN (SELECT artifact FROM pipeline_artifact_files WHERE sha256 = ?)"
            args = (sha256, sha256)
        elif run_id is not None:
            sql, args = "run_id = ?", (run_id,)
        else:
            raise ValueError("give uri, sha256 or run_id")
        rows = self._db.execute(f"SELECT {_ARTIFACT_COLUMNS} FROM pipeline_artifacts WHERE {sql} ORDER BY seq", args)
        return [_artifact(r) for r in rows.fetchall()]

    def artifact_under(self, uri: str) -> ArtifactRow | None:
        """The artifact whose folder holds ``uri`` (a file inside an output), if any."""
        rows = self._db.execute(
            f"SELECT {_ARTIFACT_COLUMNS} FROM pipeline_artifacts WHERE ? = uri OR substr(?, 1, length(uri) + 1) = "
            "uri || '/' ORDER BY length(uri) DESC LIMIT 1",
            (uri, uri),
        ).fetchone()
        return _artifact(rows) if rows else None

    def artifact_files(self, artifact: ArtifactRow) -> builtins.list[ArtifactFile]:
        rows = self._db.execute(
            "SELECT key, sha256, size FROM pipeline_artifact_files WHERE artifact = ? ORDER BY key", (artifact.seq,)
        ).fetchall()
        return [ArtifactFile(*r) for r in rows]


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
