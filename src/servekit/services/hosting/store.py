"""The hosting aggregate: models, endpoint configs, endpoints, their status history and their instances.

The repository stores what it is given: statuses are text, and which transitions are legal belongs to
``servekit.services.hosting.lifecycle`` above it. What it does guarantee:

- **Names are unique per kind, ignoring case** (``MyEndpoint`` and ``myendpoint`` cannot both exist: SageMaker
  lowercases names in ARNs, so they would share one). A lookup ignores case too; rows keep the spelling they were
  created with (the gateway compares it exactly where SageMaker does, e.g. InvokeEndpoint).
- **Every write is atomic**: a status change and its history row, an endpoint's deletion and its instance rows,
  commit together. A status change is compare-and-set (``expected``), so two writers cannot both move an
  endpoint out of the same status.
- **A deleted endpoint is gone** from ``hosting_endpoints`` (and its instance rows with it); its history stays,
  tagged with the endpoint's id so a later endpoint of the same name has a history of its own.
- **Listing pages are stable under inserts**: a ``NextToken`` names the last row returned by its sort key and
  a tiebreaking sequence number (keyset pagination), never by an offset, so rows created between two calls
  neither repeat nor push others off a page. A row whose sort key itself changes between calls (sorting by
  Status) may move across the cut, as in any keyset scheme.
- **Time comes from the injected clock** (``clock``, seconds since the epoch), never from inside.

Deleting a model or an endpoint config that an endpoint uses is allowed, as in SageMaker: endpoints keep what
they were built from.
"""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import orjson

from servekit.services.hosting.store_rows import (
    UNSET,
    AlreadyExists,
    ContainerSpec,
    EndpointConfigRow,
    EndpointRow,
    HostingStateError,
    InstanceRow,
    Kind,
    ModelRow,
    NotFound,
    StaleStatus,
    StatusChange,
    Unset,
    VariantState,
)
from servekit.state.connection import Connection, Cursor, transaction
from servekit.state.migrations import Migration
from servekit.state.paging import InvalidNextToken, Listing, Page, keyset_page, page_of

__all__ = [
    "AGGREGATE",
    "DEFAULT_MAX_RESULTS",
    "MIGRATIONS",
    "UNSET",
    "AlreadyExists",
    "ContainerSpec",
    "EndpointConfigRow",
    "EndpointRow",
    "Hosting",
    "HostingStateError",
    "InstanceRow",
    "InvalidNextToken",
    "ModelRow",
    "NotFound",
    "Page",
    "StaleStatus",
    "StatusChange",
    "Unset",
    "VariantState",
]

AGGREGATE = "hosting"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "models, endpoint configs, endpoints, endpoint status history, instances",
        (
            """CREATE TABLE hosting_models (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE COLLATE NOCASE,
                arn TEXT NOT NULL,
                created REAL NOT NULL,
                container TEXT NOT NULL,
                record TEXT NOT NULL
            )""",
            """CREATE TABLE hosting_endpoint_configs (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE COLLATE NOCASE,
                arn TEXT NOT NULL,
                created REAL NOT NULL,
                variants TEXT NOT NULL,
                data_capture TEXT,
                record TEXT NOT NULL
            )""",
            """CREATE TABLE hosting_endpoints (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE COLLATE NOCASE,
                arn TEXT NOT NULL,
                config_name TEXT NOT NULL,
                status TEXT NOT NULL,
                failure_reason TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                last_modified REAL NOT NULL,
                pending_config_name TEXT,
                pending_since REAL,
                variants TEXT NOT NULL,
                record TEXT NOT NULL
            )""",
            "CREATE INDEX hosting_endpoints_status ON hosting_endpoints (status)",
            """CREATE TABLE hosting_endpoint_history (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                endpoint TEXT NOT NULL COLLATE NOCASE,
                endpoint_id INTEGER NOT NULL,
                from_status TEXT,
                to_status TEXT NOT NULL,
                reason TEXT NOT NULL,
                at REAL NOT NULL
            )""",
            "CREATE INDEX hosting_endpoint_history_endpoint ON hosting_endpoint_history (endpoint, seq)",
            """CREATE TABLE hosting_instances (
                instance_id TEXT PRIMARY KEY,
                endpoint TEXT NOT NULL COLLATE NOCASE,
                config_name TEXT NOT NULL,
                variant TEXT NOT NULL,
                instance_type TEXT NOT NULL,
                state TEXT NOT NULL,
                port INTEGER,
                handle TEXT NOT NULL DEFAULT '',
                last_error TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                updated REAL NOT NULL,
                started REAL,
                ended REAL
            )""",
            "CREATE INDEX hosting_instances_endpoint ON hosting_instances (endpoint, variant)",
        ),
    ),
    Migration(
        2,
        "gateway routes and the leader's address, for gateway replicas (servekit.gateway.store)",
        (
            # one row per endpoint name the leader's routing table held; doc NULL: it left the table. version:
            # a counter over all rows, so a replica polls MAX(version) and reads only what changed
            """CREATE TABLE hosting_routes (
                endpoint TEXT PRIMARY KEY,
                doc TEXT,
                version INTEGER NOT NULL
            )""",
            "CREATE INDEX hosting_routes_version ON hosting_routes (version)",
            """CREATE TABLE hosting_leader (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                url TEXT NOT NULL,
                metrics_resolution_s INTEGER NOT NULL,
                pid INTEGER NOT NULL,
                started REAL NOT NULL
            )""",
        ),
    ),
    Migration(
        3,
        "asynchronous invocations queued for InvokeEndpointAsync (servekit.services.hosting.store_rows.AsyncQueue)",
        (
            """CREATE TABLE hosting_async_invocations (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                inference_id TEXT NOT NULL,
                endpoint TEXT NOT NULL COLLATE NOCASE,
                request TEXT NOT NULL,
                status TEXT NOT NULL,
                created REAL NOT NULL,
                expires REAL NOT NULL,
                started REAL,
                ended REAL,
                error TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX hosting_async_invocations_queue ON hosting_async_invocations (status, endpoint, seq)",
        ),
    ),
    Migration(
        4,
        "inference components of IC-based endpoints (servekit.services.hosting.store_rows.InferenceComponentRepo)",
        (
            """CREATE TABLE hosting_inference_components (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE COLLATE NOCASE,
                arn TEXT NOT NULL,
                endpoint TEXT NOT NULL COLLATE NOCASE,
                variant TEXT NOT NULL,
                status TEXT NOT NULL,
                failure_reason TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                last_modified REAL NOT NULL,
                copies INTEGER NOT NULL,
                record TEXT NOT NULL
            )""",
            "CREATE INDEX hosting_inference_components_endpoint ON hosting_inference_components (endpoint, seq)",
        ),
    ),
)


DEFAULT_MAX_RESULTS = 10  # SageMaker's default for ListModels, ListEndpointConfigs and ListEndpoints


# ---- the repository ----------------------------------------------------------------------------------------------

_MODEL_COLUMNS = "seq, name, arn, created, container, record"
_CONFIG_COLUMNS = "seq, name, arn, created, variants, data_capture, record"
_ENDPOINT_COLUMNS = (
    "seq, name, arn, config_name, status, failure_reason, created, last_modified, pending_config_name, "
    "pending_since, variants, record"
)
_INSTANCE_COLUMNS = (
    "instance_id, endpoint, config_name, variant, instance_type, state, port, handle, last_error, created, updated, "
    "started, ended"
)
_SORT_COLUMNS: dict[str, str] = {"Name": "name", "CreationTime": "created"}
_ENDPOINT_SORT_COLUMNS: dict[str, str] = {**_SORT_COLUMNS, "Status": "status"}


def _dumps(doc: Any) -> str:
    return orjson.dumps(doc).decode()


class Hosting:
    """Typed access to the hosting tables over one connection (see :class:`servekit.services.database.StateDB`).

    Each write method commits on its own, or joins the transaction opened with :meth:`transaction`."""

    def __init__(self, conn: Connection, *, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Several writes that commit together (a write method inside joins it)."""
        with transaction(self._db):
            yield

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        if self._db.in_transaction:
            yield self._db
        else:
            with transaction(self._db):
                yield self._db

    # ---- models ------------------------------------------------------------------------------------------------

    def create_model(
        self, name: str, arn: str, container: ContainerSpec, record: Mapping[str, Any] | None = None
    ) -> ModelRow:
        now = self._clock()
        with self._write() as db:
            self._insert(
                db,
                "model",
                name,
                "INSERT INTO hosting_models (name, arn, created, container, record) VALUES (?, ?, ?, ?, ?)",
                (name, arn, now, _dumps(container.to_json()), _dumps(dict(record or {}))),
            )
        return ModelRow(name, arn, now, container, dict(record or {}))

    def get_model(self, name: str) -> ModelRow | None:
        row = self._db.execute(f"SELECT {_MODEL_COLUMNS} FROM hosting_models WHERE name = ?", (name,)).fetchone()
        return _model(row) if row else None

    def delete_model(self, name: str) -> None:
        self._delete("model", "hosting_models", name)

    def list_models(
        self,
        *,
        name_contains: str | None = None,
        creation_time_before: float | None = None,
        creation_time_after: float | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = DEFAULT_MAX_RESULTS,
        next_token: str | None = None,
    ) -> Page[ModelRow]:
        where, args = _filters(name_contains, creation_time_before, creation_time_after)
        listing = Listing(tuple(where), tuple(args), sort_by, sort_order, max_results, next_token)
        return page_of(keyset_page(self._db, "hosting_models", _MODEL_COLUMNS, _SORT_COLUMNS, listing), _model)

    # ---- endpoint configs --------------------------------------------------------------------------------------

    def create_endpoint_config(
        self,
        name: str,
        arn: str,
        variants: Sequence[Mapping[str, Any]],
        data_capture: Mapping[str, Any] | None = None,
        record: Mapping[str, Any] | None = None,
    ) -> EndpointConfigRow:
        now = self._clock()
        variant_docs = tuple(dict(v) for v in variants)
        capture = dict(data_capture) if data_capture is not None else None
        with self._write() as db:
            self._insert(
                db,
                "endpoint-config",
                name,
                "INSERT INTO hosting_endpoint_configs (name, arn, created, variants, data_capture, record) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    name,
                    arn,
                    now,
                    _dumps(variant_docs),
                    None if capture is None else _dumps(capture),
                    _dumps(dict(record or {})),
                ),
            )
        return EndpointConfigRow(name, arn, now, variant_docs, capture, dict(record or {}))

    def get_endpoint_config(self, name: str) -> EndpointConfigRow | None:
        row = self._db.execute(
            f"SELECT {_CONFIG_COLUMNS} FROM hosting_endpoint_configs WHERE name = ?", (name,)
        ).fetchone()
        return _config(row) if row else None

    def delete_endpoint_config(self, name: str) -> None:
        self._delete("endpoint-config", "hosting_endpoint_configs", name)

    def list_endpoint_configs(
        self,
        *,
        name_contains: str | None = None,
        creation_time_before: float | None = None,
        creation_time_after: float | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = DEFAULT_MAX_RESULTS,
        next_token: str | None = None,
    ) -> Page[EndpointConfigRow]:
        where, args = _filters(name_contains, creation_time_before, creation_time_after)
        listing = Listing(tuple(where), tuple(args), sort_by, sort_order, max_results, next_token)
        rows = keyset_page(self._db, "hosting_endpoint_configs", _CONFIG_COLUMNS, _SORT_COLUMNS, listing)
        return page_of(rows, _config)

    # ---- endpoints ---------------------------------------------------------------------------------------------

    def create_endpoint(
        self,
        name: str,
        arn: str,
        config_name: str,
        status: str,
        variants: Sequence[VariantState],
        record: Mapping[str, Any] | None = None,
        *,
        reason: str = "",
    ) -> EndpointRow:
        """A new endpoint in ``status`` (its first history row, from None, says ``reason``)."""
        now = self._clock()
        with self._write() as db:
            cur = self._insert(
                db,
                "endpoint",
                name,
                "INSERT INTO hosting_endpoints (name, arn, config_name, status, created, last_modified, variants, "
                "record) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",  # SQLite >= 3.35 and PostgreSQL
                (name, arn, config_name, status, now, now, _variants_json(variants), _dumps(dict(record or {}))),
            )
            endpoint_id = int(cur.fetchall()[0][0])  # all rows read: SQLite's statement is finished
            self._history(db, name, endpoint_id, None, status, reason, now)
        created = self.get_endpoint(name)
        assert created is not None
        return created

    def get_endpoint(self, name: str) -> EndpointRow | None:
        row = self._db.execute(f"SELECT {_ENDPOINT_COLUMNS} FROM hosting_endpoints WHERE name = ?", (name,)).fetchone()
        return _endpoint(row) if row else None

    def transition(
        self,
        name: str,
        to: str,
        *,
        expected: str | Collection[str],
        reason: str = "",
        failure_reason: str | Unset = UNSET,
        config_name: str | Unset = UNSET,
        pending_config_name: str | Unset | None = UNSET,
        variants: Sequence[VariantState] | Unset = UNSET,
        record: Mapping[str, Any] | Unset = UNSET,
    ) -> EndpointRow:
        """Move the endpoint from ``expected`` (one status or any of several) to ``to``, with the fields that change
        along (an update's end swaps ``config_name`` and clears ``pending_config_name`` in the same write), and
        append the history row. :class:`StaleStatus` when the endpoint is in another status, :class:`NotFound`
        when it is gone. Setting ``pending_config_name`` to a name stamps ``pending_since``; None clears both."""
        allowed = (expected,) if isinstance(expected, str) else tuple(sorted(expected))
        now = self._clock()
        sets = ["status = ?", "last_modified = ?"]
        args: list[Any] = [to, now]
        if not isinstance(failure_reason, Unset):
            sets.append("failure_reason = ?")
            args.append(failure_reason)
        if not isinstance(config_name, Unset):
            sets.append("config_name = ?")
            args.append(config_name)
        if not isinstance(pending_config_name, Unset):
            sets += ["pending_config_name = ?", "pending_since = ?"]
            args += [pending_config_name, None if pending_config_name is None else now]
        if not isinstance(variants, Unset):
            sets.append("variants = ?")
            args.append(_variants_json(variants))
        if not isinstance(record, Unset):
            sets.append("record = ?")
            args.append(_dumps(dict(record)))
        with self._write() as db:
            current = db.execute("SELECT seq, name, status FROM hosting_endpoints WHERE name = ?", (name,)).fetchone()
            if current is None:
                raise NotFound(f"endpoint {name!r} does not exist", kind="endpoint", name=name)
            endpoint_id, stored_name, status = int(current[0]), str(current[1]), str(current[2])
            if status not in allowed:
                raise StaleStatus(
                    f"endpoint {stored_name!r} is {status}, not {' or '.join(allowed)}",
                    kind="endpoint",
                    name=stored_name,
                    actual=status,
                )
            db.execute(f"UPDATE hosting_endpoints SET {', '.join(sets)} WHERE seq = ?", (*args, endpoint_id))
            self._history(db, stored_name, endpoint_id, status, to, reason, now)
        changed = self.get_endpoint(name)
        assert changed is not None
        return changed

    def set_variants(self, name: str, variants: Sequence[VariantState]) -> EndpointRow:
        """Replace the variants' weights and counts without a status change (an instance replaced, a fleet
        scaled during an update); the last-modified time moves."""
        with self._write() as db:
            cur = db.execute(
                "UPDATE hosting_endpoints SET variants = ?, last_modified = ? WHERE name = ?",
                (_variants_json(variants), self._clock(), name),
            )
            if cur.rowcount == 0:
                raise NotFound(f"endpoint {name!r} does not exist", kind="endpoint", name=name)
        changed = self.get_endpoint(name)
        assert changed is not None
        return changed

    def delete_endpoint(self, name: str) -> None:
        """Remove the endpoint and its instance rows (stop the instances first); its history stays."""
        with self._write() as db:
            if db.execute("DELETE FROM hosting_endpoints WHERE name = ?", (name,)).rowcount == 0:
                raise NotFound(f"endpoint {name!r} does not exist", kind="endpoint", name=name)
            db.execute("DELETE FROM hosting_instances WHERE endpoint = ?", (name,))

    def list_endpoints(
        self,
        *,
        name_contains: str | None = None,
        status_equals: str | None = None,
        creation_time_before: float | None = None,
        creation_time_after: float | None = None,
        last_modified_time_before: float | None = None,
        last_modified_time_after: float | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = DEFAULT_MAX_RESULTS,
        next_token: str | None = None,
    ) -> Page[EndpointRow]:
        where, args = _filters(name_contains, creation_time_before, creation_time_after)
        if status_equals is not None:
            where.append("status = ?")
            args.append(status_equals)
        if last_modified_time_before is not None:
            where.append("last_modified < ?")
            args.append(last_modified_time_before)
        if last_modified_time_after is not None:
            where.append("last_modified > ?")
            args.append(last_modified_time_after)
        listing = Listing(tuple(where), tuple(args), sort_by, sort_order, max_results, next_token)
        rows = keyset_page(self._db, "hosting_endpoints", _ENDPOINT_COLUMNS, _ENDPOINT_SORT_COLUMNS, listing)
        return page_of(rows, _endpoint)

    def all_endpoints(self) -> builtins.list[EndpointRow]:
        """Every endpoint, oldest first: what a restarted control plane reconciles."""
        rows = self._db.execute(f"SELECT {_ENDPOINT_COLUMNS} FROM hosting_endpoints ORDER BY seq").fetchall()
        return [_endpoint(r) for r in rows]

    def history(self, name: str) -> builtins.list[StatusChange]:
        """Every status change of endpoints of this name (deleted ones too), oldest first; ``endpoint_id`` tells
        one endpoint from a later one of the same name."""
        rows = self._db.execute(
            "SELECT endpoint, endpoint_id, from_status, to_status, reason, at FROM hosting_endpoint_history "
            "WHERE endpoint = ? ORDER BY seq",
            (name,),
        ).fetchall()
        return [StatusChange(*r) for r in rows]

    # ---- instances ---------------------------------------------------------------------------------------------

    def add_instance(
        self, instance_id: str, endpoint: str, config_name: str, variant: str, instance_type: str, state: str
    ) -> InstanceRow:
        now = self._clock()
        with self._write() as db:
            try:
                db.execute(
                    "INSERT INTO hosting_instances (instance_id, endpoint, config_name, variant, instance_type, "
                    "state, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (instance_id, endpoint, config_name, variant, instance_type, state, now, now),
                )
            except sqlite3.IntegrityError:
                raise AlreadyExists(f"instance {instance_id!r} already exists", name=instance_id) from None
        added = self.get_instance(instance_id)
        assert added is not None
        return added

    def get_instance(self, instance_id: str) -> InstanceRow | None:
        row = self._db.execute(
            f"SELECT {_INSTANCE_COLUMNS} FROM hosting_instances WHERE instance_id = ?", (instance_id,)
        ).fetchone()
        return InstanceRow(*row) if row else None

    def update_instance(
        self,
        instance_id: str,
        *,
        state: str | None = None,
        expected: str | Collection[str] | None = None,
        port: int | Unset | None = UNSET,
        handle: str | Unset = UNSET,
        last_error: str | Unset = UNSET,
        mark_started: bool = False,
        mark_ended: bool = False,
    ) -> InstanceRow:
        """Change an instance's fields; with ``expected``, only if its state is (one of) that (compare-and-set,
        :class:`StaleStatus` otherwise). ``mark_started``/``mark_ended`` stamp the clock's time."""
        now = self._clock()
        sets = ["updated = ?"]
        args: list[Any] = [now]
        if state is not None:
            sets.append("state = ?")
            args.append(state)
        if not isinstance(port, Unset):
            sets.append("port = ?")
            args.append(port)
        if not isinstance(handle, Unset):
            sets.append("handle = ?")
            args.append(handle)
        if not isinstance(last_error, Unset):
            sets.append("last_error = ?")
            args.append(last_error)
        if mark_started:
            sets.append("started = ?")
            args.append(now)
        if mark_ended:
            sets.append("ended = ?")
            args.append(now)
        with self._write() as db:
            current = db.execute("SELECT state FROM hosting_instances WHERE instance_id = ?", (instance_id,)).fetchone()
            if current is None:
                raise NotFound(f"instance {instance_id!r} does not exist", name=instance_id)
            if expected is not None:
                allowed = (expected,) if isinstance(expected, str) else tuple(sorted(expected))
                if current[0] not in allowed:
                    raise StaleStatus(
                        f"instance {instance_id!r} is {current[0]}, not {' or '.join(allowed)}",
                        name=instance_id,
                        actual=str(current[0]),
                    )
            db.execute(f"UPDATE hosting_instances SET {', '.join(sets)} WHERE instance_id = ?", (*args, instance_id))
        changed = self.get_instance(instance_id)
        assert changed is not None
        return changed

    def instances(
        self, endpoint: str | None = None, *, states: Sequence[str] | None = None
    ) -> builtins.list[InstanceRow]:
        """Instances (of one endpoint, in some states), oldest first."""
        where: list[str] = []
        args: list[Any] = []
        if endpoint is not None:
            where.append("endpoint = ?")
            args.append(endpoint)
        if states is not None:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args += list(states)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._db.execute(
            f"SELECT {_INSTANCE_COLUMNS} FROM hosting_instances {clause} ORDER BY created, instance_id", args
        ).fetchall()
        return [InstanceRow(*r) for r in rows]

    def delete_instance(self, instance_id: str) -> None:
        with self._write() as db:
            if db.execute("DELETE FROM hosting_instances WHERE instance_id = ?", (instance_id,)).rowcount == 0:
                raise NotFound(f"instance {instance_id!r} does not exist", name=instance_id)

    # ---- helpers -----------------------------------------------------------------------------------------------

    @staticmethod
    def _insert(db: Connection, kind: Kind, name: str, sql: str, args: tuple[Any, ...]) -> Cursor:
        try:
            return db.execute(sql, args)
        except sqlite3.IntegrityError as exc:
            if "UNIQUE" not in str(exc):
                raise
            raise AlreadyExists(f"{kind} {name!r} already exists", kind=kind, name=name) from None

    def _delete(self, kind: Kind, table: str, name: str) -> None:
        with self._write() as db:
            if db.execute(f"DELETE FROM {table} WHERE name = ?", (name,)).rowcount == 0:
                raise NotFound(f"{kind} {name!r} does not exist", kind=kind, name=name)

    @staticmethod
    def _history(
        db: Connection, name: str, endpoint_id: int, old: str | None, new: str, reason: str, at: float
    ) -> None:
        db.execute(
            "INSERT INTO hosting_endpoint_history (endpoint, endpoint_id, from_status, to_status, reason, at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (name, endpoint_id, old, new, reason, at),
        )


# ---- rows from SQL -----------------------------------------------------------------------------------------------


def _model(row: Sequence[Any]) -> ModelRow:
    return ModelRow(row[1], row[2], row[3], ContainerSpec.from_json(orjson.loads(row[4])), orjson.loads(row[5]))


def _config(row: Sequence[Any]) -> EndpointConfigRow:
    capture = orjson.loads(row[5]) if row[5] is not None else None
    return EndpointConfigRow(row[1], row[2], row[3], tuple(orjson.loads(row[4])), capture, orjson.loads(row[6]))


def _endpoint(row: Sequence[Any]) -> EndpointRow:
    return EndpointRow(
        id=int(row[0]),
        name=row[1],
        arn=row[2],
        config_name=row[3],
        status=row[4],
        failure_reason=row[5],
        created=row[6],
        last_modified=row[7],
        pending_config_name=row[8],
        pending_since=row[9],
        variants=tuple(VariantState.from_json(v) for v in orjson.loads(row[10])),
        record=orjson.loads(row[11]),
    )


def _variants_json(variants: Sequence[VariantState]) -> str:
    return _dumps([v.to_json() for v in variants])


def _filters(
    name_contains: str | None, before: float | None, after: float | None
) -> tuple[builtins.list[str], builtins.list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if name_contains:
        where.append("instr(lower(name), lower(?)) > 0")  # names are ASCII: lower() folds them all
        args.append(name_contains)
    if before is not None:
        where.append("created < ?")
        args.append(before)
    if after is not None:
        where.append("created > ?")
        args.append(after)
    return where, args
