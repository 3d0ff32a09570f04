"""PostgreSQL as the state database (``servekit up --database-url postgresql://…``): a
:class:`~servekit.state.connection.Connection` over psycopg 3 that the repositories use exactly as they use SQLite's.

Why a translating connection rather than a second copy of every statement: the repositories' SQL is already almost
all in the subset both databases share (``ON CONFLICT … DO UPDATE``, ``RETURNING``, ``COALESCE``, keyset
``ORDER BY … LIMIT``), so what differs is small and mechanical, and is translated here in one tested place:

- **placeholders**: ``?`` becomes ``%s`` (and a literal ``%`` becomes ``%%``) outside quoted literals;
- **DDL types**: ``REAL`` → ``DOUBLE PRECISION`` (PostgreSQL's ``REAL`` is 4 bytes: epoch seconds would round to
  minutes), ``INTEGER`` → ``BIGINT``, ``INTEGER PRIMARY KEY AUTOINCREMENT`` → an identity column, ``BLOB`` →
  ``BYTEA``, ``WITHOUT ROWID`` dropped;
- **text order**: a ``TEXT`` column without a collation gets ``COLLATE "C"`` (bytes, as SQLite's ``BINARY``),
  whatever locale the database has;
- **names unique ignoring case**: ``COLLATE NOCASE`` → an ICU collation that compares case-insensitively
  (:data:`NOCASE_COLLATION`, created by the migrations), so unique constraints, ``=`` and ``ORDER BY`` keep
  SQLite's meaning; ``instr(x, y)`` → ``strpos(x COLLATE "C", y)`` (substring search is undefined under a
  case-insensitive collation, and every ``instr`` already compares ``lower()`` of both sides);
- **the write lock**: ``BEGIN IMMEDIATE`` → ``BEGIN`` plus a transaction-scoped advisory lock that every writer
  takes (:data:`WRITE_LOCK`), and a write outside a transaction runs in such a transaction of its own. Writers are
  serialised as SQLite serialises them, so each read-then-write the repositories do inside a transaction
  (compare-and-set status changes, the metrics merge, the routes' version counter, the next version number) is
  as safe here; readers never wait (MVCC, autocommit reads at READ COMMITTED);
- **errors**: psycopg's are raised as subclasses of ``sqlite3``'s classes (a unique violation is a
  ``sqlite3.IntegrityError`` whose message starts ``UNIQUE constraint failed``; a missing table is a
  ``sqlite3.OperationalError`` ``no such table``; a lock wait past the timeout is ``database is locked``), which
  is what the repositories already catch.

psycopg is an optional dependency (``pip install 'servekit[postgres]'``); it is imported when a URL is opened.
"""

from __future__ import annotations

import importlib
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from servekit.state.connection import Cursor

SCHEMES = ("postgresql", "postgres")
NOCASE_COLLATION = "servekit_nocase"
# A fixed advisory lock key: every servekit writer of the database takes it for its transaction's duration.
WRITE_LOCK = 0x5E4F_0017
# What the migrations run first on PostgreSQL (under the write lock): the collation behind COLLATE NOCASE.
# level2 compares letters ignoring case (not accents); deterministic=false lets equal-ignoring-case strings be equal.
CREATE_NOCASE_COLLATION = (
    f"CREATE COLLATION IF NOT EXISTS {NOCASE_COLLATION} "
    "(provider = icu, locale = 'und-u-ks-level2', deterministic = false)"
)


class PostgresIntegrityError(sqlite3.IntegrityError):
    """A constraint PostgreSQL enforced (unique, foreign key, not null, check)."""


class PostgresOperationalError(sqlite3.OperationalError):
    """The server could not be reached, a table is missing, or a lock was not granted in time."""


class PostgresDatabaseError(sqlite3.DatabaseError):
    """Any other error PostgreSQL reported."""


def is_database_url(value: str) -> bool:
    return urlsplit(value).scheme in SCHEMES


def redact(url: str) -> str:
    """``url`` without its password (what messages and logs may show)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def _psycopg() -> Any:
    try:
        return importlib.import_module("psycopg")
    except ImportError:
        raise PostgresOperationalError(
            "a postgresql:// database needs psycopg: pip install 'servekit[postgres]'"
        ) from None


def connect_postgres(url: str, *, timeout: float) -> PostgresConnection:
    """A connection in autocommit mode whose lock waits (the writers' lock) give up after ``timeout`` seconds,
    as SQLite's busy timeout does."""
    psycopg = _psycopg()
    try:
        raw = psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout)), application_name="servekit")
    except psycopg.Error as exc:
        raise PostgresOperationalError(f"cannot connect to {redact(url)}: {str(exc).strip()}") from None
    conn = PostgresConnection(raw, psycopg)
    try:
        conn.execute(f"SET lock_timeout = {int(timeout * 1000)}")
    except BaseException:
        conn.close()
        raise
    return conn


# ---- translation -------------------------------------------------------------------------------------------------

_DDL_TYPES = (
    (re.compile(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b"), "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\)\s*WITHOUT ROWID\s*$"), ")"),
)
# a TEXT column without a collation of its own (up to the next comma: the end of its definition) compares and sorts
# byte by byte, as SQLite's BINARY does, whatever locale the database was created with
_TEXT_COLUMN = re.compile(r"\bTEXT\b(?![^,]*\bCOLLATE\b)")
_NOCASE = re.compile(r"\bCOLLATE NOCASE\b", re.IGNORECASE)
_INSTR = re.compile(r"\binstr\(([^,()]*(?:\([^()]*\))?[^,()]*),", re.IGNORECASE)


@lru_cache(maxsize=1024)
def translate(sql: str, with_params: bool) -> str:
    """``sql`` (SQLite's dialect, as the repositories write it) in PostgreSQL's, with psycopg's placeholders when
    ``with_params`` (psycopg reads ``%`` only then)."""
    if re.match(r"\s*CREATE TABLE\b", sql, re.IGNORECASE):
        for pattern, replacement in _DDL_TYPES:
            sql = pattern.sub(replacement, sql)
        sql = _TEXT_COLUMN.sub('TEXT COLLATE "C"', sql)
    sql = _NOCASE.sub(f"COLLATE {NOCASE_COLLATION}", sql)
    sql = _INSTR.sub(r'strpos(\1 COLLATE "C",', sql)
    return _placeholders(sql) if with_params else sql


def _placeholders(sql: str) -> str:
    """``?`` → ``%s`` and ``%`` → ``%%``, except inside single-quoted literals (where ``%`` is still doubled:
    psycopg reads the whole text)."""
    out: list[str] = []
    quoted = False
    for ch in sql:
        if ch == "'":
            quoted = not quoted  # a doubled '' inside a literal flips twice: still inside
        if ch == "%":
            out.append("%%")
        elif ch == "?" and not quoted:
            out.append("%s")
        else:
            out.append(ch)
    return "".join(out)


_WRITES = re.compile(r"\s*(INSERT|UPDATE|DELETE|CREATE|DROP|ALTER)\b", re.IGNORECASE)


class _NoRows:
    """The cursor of a statement run for its effect (``BEGIN``, ``COMMIT``): no rows, as SQLite's would say."""

    rowcount = -1

    def fetchone(self) -> Any:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Iterator[Any]:
        return iter(())


class PostgresConnection:
    """SQLite's connection interface over one psycopg connection (see the module's docstring). Like a
    ``sqlite3.Connection`` it may be used from several threads one at a time; each call holds a lock so that a
    write run in a transaction of its own is not interleaved with another thread's statement."""

    dialect = "postgresql"

    def __init__(self, raw: Any, psycopg: Any) -> None:
        self._raw = raw
        self._psycopg = psycopg
        self._lock = threading.RLock()

    @property
    def in_transaction(self) -> bool:
        return int(self._raw.info.transaction_status) != 0  # psycopg.pq.TransactionStatus.IDLE

    def execute(self, sql: str, parameters: Any = None, /) -> Cursor:
        command = sql.strip().upper()
        with self._lock:
            if command == "BEGIN IMMEDIATE":
                self._run("BEGIN", None)
                self._locked(lambda: self._run("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,)))
                return _NoRows()
            if self.in_transaction or not _WRITES.match(sql):
                return self._run(sql, parameters)
            return self._alone(lambda: self._run(sql, parameters))

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Cursor:
        rows = list(parameters)

        def run() -> Cursor:
            raw = self._raw.cursor()
            self._call(raw.executemany, translate(sql, True), rows)
            cur: Cursor = raw
            return cur

        with self._lock:
            if not rows:
                return _NoRows()
            return run() if self.in_transaction else self._alone(run)

    def close(self) -> None:
        self._raw.close()

    # ---- internals ---------------------------------------------------------------------------------------------

    def _run(self, sql: str, parameters: Any) -> Cursor:
        with_params = parameters is not None and len(parameters) > 0
        cur: Cursor = self._call(self._raw.execute, translate(sql, with_params), parameters if with_params else None)
        return cur

    def _alone(self, run: Callable[[], Cursor]) -> Cursor:
        """``run`` in a write transaction of its own (under the writers' lock, as SQLite runs a lone write)."""
        self._run("BEGIN", None)
        try:
            self._run("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
            cur = run()
        except BaseException:
            self._rollback()
            raise
        self._run("COMMIT", None)
        return cur

    def _locked(self, take: Callable[[], object]) -> None:
        try:
            take()
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self.in_transaction and not self._raw.closed:
            self._raw.execute("ROLLBACK")

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._psycopg.Error as exc:
            raise _mapped(exc, self._psycopg) from exc


def _mapped(exc: Any, psycopg: Any) -> sqlite3.Error:
    """psycopg's error as the ``sqlite3`` class (and message start) the repositories test for."""
    state = str(getattr(exc, "sqlstate", "") or "")
    message = str(exc).strip()
    if state == "23505":
        return PostgresIntegrityError(f"UNIQUE constraint failed: {message}")
    if state == "23503":
        return PostgresIntegrityError(f"FOREIGN KEY constraint failed: {message}")
    if state.startswith("23"):
        return PostgresIntegrityError(f"constraint failed: {message}")
    if state == "42P01":
        return PostgresOperationalError(f"no such table: {message}")
    if state in ("55P03", "40P01"):  # lock_not_available (lock_timeout), deadlock_detected
        return PostgresOperationalError(f"database is locked: {message}")
    if isinstance(exc, psycopg.OperationalError):
        return PostgresOperationalError(message)
    return PostgresDatabaseError(message)
