"""The autoscaling aggregate: Application Auto Scaling's scalable targets, scaling policies and activities.

The repository stores what it is given (documents as JSON beside the columns that are queried); validation and
what a policy means belong to ``servekit.services.autoscaling.api`` and
``servekit.services.autoscaling.target_tracking``.
Guarantees:

- A scalable target is keyed by (ServiceNamespace, ResourceId, ScalableDimension); re-registering replaces it.
- A policy is keyed by its target and PolicyName; deregistering a target deletes its policies in the same
  transaction. Activities are kept after their target is gone, newest first when listed.
- **Time comes from the injected clock** (``clock``, seconds since the epoch), never from inside.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration

AGGREGATE = "autoscaling"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "Application Auto Scaling scalable targets, scaling policies and activities",
        (
            """CREATE TABLE autoscaling_targets (
                namespace TEXT NOT NULL,
                resource_id TEXT NOT NULL,
                dimension TEXT NOT NULL,
                document TEXT NOT NULL,
                created REAL NOT NULL,
                PRIMARY KEY (namespace, resource_id, dimension)
            )""",
            """CREATE TABLE autoscaling_policies (
                namespace TEXT NOT NULL,
                resource_id TEXT NOT NULL,
                dimension TEXT NOT NULL,
                name TEXT NOT NULL,
                document TEXT NOT NULL,
                created REAL NOT NULL,
                PRIMARY KEY (namespace, resource_id, dimension, name)
            )""",
            """CREATE TABLE autoscaling_activities (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                activity_id TEXT NOT NULL UNIQUE,
                namespace TEXT NOT NULL,
                resource_id TEXT NOT NULL,
                dimension TEXT NOT NULL,
                document TEXT NOT NULL,
                start_time REAL NOT NULL
            )""",
            "CREATE INDEX autoscaling_activities_target ON autoscaling_activities (namespace, resource_id)",
        ),
    ),
    Migration(
        2,
        "Scheduled actions, and the scaler's per-target memory (cooldowns survive a restart)",
        (
            """CREATE TABLE autoscaling_scheduled_actions (
                namespace TEXT NOT NULL,
                resource_id TEXT NOT NULL,
                dimension TEXT NOT NULL,
                name TEXT NOT NULL,
                document TEXT NOT NULL,
                created REAL NOT NULL,
                PRIMARY KEY (namespace, resource_id, dimension, name)
            )""",
            """CREATE TABLE autoscaling_scaler (
                namespace TEXT NOT NULL,
                resource_id TEXT NOT NULL,
                dimension TEXT NOT NULL,
                document TEXT NOT NULL,
                PRIMARY KEY (namespace, resource_id, dimension)
            )""",
        ),
    ),
)

Key = tuple[str, str, str]  # (ServiceNamespace, ResourceId, ScalableDimension)


@dataclass(frozen=True, slots=True)
class Stored:
    key: Key
    document: dict[str, Any]
    created: float


def _dumps(doc: Mapping[str, Any]) -> str:
    return orjson.dumps(dict(doc)).decode()


def _row(r: Sequence[Any]) -> Stored:
    return Stored((r[0], r[1], r[2]), orjson.loads(r[3]), r[4])


def _where(namespace: str, resource_id: str | None, dimension: str | None) -> tuple[str, list[Any]]:
    clauses, args = ["namespace = ?"], [namespace]
    if resource_id is not None:
        clauses.append("resource_id = ?")
        args.append(resource_id)
    if dimension is not None:
        clauses.append("dimension = ?")
        args.append(dimension)
    return " AND ".join(clauses), args


class Autoscaling:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.clock = clock

    # ---- scalable targets ------------------------------------------------------------------------------------
    def put_target(self, key: Key, document: Mapping[str, Any]) -> Stored:
        """Create or replace the target ``key`` (keeping its creation time)."""
        now = self.clock()
        with transaction(self.conn) as c:
            c.execute(
                "INSERT INTO autoscaling_targets (namespace, resource_id, dimension, document, created) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, resource_id, dimension) "
                "DO UPDATE SET document = excluded.document",
                (*key, _dumps(document), now),
            )
        found = self.get_target(key)
        assert found is not None
        return found

    def get_target(self, key: Key) -> Stored | None:
        r = self.conn.execute(
            "SELECT namespace, resource_id, dimension, document, created FROM autoscaling_targets "
            "WHERE namespace = ? AND resource_id = ? AND dimension = ?",
            key,
        ).fetchone()
        return None if r is None else _row(r)

    def targets(self, namespace: str, resource_ids: Sequence[str] = (), dimension: str | None = None) -> list[Stored]:
        where, args = _where(namespace, None, dimension)
        rows = self.conn.execute(
            "SELECT namespace, resource_id, dimension, document, created FROM autoscaling_targets "
            f"WHERE {where} ORDER BY created, resource_id",
            args,
        ).fetchall()
        found = [_row(r) for r in rows]
        return [t for t in found if t.key[1] in resource_ids] if resource_ids else found

    def delete_target(self, key: Key) -> bool:
        """Delete the target, its policies, scheduled actions and scaler memory; False when there was none."""
        where = "WHERE namespace = ? AND resource_id = ? AND dimension = ?"
        with transaction(self.conn) as c:
            gone = c.execute(f"DELETE FROM autoscaling_targets {where}", key).rowcount
            c.execute(f"DELETE FROM autoscaling_policies {where}", key)
            c.execute(f"DELETE FROM autoscaling_scheduled_actions {where}", key)
            c.execute(f"DELETE FROM autoscaling_scaler {where}", key)
        return gone > 0

    # ---- scaling policies ------------------------------------------------------------------------------------
    def put_policy(self, key: Key, name: str, document: Mapping[str, Any]) -> None:
        now = self.clock()
        with transaction(self.conn) as c:
            c.execute(
                "INSERT INTO autoscaling_policies (namespace, resource_id, dimension, name, document, created) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, resource_id, dimension, name) "
                "DO UPDATE SET document = excluded.document",
                (*key, name, _dumps(document), now),
            )

    def get_policy(self, key: Key, name: str) -> dict[str, Any] | None:
        r = self.conn.execute(
            "SELECT document FROM autoscaling_policies "
            "WHERE namespace = ? AND resource_id = ? AND dimension = ? AND name = ?",
            (*key, name),
        ).fetchone()
        return None if r is None else dict(orjson.loads(r[0]))

    def policies(
        self, namespace: str, resource_id: str | None = None, dimension: str | None = None, names: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        where, args = _where(namespace, resource_id, dimension)
        rows = self.conn.execute(
            f"SELECT name, document FROM autoscaling_policies WHERE {where} ORDER BY created, name", args
        ).fetchall()
        return [dict(orjson.loads(d)) for n, d in rows if not names or n in names]

    def delete_policy(self, key: Key, name: str) -> bool:
        with transaction(self.conn) as c:
            gone = c.execute(
                "DELETE FROM autoscaling_policies "
                "WHERE namespace = ? AND resource_id = ? AND dimension = ? AND name = ?",
                (*key, name),
            ).rowcount
        return gone > 0

    # ---- scheduled actions -----------------------------------------------------------------------------------
    def put_scheduled_action(self, key: Key, name: str, document: Mapping[str, Any]) -> None:
        with transaction(self.conn) as c:
            c.execute(
                "INSERT INTO autoscaling_scheduled_actions (namespace, resource_id, dimension, name, document, "
                "created) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, resource_id, dimension, name) "
                "DO UPDATE SET document = excluded.document",
                (*key, name, _dumps(document), self.clock()),
            )

    def get_scheduled_action(self, key: Key, name: str) -> dict[str, Any] | None:
        r = self.conn.execute(
            "SELECT document FROM autoscaling_scheduled_actions "
            "WHERE namespace = ? AND resource_id = ? AND dimension = ? AND name = ?",
            (*key, name),
        ).fetchone()
        return None if r is None else dict(orjson.loads(r[0]))

    def scheduled_actions(
        self, namespace: str, resource_id: str | None = None, dimension: str | None = None, names: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        where, args = _where(namespace, resource_id, dimension)
        rows = self.conn.execute(
            f"SELECT name, document FROM autoscaling_scheduled_actions WHERE {where} ORDER BY created, name", args
        ).fetchall()
        return [dict(orjson.loads(d)) for n, d in rows if not names or n in names]

    def delete_scheduled_action(self, key: Key, name: str) -> bool:
        with transaction(self.conn) as c:
            gone = c.execute(
                "DELETE FROM autoscaling_scheduled_actions "
                "WHERE namespace = ? AND resource_id = ? AND dimension = ? AND name = ?",
                (*key, name),
            ).rowcount
        return gone > 0

    # ---- the scaler's memory of a target ---------------------------------------------------------------------
    def scaler_state(self, key: Key) -> dict[str, Any]:
        """What the scaler remembers of ``key`` (empty for a target it has not acted on)."""
        r = self.conn.execute(
            "SELECT document FROM autoscaling_scaler WHERE namespace = ? AND resource_id = ? AND dimension = ?", key
        ).fetchone()
        return {} if r is None else dict(orjson.loads(r[0]))

    def put_scaler_state(self, key: Key, document: Mapping[str, Any]) -> None:
        """Store the scaler's memory of ``key``, unless the target has been deregistered meanwhile."""
        with transaction(self.conn) as c:
            if (
                c.execute(
                    "SELECT 1 FROM autoscaling_targets WHERE namespace = ? AND resource_id = ? AND dimension = ?", key
                ).fetchone()
                is None
            ):
                return
            c.execute(
                "INSERT INTO autoscaling_scaler (namespace, resource_id, dimension, document) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (namespace, resource_id, dimension) DO UPDATE SET document = excluded.document",
                (*key, _dumps(document)),
            )

    # ---- scaling activities ----------------------------------------------------------------------------------
    def add_activity(self, key: Key, activity_id: str, document: Mapping[str, Any]) -> None:
        with transaction(self.conn) as c:
            c.execute(
                "INSERT INTO autoscaling_activities (activity_id, namespace, resource_id, dimension, document, "
                "start_time) VALUES (?, ?, ?, ?, ?, ?)",
                (activity_id, *key, _dumps(document), self.clock()),
            )

    def update_activity(self, activity_id: str, document: Mapping[str, Any]) -> bool:
        """Replace an activity's document (its status moved on); False when there is no such activity."""
        with transaction(self.conn) as c:
            changed = c.execute(
                "UPDATE autoscaling_activities SET document = ? WHERE activity_id = ?", (_dumps(document), activity_id)
            ).rowcount
        return changed > 0

    def get_activity(self, activity_id: str) -> dict[str, Any] | None:
        r = self.conn.execute(
            "SELECT document FROM autoscaling_activities WHERE activity_id = ?", (activity_id,)
        ).fetchone()
        return None if r is None else dict(orjson.loads(r[0]))

    def activities(
        self, namespace: str, resource_id: str | None = None, dimension: str | None = None
    ) -> list[dict[str, Any]]:
        """Newest first."""
        where, args = _where(namespace, resource_id, dimension)
        rows = self.conn.execute(
            f"SELECT document FROM autoscaling_activities WHERE {where} ORDER BY seq DESC", args
        ).fetchall()
        return [dict(orjson.loads(r[0])) for r in rows]
