"""The state database: one SQLite file under the servekit home (or a PostgreSQL database named by a URL, shared by
processes on several hosts), migrated when opened. Each service keeps its own store over it (in its package); the
hub that opens it with every service's migrations is :class:`servekit.services.database.StateDB`."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

from servekit.state.connection import DEFAULT_TIMEOUT_S, Connection, connect
from servekit.state.migrations import Migrations, StateError, migrate
from servekit.state.postgres import connect_postgres, is_database_url, redact

DB_NAME = "servekit.db"  # the name servekit has always used: older homes open as they are


def database_path(home: Path) -> Path:
    return home / DB_NAME


class Database:
    """An open, migrated state database. Not for concurrent use from several threads at once; open one per
    process (or thread) instead: WAL lets them read while one writes."""

    def __init__(self, conn: Connection, path: Path, where: str | None = None) -> None:
        self.conn = conn
        self.path = path  # the home's SQLite file (not used when the state is in PostgreSQL: see ``where``)
        self.where = where or str(path)  # what messages name: the file, or the database URL without password

    @classmethod
    def open(
        cls,
        home: Path,
        *,
        database_url: str | None = None,
        migrations: Migrations,
        timeout: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> Self:
        """Open (creating the home and the file if needed) and migrate ``home``'s database (the aggregates
        ``migrations`` names; others are left as they are), or with
        ``database_url`` (``postgresql://…``) that PostgreSQL database instead of the home's file.

        Raises :class:`~servekit.state.migrations.SchemaTooNew` for a database of a newer servekit and
        :class:`~servekit.state.migrations.StateError` when it cannot be opened."""
        path = database_path(home)
        where = str(path) if database_url is None else redact(database_url)
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot open the servekit home {home}: {exc}") from None
        try:
            conn: Connection
            if database_url is None:
                conn = connect(path, timeout=timeout)
            elif is_database_url(database_url):
                conn = connect_postgres(database_url, timeout=timeout)
            else:
                raise StateError(f"the database URL must start with postgresql://, not {where!r}")
        except sqlite3.Error as exc:
            raise StateError(f"cannot open the state database {where}: {exc}") from None
        try:
            migrate(conn, migrations, where=where, clock=clock)
        except sqlite3.Error as exc:
            conn.close()
            raise StateError(f"cannot use the state database {where}: {exc}") from None
        except BaseException:
            conn.close()
            raise
        return cls(conn, path, where)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
