"""What gateway replicas route by: the leader's routing table, one JSON document per endpoint, and the leader's
address (tables of the hosting aggregate's migration 2).

The leader (the ``servekit up`` that runs the instances) writes an endpoint's document each time its routes
change, under a version one past the highest recorded; a replica polls :meth:`GatewayRoutes.version` (one indexed
``MAX``) and reads only the rows past the version it has applied. A removed endpoint keeps its row with a NULL
document, so a replica that polls late still hears of the removal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from servekit.state.connection import Connection, transaction


@dataclass(frozen=True, slots=True)
class RouteRow:
    endpoint: str
    doc: str | None  # the routes as JSON; None: the endpoint left the routing table
    version: int


@dataclass(frozen=True, slots=True)
class LeaderRow:
    url: str
    metrics_resolution_s: int
    pid: int
    started: float


class GatewayRoutes:
    def __init__(self, conn: Connection, *, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        if self._db.in_transaction:  # joins a transaction the caller holds on this connection
            yield self._db
        else:
            with transaction(self._db):
                yield self._db

    def publish(self, endpoint: str, doc: str | None) -> int:
        """Record ``endpoint``'s routes (``None``: it left the table) under a new highest version; returns it."""
        with self._write() as db:
            version = int(db.execute("SELECT COALESCE(MAX(version), 0) FROM hosting_routes").fetchone()[0]) + 1
            db.execute(
                "INSERT INTO hosting_routes (endpoint, doc, version) VALUES (?, ?, ?) "
                "ON CONFLICT (endpoint) DO UPDATE SET doc = excluded.doc, version = excluded.version",
                (endpoint, doc, version),
            )
        return version

    def clear(self) -> int:
        """Every endpoint leaves the table (a leader starting: its table is empty until it recovers); how many."""
        with self._write() as db:
            names = [str(r[0]) for r in db.execute("SELECT endpoint FROM hosting_routes WHERE doc IS NOT NULL")]
            for name in names:
                self.publish(name, None)
        return len(names)

    def version(self) -> int:
        """The highest version recorded (0: none)."""
        return int(self._db.execute("SELECT COALESCE(MAX(version), 0) FROM hosting_routes").fetchone()[0])

    def since(self, version: int) -> list[RouteRow]:
        """The rows written after ``version``, oldest first."""
        rows = self._db.execute(
            "SELECT endpoint, doc, version FROM hosting_routes WHERE version > ? ORDER BY version", (version,)
        ).fetchall()
        return [RouteRow(str(e), d, int(v)) for e, d, v in rows]

    def record_leader(self, url: str, metrics_resolution_s: int, pid: int) -> None:
        """The leader's address (control operations a replica forwards go there) and its metrics resolution."""
        with self._write() as db:
            db.execute(
                "INSERT INTO hosting_leader (id, url, metrics_resolution_s, pid, started) VALUES (1, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET url = excluded.url, metrics_resolution_s = "
                "excluded.metrics_resolution_s, pid = excluded.pid, started = excluded.started",
                (url, metrics_resolution_s, pid, self._clock()),
            )

    def leader(self) -> LeaderRow | None:
        row = self._db.execute("SELECT url, metrics_resolution_s, pid, started FROM hosting_leader").fetchone()
        return LeaderRow(str(row[0]), int(row[1]), int(row[2]), float(row[3])) if row else None
