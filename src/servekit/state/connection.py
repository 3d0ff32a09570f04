"""SQLite connections as every repository uses them: WAL, a busy timeout, foreign keys, explicit transactions."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEFAULT_TIMEOUT_S = 30.0


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
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction (``BEGIN IMMEDIATE``: the write lock is taken at once, so a read-then-write inside
    cannot be raced by another writer); committed when the block ends, rolled back when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
