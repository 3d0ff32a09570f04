"""The logs aggregate: CloudWatch Logs' log groups, their streams and events, and the shipper's read offsets.

The repository stores what it is given; what the operations mean (tokens, filter patterns, AWS's errors) belongs to
``servekit.services.logs``. Guarantees:

- **Names are case-sensitive**; a stream belongs to one group and goes with it.
- **Events are written in batches** (:meth:`Logs.put`: one transaction, one ``executemany`` per stream), each
  with an ever-growing ``id``: the order a stream's events were ingested in, which reading and paging follow.
- **A shipper's offsets are written with the events they cover**, in the same transaction: after a crash the
  events of a file up to its recorded offset are stored, and none after it, so a restart neither repeats nor
  loses a line.
- **Retention is explicit**: :meth:`Logs.prune` drops events older than each group's retention (or a limit for all
  groups) and the oldest events beyond a total size; stream sizes follow.
- **Time comes from the injected clock** (``clock``, seconds since the epoch); event times are milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration
from servekit.state.paging import InvalidNextToken, Listing, Page, keyset_page, page_of

__all__ = [
    "AGGREGATE",
    "EVENT_OVERHEAD",
    "MIGRATIONS",
    "EventRow",
    "GroupRow",
    "InvalidNextToken",
    "Logs",
    "OffsetRow",
    "Page",
    "StreamBatch",
    "StreamRow",
]

AGGREGATE = "logs"
EVENT_OVERHEAD = 26  # bytes CloudWatch Logs counts per event beside its message (what storedBytes sums)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "CloudWatch Logs: log groups, streams, events, and the shipper's offsets",
        (
            """CREATE TABLE logs_groups (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE,
                created INTEGER NOT NULL,
                retention_days INTEGER
            )""",
            """CREATE TABLE logs_streams (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                group_seq INTEGER NOT NULL REFERENCES logs_groups (seq) ON DELETE CASCADE,
                name TEXT NOT NULL,
                created INTEGER NOT NULL,
                first_event INTEGER,
                last_event INTEGER NOT NULL,
                last_ingestion INTEGER,
                stored_bytes INTEGER NOT NULL,
                UNIQUE (group_seq, name)
            )""",
            "CREATE INDEX logs_streams_last_event ON logs_streams (group_seq, last_event)",
            """CREATE TABLE logs_events (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                group_seq INTEGER NOT NULL,
                stream_seq INTEGER NOT NULL,
                timestamp INTEGER NOT NULL,
                ingestion INTEGER NOT NULL,
                message TEXT NOT NULL
            )""",
            "CREATE INDEX logs_events_stream ON logs_events (stream_seq, id)",
            "CREATE INDEX logs_events_group_time ON logs_events (group_seq, timestamp, id)",
            """CREATE TABLE logs_offsets (
                path TEXT PRIMARY KEY,
                group_name TEXT NOT NULL,
                stream_name TEXT NOT NULL,
                inode INTEGER NOT NULL,
                position INTEGER NOT NULL,
                done INTEGER NOT NULL,
                updated REAL NOT NULL
            )""",
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class GroupRow:
    seq: int
    name: str
    created: int  # ms
    retention_days: int | None
    stored_bytes: int


@dataclass(frozen=True, slots=True)
class StreamRow:
    seq: int
    group_seq: int
    name: str
    created: int  # ms
    first_event: int | None  # ms; None before the first event
    last_event: int | None
    last_ingestion: int | None
    stored_bytes: int


@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    stream_seq: int
    timestamp: int  # ms
    ingestion: int  # ms
    message: str


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """How far the shipper has read a file into a stream: ``position`` bytes of the file with ``inode``."""

    path: str
    group: str
    stream: str
    inode: int
    position: int
    done: bool  # no longer followed (its source has ended); kept so that it is never shipped twice


@dataclass(frozen=True, slots=True)
class StreamBatch:
    """Events for one stream: ``(timestamp ms, message)`` each, in the order they are to be read."""

    group: str
    stream: str
    events: Sequence[tuple[int, str]]


_GROUP_COLUMNS = (
    "seq, name, created, retention_days, "
    "(SELECT COALESCE(SUM(s.stored_bytes), 0) FROM logs_streams s WHERE s.group_seq = logs_groups.seq)"
)
_STREAM_COLUMNS = "seq, group_seq, name, created, first_event, last_event, last_ingestion, stored_bytes"
_EVENT_COLUMNS = "id, stream_seq, timestamp, ingestion, message"


def _group(r: Sequence[Any]) -> GroupRow:
    return GroupRow(int(r[0]), r[1], int(r[2]), None if r[3] is None else int(r[3]), int(r[4]))


def _stream(r: Sequence[Any]) -> StreamRow:
    last = int(r[5]) or None
    return StreamRow(int(r[0]), int(r[1]), r[2], int(r[3]), r[4], last, r[6], int(r[7]))


def _event(r: Sequence[Any]) -> EventRow:
    return EventRow(int(r[0]), int(r[1]), int(r[2]), int(r[3]), r[4])


def size_of(message: str) -> int:
    return len(message) + EVENT_OVERHEAD


class Logs:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.clock = clock

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ---- groups ----------------------------------------------------------------------------------------------
    def create_group(self, name: str) -> bool:
        """Create ``name``; False when it exists."""
        with transaction(self.conn) as c:
            return self._create_group(c, name)

    def _create_group(self, c: Connection, name: str) -> bool:
        cur = c.execute(
            "INSERT INTO logs_groups (name, created) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            (name, self.now_ms()),
        )
        return cur.rowcount == 1

    def group(self, name: str) -> GroupRow | None:
        row = self.conn.execute(f"SELECT {_GROUP_COLUMNS} FROM logs_groups WHERE name = ?", (name,)).fetchone()
        return None if row is None else _group(row)

    def groups(
        self, prefix: str | None = None, contains: str | None = None, limit: int = 50, next_token: str | None = None
    ) -> Page[GroupRow]:
        """Groups by name; ``InvalidNextToken`` for a token this listing did not issue."""
        where: list[str] = []
        args: list[Any] = []
        if prefix:
            where.append("substr(name, 1, ?) = ?")
            args += [len(prefix), prefix]
        if contains:
            where.append("instr(lower(name), lower(?)) > 0")
            args.append(contains)
        listing = Listing(tuple(where), tuple(args), "name", "Ascending", limit, next_token)
        return page_of(keyset_page(self.conn, "logs_groups", _GROUP_COLUMNS, {"name": "name"}, listing), _group)

    def all_groups(self) -> list[GroupRow]:
        return [_group(r) for r in self.conn.execute(f"SELECT {_GROUP_COLUMNS} FROM logs_groups ORDER BY name")]

    def set_retention(self, name: str, days: int | None) -> bool:
        """Set (``None``: clear) a group's retention; False when there is no such group."""
        with transaction(self.conn) as c:
            return c.execute("UPDATE logs_groups SET retention_days = ? WHERE name = ?", (days, name)).rowcount == 1

    def delete_group(self, name: str) -> bool:
        """Delete a group, its streams and events; False when there is no such group."""
        with transaction(self.conn) as c:
            row = c.execute("SELECT seq FROM logs_groups WHERE name = ?", (name,)).fetchone()
            if row is None:
                return False
            c.execute("DELETE FROM logs_events WHERE group_seq = ?", (row[0],))
            c.execute("DELETE FROM logs_streams WHERE group_seq = ?", (row[0],))
            c.execute("DELETE FROM logs_groups WHERE seq = ?", (row[0],))
            return True

    # ---- streams ---------------------------------------------------------------------------------------------
    def create_stream(self, group: str, name: str) -> bool | None:
        """Create stream ``name`` in ``group``: True, False when it exists, None when the group does not."""
        with transaction(self.conn) as c:
            row = c.execute("SELECT seq FROM logs_groups WHERE name = ?", (group,)).fetchone()
            if row is None:
                return None
            return self._create_stream(c, int(row[0]), name)

    def _create_stream(self, c: Connection, group_seq: int, name: str) -> bool:
        cur = c.execute(
            "INSERT INTO logs_streams (group_seq, name, created, last_event, stored_bytes) VALUES (?, ?, ?, 0, 0) "
            "ON CONFLICT (group_seq, name) DO NOTHING",
            (group_seq, name, self.now_ms()),
        )
        return cur.rowcount == 1

    def stream(self, group: str, name: str) -> StreamRow | None:
        row = self.conn.execute(
            f"SELECT {_STREAM_COLUMNS} FROM logs_streams WHERE name = ? AND "
            "group_seq = (SELECT seq FROM logs_groups WHERE name = ?)",
            (name, group),
        ).fetchone()
        return None if row is None else _stream(row)

    def streams(
        self,
        group_seq: int,
        prefix: str | None = None,
        order_by: str = "LogStreamName",
        descending: bool = False,
        limit: int = 50,
        next_token: str | None = None,
        names: Sequence[str] | None = None,
    ) -> Page[StreamRow]:
        """A group's streams by name or by last event time; ``InvalidNextToken`` for a token this listing did not
        issue. A page carries a token only when more streams follow it."""
        where = ["group_seq = ?"]
        args: list[Any] = [group_seq]
        if prefix:
            where.append("substr(name, 1, ?) = ?")
            args += [len(prefix), prefix]
        if names is not None:
            where.append(f"name IN ({', '.join('?' * len(names))})" if names else "1 = 0")
            args += list(names)
        order = "Descending" if descending else "Ascending"
        listing = Listing(tuple(where), tuple(args), order_by, order, limit, next_token)
        columns = {"LogStreamName": "name", "LastEventTime": "last_event"}
        return page_of(keyset_page(self.conn, "logs_streams", _STREAM_COLUMNS, columns, listing), _stream)

    def delete_stream(self, group: str, name: str) -> bool:
        with transaction(self.conn) as c:
            row = c.execute(
                "SELECT seq FROM logs_streams WHERE name = ? AND "
                "group_seq = (SELECT seq FROM logs_groups WHERE name = ?)",
                (name, group),
            ).fetchone()
            if row is None:
                return False
            c.execute("DELETE FROM logs_events WHERE stream_seq = ?", (row[0],))
            c.execute("DELETE FROM logs_streams WHERE seq = ?", (row[0],))
            return True

    # ---- events ----------------------------------------------------------------------------------------------
    def put(
        self, batches: Iterable[StreamBatch], offsets: Iterable[OffsetRow] = (), create: bool = True
    ) -> dict[tuple[str, str], int]:
        """Store the batches' events and the offsets in one transaction; answers how many events each
        ``(group, stream)`` got. With ``create`` missing groups and streams are created (the shipper's way);
        without, a batch for a missing one raises ``LookupError`` and nothing is stored."""
        now = self.now_ms()
        stored: dict[tuple[str, str], int] = {}
        with transaction(self.conn) as c:
            for batch in batches:
                group_seq, stream_seq = self._ids(c, batch.group, batch.stream, create)
                if not batch.events:
                    continue
                rows = [(group_seq, stream_seq, ts, now, msg) for ts, msg in batch.events]
                c.executemany(
                    "INSERT INTO logs_events (group_seq, stream_seq, timestamp, ingestion, message) "
                    "VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
                times = [ts for ts, _ in batch.events]
                size = sum(size_of(msg) for _, msg in batch.events)
                c.execute(
                    "UPDATE logs_streams SET "
                    "first_event = CASE WHEN first_event IS NULL OR first_event > ? THEN ? ELSE first_event END, "
                    "last_event = CASE WHEN last_event < ? THEN ? ELSE last_event END, last_ingestion = ?, "
                    "stored_bytes = stored_bytes + ? WHERE seq = ?",
                    (min(times), min(times), max(times), max(times), now, size, stream_seq),
                )
                key = (batch.group, batch.stream)
                stored[key] = stored.get(key, 0) + len(rows)
            for o in offsets:
                c.execute(
                    "INSERT INTO logs_offsets (path, group_name, stream_name, inode, position, done, updated) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (path) DO UPDATE SET group_name = excluded.group_name, "
                    "stream_name = excluded.stream_name, inode = excluded.inode, position = excluded.position, "
                    "done = excluded.done, updated = excluded.updated",
                    (o.path, o.group, o.stream, o.inode, o.position, int(o.done), self.clock()),
                )
        return stored

    def _ids(self, c: Connection, group: str, stream: str, create: bool) -> tuple[int, int]:
        row = c.execute(
            "SELECT g.seq, s.seq FROM logs_groups g LEFT JOIN logs_streams s ON s.group_seq = g.seq AND s.name = ? "
            "WHERE g.name = ?",
            (stream, group),
        ).fetchone()
        if row is not None and row[1] is not None:
            return int(row[0]), int(row[1])
        if not create:
            raise LookupError("log group" if row is None else "log stream")
        if row is None:
            self._create_group(c, group)
            row = c.execute("SELECT seq, NULL FROM logs_groups WHERE name = ?", (group,)).fetchone()
        self._create_stream(c, int(row[0]), stream)
        made = c.execute("SELECT seq FROM logs_streams WHERE group_seq = ? AND name = ?", (row[0], stream)).fetchone()
        return int(row[0]), int(made[0])

    def read(
        self,
        stream_seq: int,
        *,
        after: tuple[int, int] | None = None,
        before: tuple[int, int] | None = None,
        start: int | None = None,
        end: int | None = None,
        limit: int = 10_000,
        from_head: bool = True,
    ) -> list[EventRow]:
        """A stream's events in time order (timestamp, then id: arrival among equal times): the first ``limit``
        after the position ``after`` (``from_head``), or the last ``limit`` before ``before``; ``start <=
        timestamp < end`` when given."""
        where = ["stream_seq = ?"]
        args: list[Any] = [stream_seq]
        if after is not None:
            where.append("(timestamp > ? OR (timestamp = ? AND id > ?))")
            args += [after[0], after[0], after[1]]
        if before is not None:
            where.append("(timestamp < ? OR (timestamp = ? AND id < ?))")
            args += [before[0], before[0], before[1]]
        for clause, value in (("timestamp >= ?", start), ("timestamp < ?", end)):
            if value is not None:
                where.append(clause)
                args.append(value)
        direction = "ASC" if from_head else "DESC"
        rows = self.conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM logs_events WHERE {' AND '.join(where)} "
            f"ORDER BY timestamp {direction}, id {direction} LIMIT ?",
            (*args, limit),
        ).fetchall()
        events = [_event(r) for r in rows]
        return events if from_head else events[::-1]

    def position(self, stream_seq: int, event_id: int) -> tuple[int, int]:
        """Where event ``event_id`` sorts in its stream (its timestamp and id); (0, id) when it is gone."""
        row = self.conn.execute(
            "SELECT timestamp FROM logs_events WHERE stream_seq = ? AND id = ?", (stream_seq, event_id)
        ).fetchone()
        return (int(row[0]), event_id) if row else (0, event_id)

    def scan(
        self,
        group_seq: int,
        stream_seqs: Sequence[int] | None,
        *,
        after: tuple[int, int] | None = None,
        start: int | None = None,
        end: int | None = None,
        limit: int = 1000,
    ) -> list[EventRow]:
        """A group's events (of ``stream_seqs`` when given) by ``(timestamp, id)``, after ``after``."""
        where = ["group_seq = ?"]
        args: list[Any] = [group_seq]
        if stream_seqs is not None:
            where.append(f"stream_seq IN ({', '.join('?' * len(stream_seqs))})" if stream_seqs else "1 = 0")
            args += list(stream_seqs)
        if after is not None:
            where.append("(timestamp > ? OR (timestamp = ? AND id > ?))")
            args += [after[0], after[0], after[1]]
        for clause, value in (("timestamp >= ?", start), ("timestamp < ?", end)):
            if value is not None:
                where.append(clause)
                args.append(value)
        rows = self.conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM logs_events WHERE {' AND '.join(where)} ORDER BY timestamp, id LIMIT ?",
            (*args, limit),
        ).fetchall()
        return [_event(r) for r in rows]

    def stream_names(self, seqs: Iterable[int]) -> dict[int, str]:
        wanted = sorted(set(seqs))
        if not wanted:
            return {}
        rows = self.conn.execute(
            f"SELECT seq, name FROM logs_streams WHERE seq IN ({', '.join('?' * len(wanted))})", wanted
        )
        return {int(s): str(n) for s, n in rows}

    # ---- retention -------------------------------------------------------------------------------------------
    def prune(self, max_age_days: float | None = None, max_bytes: int | None = None, chunk: int = 10_000) -> int:
        """Drop events past their group's retention (its ``retention_days``, else ``max_age_days``), then the
        oldest-ingested events while the stored total passes ``max_bytes``. Answers how many were dropped."""
        now = self.now_ms()
        dropped = 0
        for g in self.all_groups():
            days = g.retention_days if g.retention_days is not None else max_age_days
            if days is not None:
                dropped += self._drop("group_seq = ? AND timestamp < ?", (g.seq, now - int(days * 86_400_000)))
        if max_bytes is not None:
            while (total := self.stored_bytes()) > max_bytes:
                excess, cut = total - max_bytes, None
                for event_id, size in self.conn.execute(
                    "SELECT id, length(message) FROM logs_events ORDER BY id LIMIT ?", (chunk,)
                ):
                    cut = int(event_id)
                    excess -= int(size) + EVENT_OVERHEAD
                    if excess <= 0:
                        break
                if cut is None:
                    break
                dropped += self._drop("id <= ?", (cut,))
        return dropped

    def _drop(self, where: str, args: tuple[Any, ...]) -> int:
        with transaction(self.conn) as c:
            sizes = c.execute(
                f"SELECT stream_seq, SUM(length(message)), COUNT(*) FROM logs_events WHERE {where} GROUP BY stream_seq",
                args,
            ).fetchall()
            if not sizes:
                return 0
            for stream_seq, chars, count in sizes:
                freed = int(chars) + EVENT_OVERHEAD * int(count)
                c.execute("UPDATE logs_streams SET stored_bytes = stored_bytes - ? WHERE seq = ?", (freed, stream_seq))
            return int(c.execute(f"DELETE FROM logs_events WHERE {where}", args).rowcount)

    def stored_bytes(self) -> int:
        return int(self.conn.execute("SELECT COALESCE(SUM(stored_bytes), 0) FROM logs_streams").fetchone()[0])

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM logs_events").fetchone()[0])

    # ---- the shipper's offsets -------------------------------------------------------------------------------
    def offset(self, path: str) -> OffsetRow | None:
        row = self.conn.execute(
            "SELECT path, group_name, stream_name, inode, position, done FROM logs_offsets WHERE path = ?", (path,)
        ).fetchone()
        return None if row is None else OffsetRow(row[0], row[1], row[2], int(row[3]), int(row[4]), bool(row[5]))

    def followed(self) -> list[OffsetRow]:
        """The files still followed (their source had not ended when the shipper last stopped)."""
        rows = self.conn.execute(
            "SELECT path, group_name, stream_name, inode, position, done FROM logs_offsets WHERE done = 0 ORDER BY path"
        )
        return [OffsetRow(r[0], r[1], r[2], int(r[3]), int(r[4]), bool(r[5])) for r in rows]

    def forget_offsets(self, before: float) -> int:
        """Drop the offsets of ended sources not updated since ``before`` (seconds)."""
        with transaction(self.conn) as c:
            return int(c.execute("DELETE FROM logs_offsets WHERE done = 1 AND updated < ?", (before,)).rowcount)
