"""The metrics aggregate: one row per (namespace, metric, dimensions, bucket) with what CloudWatch statistics
need: sample count, sum, minimum, maximum and a sparse histogram of bucket counts. A row's ``minute`` column is
its time bucket's start: a minute by default, a sub-minute bucket when the store keeps a finer resolution.

The repository stores what it is given; what a histogram bucket means belongs to ``servekit.services.cloudwatch.store``.
Here a histogram is a mapping of signed bucket index to count, stored as packed little-endian
``(int32 index, uint32 count)`` pairs. Guarantees:

- **A minute written twice is merged**, not replaced: counts and sums add, minimum and maximum combine,
  histogram counts add bucket by bucket (a partial minute flushed at shutdown and continued after a restart).
- **Dimensions are stored canonically**: sorted ``(name, value)`` pairs, so one series has one key.
- **Retention is explicit**: :meth:`Metrics.delete_before` drops whole minutes older than a cutoff;
  :meth:`Metrics.roll_up` merges the sub-minute buckets of a time range into their minutes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import orjson

from servekit.state.connection import Connection, transaction
from servekit.state.migrations import Migration

__all__ = ["AGGREGATE", "MIGRATIONS", "Metrics", "MinuteRow", "decode_histogram", "encode_histogram"]

AGGREGATE = "metrics"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "one-minute metric aggregates (count, sum, min, max, histogram) per series",
        (
            """CREATE TABLE metric_minutes (
                namespace TEXT NOT NULL,
                metric TEXT NOT NULL,
                dimensions TEXT NOT NULL,
                minute INTEGER NOT NULL,
                count REAL NOT NULL,
                sum REAL NOT NULL,
                min REAL NOT NULL,
                max REAL NOT NULL,
                histogram BLOB NOT NULL,
                PRIMARY KEY (namespace, metric, dimensions, minute)
            ) WITHOUT ROWID""",
            "CREATE INDEX metric_minutes_minute ON metric_minutes (minute)",
        ),
    ),
)

Dimensions = tuple[tuple[str, str], ...]
_PAIR = struct.Struct("<iI")


def encode_histogram(buckets: dict[int, int]) -> bytes:
    # a count past uint32 (merged minutes of huge published counts) is capped rather than failing every flush
    return b"".join(_PAIR.pack(i, min(c, 0xFFFFFFFF)) for i, c in sorted(buckets.items()) if c)


def decode_histogram(blob: bytes) -> dict[int, int]:
    return dict(_PAIR.iter_unpack(blob))


def dimensions_key(dimensions: Dimensions) -> str:
    return orjson.dumps(sorted(dimensions)).decode()


def _dimensions(key: str) -> Dimensions:
    return tuple((str(n), str(v)) for n, v in orjson.loads(key))


@dataclass(frozen=True, slots=True)
class MinuteRow:
    namespace: str
    metric: str
    dimensions: Dimensions  # sorted (name, value) pairs
    minute: int  # epoch seconds of the minute's start
    count: float
    sum: float
    min: float
    max: float
    histogram: dict[int, int]


def merge_rows(a: MinuteRow, b: MinuteRow) -> MinuteRow:
    hist = dict(a.histogram)
    for i, c in b.histogram.items():
        hist[i] = hist.get(i, 0) + c
    return MinuteRow(
        a.namespace,
        a.metric,
        a.dimensions,
        a.minute,
        a.count + b.count,
        a.sum + b.sum,
        min(a.min, b.min),
        max(a.max, b.max),
        hist,
    )


_COLUMNS = "namespace, metric, dimensions, minute, count, sum, min, max, histogram"


def _row(r: tuple[str, str, str, int, float, float, float, float, bytes]) -> MinuteRow:
    return MinuteRow(r[0], r[1], _dimensions(r[2]), int(r[3]), r[4], r[5], r[6], r[7], decode_histogram(r[8]))


class Metrics:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def add(self, rows: Iterable[MinuteRow]) -> int:
        """Write minutes in one transaction, merging with any already stored for the same series and minute."""
        n = 0
        with transaction(self.conn) as c:
            for row in rows:
                _upsert(c, row)
                n += 1
        return n

    def roll_up(self, start: int, before: int, width: int = 60) -> int:
        """Merge every bucket starting in [start, before) that is not on a multiple of ``width`` into the one that
        is (its minute), in one transaction; the number of buckets merged away."""
        where = "minute>=? AND minute<? AND minute % ? != 0"
        with transaction(self.conn) as c:
            rows = [
                _row(r)
                for r in c.execute(f"SELECT {_COLUMNS} FROM metric_minutes WHERE {where}", (start, before, width))
            ]
            if not rows:
                return 0
            c.execute(f"DELETE FROM metric_minutes WHERE {where}", (start, before, width))
            for row in rows:
                _upsert(c, replace(row, minute=row.minute // width * width))
        return len(rows)

    def minutes(self, namespace: str, metric: str, dimensions: Dimensions, start: int, end: int) -> list[MinuteRow]:
        """One series' minutes in [start, end), oldest first."""
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM metric_minutes WHERE namespace=? AND metric=? AND dimensions=? "
            "AND minute>=? AND minute<? ORDER BY minute",
            (namespace, metric, dimensions_key(dimensions), start, end),
        ).fetchall()
        return [_row(r) for r in rows]

    def series(self, namespace: str | None = None, metric: str | None = None) -> list[tuple[str, str, Dimensions]]:
        """Every stored (namespace, metric, dimensions), optionally of one namespace and metric name."""
        where: list[str] = []
        args: list[str] = []
        if namespace is not None:
            where.append("namespace=?")
            args.append(namespace)
        if metric is not None:
            where.append("metric=?")
            args.append(metric)
        sql = "SELECT DISTINCT namespace, metric, dimensions FROM metric_minutes"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [(n, m, _dimensions(d)) for n, m, d in self.conn.execute(sql + " ORDER BY 1, 2, 3", args)]

    def delete_before(self, minute: int) -> int:
        """Drop every minute that starts before ``minute``; the number of rows dropped."""
        with transaction(self.conn) as c:
            return c.execute("DELETE FROM metric_minutes WHERE minute<?", (minute,)).rowcount

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM metric_minutes").fetchone()[0])


def _upsert(c: Connection, row: MinuteRow) -> None:
    key = dimensions_key(row.dimensions)
    old = c.execute(
        f"SELECT {_COLUMNS} FROM metric_minutes WHERE namespace=? AND metric=? AND dimensions=? AND minute=?",
        (row.namespace, row.metric, key, row.minute),
    ).fetchone()
    merged = merge_rows(_row(old), row) if old is not None else row
    c.execute(
        f"INSERT INTO metric_minutes ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (namespace, metric, dimensions, minute) DO UPDATE SET count = excluded.count, "
        "sum = excluded.sum, min = excluded.min, max = excluded.max, histogram = excluded.histogram",
        (
            merged.namespace,
            merged.metric,
            key,
            merged.minute,
            merged.count,
            merged.sum,
            merged.min,
            merged.max,
            encode_histogram(merged.histogram),
        ),
    )


def sorted_dimensions(pairs: Sequence[tuple[str, str]]) -> Dimensions:
    return tuple(sorted(pairs))
