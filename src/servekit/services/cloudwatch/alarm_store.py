"""The alarms aggregate: CloudWatch metric alarm definitions, their current state and their history.

The repository stores what it is given: the PutMetricAlarm input as JSON (``definition``) beside the columns
that are queried, and states as text; what a state means and when it changes belongs to
``servekit.services.cloudwatch.evaluation``. Guarantees:

- **Alarm names are unique and case-sensitive**, as in CloudWatch.
- **Every write is atomic with its history row**: creating, updating, deleting an alarm and changing its state
  each append a history item in the same transaction. Deleting an alarm keeps its history.
- A state change may be compare-and-set (``expected``): an evaluation that raced a SetAlarmState loses.
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
from servekit.state.paging import InvalidNextToken, Listing, Page, keyset_page, page_of

__all__ = [
    "AGGREGATE",
    "MIGRATIONS",
    "AlarmRow",
    "Alarms",
    "HistoryRow",
    "InvalidNextToken",
    "Page",
]

AGGREGATE = "alarms"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "CloudWatch metric alarms and their history",
        (
            """CREATE TABLE cloudwatch_alarms (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                name TEXT NOT NULL UNIQUE,
                namespace TEXT NOT NULL,
                metric_name TEXT NOT NULL,
                definition TEXT NOT NULL,
                state_value TEXT NOT NULL,
                state_reason TEXT NOT NULL,
                state_reason_data TEXT,
                state_updated REAL NOT NULL,
                state_transitioned REAL NOT NULL,
                config_updated REAL NOT NULL
            )""",
            "CREATE INDEX cloudwatch_alarms_state ON cloudwatch_alarms (state_value)",
            """CREATE TABLE cloudwatch_alarm_history (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                alarm_name TEXT NOT NULL,
                timestamp REAL NOT NULL,
                item_type TEXT NOT NULL,
                summary TEXT NOT NULL,
                data TEXT NOT NULL
            )""",
            "CREATE INDEX cloudwatch_alarm_history_name ON cloudwatch_alarm_history (alarm_name, timestamp)",
        ),
    ),
)

INITIAL_STATE = "INSUFFICIENT_DATA"
INITIAL_REASON = "Unchecked: Initial alarm creation"
_COLUMNS = (
    "seq, name, namespace, metric_name, definition, state_value, state_reason, state_reason_data, "
    "state_updated, state_transitioned, config_updated"
)


@dataclass(frozen=True, slots=True)
class AlarmRow:
    name: str
    namespace: str
    metric_name: str
    definition: dict[str, Any]  # the PutMetricAlarm input
    state_value: str
    state_reason: str
    state_reason_data: str | None  # JSON text, as SetAlarmState or the evaluator gave it
    state_updated: float
    state_transitioned: float
    config_updated: float


@dataclass(frozen=True, slots=True)
class HistoryRow:
    alarm_name: str
    timestamp: float
    item_type: str  # ConfigurationUpdate | StateUpdate | Action
    summary: str
    data: str  # JSON text


def _alarm(r: Sequence[Any]) -> AlarmRow:
    return AlarmRow(r[1], r[2], r[3], orjson.loads(r[4]), r[5], r[6], r[7], r[8], r[9], r[10])


def _history(r: Sequence[Any]) -> HistoryRow:
    return HistoryRow(r[1], r[2], r[3], r[4], r[5])


def _dumps(doc: Any) -> str:
    return orjson.dumps(doc).decode()


class Alarms:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.clock = clock

    # ---- definitions -----------------------------------------------------------------------------------------
    def put(self, name: str, namespace: str, metric_name: str, definition: Mapping[str, Any]) -> bool:
        """Create ``name``, or replace its definition keeping its state; True when created."""
        now = self.clock()
        doc = _dumps(dict(definition))
        with transaction(self.conn) as c:
            found = c.execute("SELECT definition FROM cloudwatch_alarms WHERE name = ?", (name,)).fetchone()
            if found is None:
                c.execute(
                    "INSERT INTO cloudwatch_alarms (name, namespace, metric_name, definition, state_value, "
                    "state_reason, state_reason_data, state_updated, state_transitioned, config_updated) "
                    "VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)",
                    (name, namespace, metric_name, doc, INITIAL_STATE, INITIAL_REASON, now, now, now),
                )
                self._add_history(c, name, now, "ConfigurationUpdate", f'Alarm "{name}" created', {
                    "version": "1.0", "type": "Create", "createdAlarm": dict(definition),
                })  # fmt: skip
                return True
            c.execute(
                "UPDATE cloudwatch_alarms SET namespace = ?, metric_name = ?, definition = ?, config_updated = ? "
                "WHERE name = ?",
                (namespace, metric_name, doc, now, name),
            )
            self._add_history(c, name, now, "ConfigurationUpdate", f'Alarm "{name}" updated', {
                "version": "1.0", "type": "Update",
                "originalAlarm": orjson.loads(found[0]), "updatedAlarm": dict(definition),
            })  # fmt: skip
            return False

    def get(self, name: str) -> AlarmRow | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM cloudwatch_alarms WHERE name = ?", (name,)).fetchone()
        return None if row is None else _alarm(row)

    def all(self) -> list[AlarmRow]:
        rows = self.conn.execute(f"SELECT {_COLUMNS} FROM cloudwatch_alarms ORDER BY name").fetchall()
        return [_alarm(r) for r in rows]

    def listing(
        self,
        names: Sequence[str] | None = None,
        prefix: str | None = None,
        state: str | None = None,
        max_records: int = 50,
        next_token: str | None = None,
    ) -> Page[AlarmRow]:
        """Alarms by name (ascending); ``InvalidNextToken`` for a token this listing did not issue."""
        where: list[str] = []
        args: list[Any] = []
        if names is not None:
            where.append(f"name IN ({', '.join('?' * len(names))})" if names else "1 = 0")
            args += list(names)
        if prefix:
            where.append("substr(name, 1, ?) = ?")
            args += [len(prefix), prefix]
        if state:
            where.append("state_value = ?")
            args.append(state)
        listing = Listing(tuple(where), tuple(args), "AlarmName", "Ascending", max_records, next_token)
        page = keyset_page(self.conn, "cloudwatch_alarms", _COLUMNS, {"AlarmName": "name"}, listing)
        return page_of(page, _alarm)

    def delete(self, names: Sequence[str]) -> list[str]:
        """Delete the named alarms; answers the names that did not exist (nothing is deleted then)."""
        now = self.clock()
        with transaction(self.conn) as c:
            rows = {
                r[0]: r[1]
                for name in names
                for r in c.execute("SELECT name, definition FROM cloudwatch_alarms WHERE name = ?", (name,))
            }
            missing = [n for n in names if n not in rows]
            if missing:
                return missing
            for name, definition in rows.items():
                c.execute("DELETE FROM cloudwatch_alarms WHERE name = ?", (name,))
                self._add_history(c, name, now, "ConfigurationUpdate", f'Alarm "{name}" deleted', {
                    "version": "1.0", "type": "Delete", "deletedAlarm": orjson.loads(definition),
                })  # fmt: skip
        return []

    # ---- state -----------------------------------------------------------------------------------------------
    def set_state(
        self,
        name: str,
        value: str,
        reason: str,
        reason_data: str | None = None,
        expected: str | None = None,
        at: float | None = None,
    ) -> AlarmRow | None:
        """Move ``name`` to ``value`` with its history row; answers the row as it was before, or None when the
        alarm is gone or (with ``expected``) no longer in that state. The same state again updates only the
        reason and time, with no history row (as CloudWatch does)."""
        now = self.clock() if at is None else at
        with transaction(self.conn) as c:
            row = c.execute(f"SELECT {_COLUMNS} FROM cloudwatch_alarms WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            old = _alarm(row)
            if expected is not None and old.state_value != expected:
                return None
            transitioned = now if value != old.state_value else old.state_transitioned
            c.execute(
                "UPDATE cloudwatch_alarms SET state_value = ?, state_reason = ?, state_reason_data = ?, "
                "state_updated = ?, state_transitioned = ? WHERE name = ?",
                (value, reason, reason_data, now, transitioned, name),
            )
            if value != old.state_value:
                new_state: dict[str, Any] = {"stateValue": value, "stateReason": reason}
                if reason_data is not None:
                    new_state["stateReasonData"] = orjson.loads(reason_data)
                self._add_history(c, name, now, "StateUpdate", f"Alarm updated from {old.state_value} to {value}", {
                    "version": "1.0",
                    "oldState": {"stateValue": old.state_value, "stateReason": old.state_reason},
                    "newState": new_state,
                })  # fmt: skip
            return old

    # ---- history ---------------------------------------------------------------------------------------------
    def add_history(self, name: str, item_type: str, summary: str, data: Mapping[str, Any]) -> None:
        with transaction(self.conn) as c:
            self._add_history(c, name, self.clock(), item_type, summary, data)

    def _add_history(
        self, c: Connection, name: str, at: float, item_type: str, summary: str, data: Mapping[str, Any]
    ) -> None:
        c.execute(
            "INSERT INTO cloudwatch_alarm_history (alarm_name, timestamp, item_type, summary, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (name, at, item_type, summary[:255], _dumps(dict(data))),
        )

    def history(
        self,
        name: str | None = None,
        item_type: str | None = None,
        start: float | None = None,
        end: float | None = None,
        max_records: int = 100,
        next_token: str | None = None,
        newest_first: bool = True,
    ) -> Page[HistoryRow]:
        where: list[str] = []
        args: list[Any] = []
        if name:
            where.append("alarm_name = ?")
            args.append(name)
        if item_type:
            where.append("item_type = ?")
            args.append(item_type)
        if start is not None:
            where.append("timestamp >= ?")
            args.append(start)
        if end is not None:
            where.append("timestamp <= ?")
            args.append(end)
        order = "Descending" if newest_first else "Ascending"
        listing = Listing(tuple(where), tuple(args), "Timestamp", order, max_records, next_token)
        page = keyset_page(
            self.conn,
            "cloudwatch_alarm_history",
            "seq, alarm_name, timestamp, item_type, summary, data",
            {"Timestamp": "timestamp"},
            listing,
        )
        return page_of(page, _history)

    def prune_history(self, before: float) -> int:
        """Forget history older than ``before`` (CloudWatch keeps 14 days)."""
        with transaction(self.conn) as c:
            return c.execute("DELETE FROM cloudwatch_alarm_history WHERE timestamp < ?", (before,)).rowcount
