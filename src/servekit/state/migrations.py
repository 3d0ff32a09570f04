"""Schema migrations, an ordered list per aggregate, recorded in ``schema_migrations``.

Each aggregate (transform jobs, and later endpoints, registry, pipeline runs) owns its tables and its list of
migrations, numbered 1, 2, 3, … Opening a database applies, in one write transaction, the migrations it lacks;
applying is idempotent (a second open, or two processes opening at once, change nothing). A database that
records a higher version of an aggregate than this servekit knows was written by a newer servekit and is refused.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from servekit.errors import ConfigError
from servekit.state.connection import Connection, transaction
from servekit.state.postgres import CREATE_NOCASE_COLLATION, PostgresConnection

SCHEMA_TABLE = "schema_migrations"

_CREATE_SCHEMA_TABLE = f"""
CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (
    aggregate TEXT NOT NULL,
    version INTEGER NOT NULL,
    description TEXT NOT NULL,
    applied REAL NOT NULL,
    PRIMARY KEY (aggregate, version)
)
"""


class StateError(ConfigError):
    """The state database cannot be opened or used (unwritable home, corrupt file)."""


class SchemaTooNew(StateError):
    """The database was written by a newer servekit: its schema of an aggregate is ahead of this one's."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of an aggregate's schema: SQL statements (one each; no ``BEGIN``/``COMMIT``) and/or a function,
    run in the migration's transaction."""

    version: int
    description: str
    statements: tuple[str, ...] = ()
    run: Callable[[Connection], None] | None = None


Migrations = Mapping[str, Sequence[Migration]]


def check_migrations(migrations: Migrations) -> None:
    """Each aggregate's list is numbered 1..n in order (a programming error otherwise)."""
    for aggregate, steps in migrations.items():
        numbers = [m.version for m in steps]
        if numbers != list(range(1, len(steps) + 1)):
            raise ValueError(f"migrations of {aggregate!r} must be numbered 1..{len(steps)} in order, got {numbers}")


def schema_versions(conn: Connection) -> dict[str, int]:
    """The version each aggregate is at in this database ({} for a new one)."""
    try:
        rows = conn.execute(f"SELECT aggregate, MAX(version) FROM {SCHEMA_TABLE} GROUP BY aggregate").fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return {}
        raise
    return {str(a): int(v) for a, v in rows}


def _check_not_newer(current: Mapping[str, int], migrations: Migrations, where: str) -> None:
    for aggregate, steps in migrations.items():
        have = current.get(aggregate, 0)
        if have > len(steps):
            raise SchemaTooNew(
                f"the state database {where} was written by a newer servekit: its {aggregate} schema is at version "
                f"{have}, this servekit knows versions up to {len(steps)}; upgrade servekit to use it (it was not "
                "changed)"
            )


def migrate(
    conn: Connection, migrations: Migrations, *, where: str = "", clock: Callable[[], float] = time.time
) -> dict[str, int]:
    """Apply the migrations the database lacks; returns what was applied ({aggregate: new version}, {} if none).

    Aggregates the database holds but ``migrations`` does not name (a newer servekit's) are left alone."""
    check_migrations(migrations)
    current = schema_versions(conn)
    _check_not_newer(current, migrations, where)
    if all(current.get(a, 0) == len(steps) for a, steps in migrations.items()):
        return {}  # the common case takes no write lock
    applied: dict[str, int] = {}
    with transaction(conn):  # the write lock, on PostgreSQL too: two processes migrating at once take turns
        if isinstance(conn, PostgresConnection):
            conn.execute(CREATE_NOCASE_COLLATION)  # what COLLATE NOCASE columns are created with there
        conn.execute(_CREATE_SCHEMA_TABLE)
        current = schema_versions(conn)  # again, under the write lock: another process may have migrated
        _check_not_newer(current, migrations, where)
        for aggregate, steps in migrations.items():
            for step in steps[current.get(aggregate, 0) :]:
                for statement in step.statements:
                    conn.execute(statement)
                if step.run is not None:
                    step.run(conn)
                conn.execute(
                    f"INSERT INTO {SCHEMA_TABLE} (aggregate, version, description, applied) VALUES (?, ?, ?, ?)",
                    (aggregate, step.version, step.description, clock()),
                )
                applied[aggregate] = step.version
    return applied
