"""The connection every repository uses: what it needs of one (:class:`Connection`), SQLite's as servekit opens it
(WAL, a busy timeout, foreign keys), and explicit write transactions.

Repositories speak SQLite's dialect and ``sqlite3``'s error classes; :mod:`servekit.state.postgres` is the other
implementation of :class:`Connection`, which translates both (``servekit up --database-url``)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

DEFAULT_TIMEOUT_S = 30.0


class Cursor(Protocol):
    """What a statement answers: its rows (``fetchone``/``fetchall``/iteration) and the rows it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """The part of ``sqlite3.Connection`` the repositories use (in autocommit mode: a write transaction is opened
    with :func:`transaction`). ``sqlite3.Connection`` satisfies it as it is."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Cursor: ...

    def close(self) -> None: ...


def connect(path: str | Path, *, timeout: float = DEFAULT_TIMEOUT_S) -> sqlite3.Connection:
    """A connection in autocommit mode (open transactions with :func:`transaction`), write-ahead logging (readers
    never wait for the writer), ``timeout`` seconds of waiting for a writer's lock, and foreign keys enforced.

    The connection may be used from several threads, one at a time (the caller serialises)."""
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        _enter_wal(conn, timeout)
        conn.execute("PRAGMA synchronous = NORMAL")  # safe with WAL: a power loss may lose the last commits only
        conn.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _enter_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to write-ahead logging. SQLite answers "database is locked" at once, without the busy
    handler, when two processes make the switch on a new file together; the loser retries until the winner's
    switch is visible (then there is nothing left to do) or ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)  # back off; the other opener holds the lock for a few milliseconds
        delay = min(delay * 2, 0.1)


@contextmanager
def transaction(conn: Connection) -> Iterator[Connection]:
    """A write transaction (``BEGIN IMMEDIATE``: the write lock is taken at once, so a read-then-write inside
    cannot be raced by another writer; PostgreSQL's connection takes its writers' lock there); committed when the
    block ends, rolled back when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
