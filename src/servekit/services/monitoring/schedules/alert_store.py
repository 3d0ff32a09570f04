"""The monitoring aggregate's alerts: each monitoring schedule's alerts (SageMaker Model Monitor's
``ListMonitoringAlerts`` / ``UpdateMonitoringAlert``) and the history of their status changes
(``ListMonitoringAlertHistory``).

Stored as given (statuses as text); what makes an alert's status is
:mod:`servekit.services.monitoring.schedules.alerts`'s. An alert goes with its schedule; its history stays, as the
schedule's executions do. **Time comes from the injected clock.**
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servekit.state.connection import Connection, transaction
from servekit.state.paging import Listing, Page, keyset_page, page_of, where_set

TABLES = (
    """CREATE TABLE monitoring_alerts (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        schedule_name TEXT NOT NULL COLLATE NOCASE,
        name TEXT NOT NULL COLLATE NOCASE,
        datapoints INTEGER NOT NULL,
        period INTEGER NOT NULL,
        status TEXT NOT NULL,
        created REAL NOT NULL,
        modified REAL NOT NULL,
        UNIQUE (schedule_name, name)
    )""",
    """CREATE TABLE monitoring_alert_history (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        schedule_name TEXT NOT NULL,
        alert_name TEXT NOT NULL,
        status TEXT NOT NULL,
        created REAL NOT NULL
    )""",
    "CREATE INDEX monitoring_alert_history_schedule ON monitoring_alert_history (schedule_name, created)",
)


@dataclass(frozen=True, slots=True)
class AlertRow:
    schedule_name: str
    name: str
    datapoints: int  # DatapointsToAlert
    period: int  # EvaluationPeriod
    status: str  # InAlert | OK
    created: float
    modified: float


@dataclass(frozen=True, slots=True)
class AlertChange:
    schedule_name: str
    alert_name: str
    status: str  # the status the alert went into
    created: float


_ALERT_COLUMNS = "seq, schedule_name, name, datapoints, period, status, created, modified"
_HISTORY_COLUMNS = "seq, schedule_name, alert_name, status, created"
_ALERT_SORT = {"CreationTime": "created"}
_HISTORY_SORT = {"CreationTime": "created", "Status": "status"}


def _alert(r: tuple[Any, ...]) -> AlertRow:
    return AlertRow(r[1], r[2], int(r[3]), int(r[4]), r[5], r[6], r[7])


def _change(r: tuple[Any, ...]) -> AlertChange:
    return AlertChange(r[1], r[2], r[3], r[4])


class MonitoringAlerts:
    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self._db = conn
        self._clock = clock

    def create(self, schedule_name: str, name: str, datapoints: int, period: int, status: str) -> None:
        """A schedule's alert; one that exists already (a schedule made again under its name) starts afresh."""
        now = self._clock()
        with transaction(self._db):
            self._db.execute(
                "DELETE FROM monitoring_alerts WHERE schedule_name = ? AND name = ?", (schedule_name, name)
            )
            self._db.execute(
                "INSERT INTO monitoring_alerts (schedule_name, name, datapoints, period, status, created, modified) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (schedule_name, name, datapoints, period, status, now, now),
            )

    def get(self, schedule_name: str, name: str) -> AlertRow | None:
        query = f"SELECT {_ALERT_COLUMNS} FROM monitoring_alerts WHERE schedule_name = ? AND name = ?"
        r = self._db.execute(query, (schedule_name, name)).fetchone()
        return _alert(r) if r else None

    def of_schedule(self, schedule_name: str) -> list[AlertRow]:
        rows = self._db.execute(
            f"SELECT {_ALERT_COLUMNS} FROM monitoring_alerts WHERE schedule_name = ? ORDER BY seq", (schedule_name,)
        )
        return [_alert(r) for r in rows]

    def page(self, schedule_name: str, max_results: int, next_token: str | None) -> Page[AlertRow]:
        where = ("schedule_name = ?",)
        listing = Listing(where, (schedule_name,), "CreationTime", "Ascending", max_results, next_token)
        return page_of(keyset_page(self._db, "monitoring_alerts", _ALERT_COLUMNS, _ALERT_SORT, listing), _alert)

    def update(
        self, schedule_name: str, name: str, *, datapoints: int | None = None, period: int | None = None,
        status: str | None = None,
    ) -> AlertRow | None:  # fmt: skip
        """Change what is given; a change of status is written into the history in the same transaction. None when
        there is no such alert."""
        now = self._clock()
        with transaction(self._db):
            old = self.get(schedule_name, name)
            if old is None:
                return None
            new_status = old.status if status is None else status
            self._db.execute(
                "UPDATE monitoring_alerts SET datapoints = ?, period = ?, status = ?, modified = ? "
                "WHERE schedule_name = ? AND name = ?",
                (
                    old.datapoints if datapoints is None else datapoints,
                    old.period if period is None else period,
                    new_status,
                    now if (datapoints, period) != (None, None) else old.modified,
                    schedule_name,
                    name,
                ),
            )
            if new_status != old.status:
                self._db.execute(
                    "INSERT INTO monitoring_alert_history (schedule_name, alert_name, status, created) "
                    "VALUES (?, ?, ?, ?)",
                    (old.schedule_name, old.name, new_status, now),
                )
        return self.get(schedule_name, name)

    def delete_of_schedule(self, schedule_name: str) -> None:
        with transaction(self._db):
            self._db.execute("DELETE FROM monitoring_alerts WHERE schedule_name = ?", (schedule_name,))

    def recent_outcomes(self, schedule_name: str, statuses: tuple[str, ...], limit: int) -> list[str]:
        """The statuses of the schedule's last ``limit`` executions among ``statuses`` (the final ones), newest
        first."""
        marks = ",".join("?" * len(statuses))
        rows = self._db.execute(
            f"SELECT status FROM monitoring_executions WHERE schedule_name = ? COLLATE NOCASE AND status IN ({marks}) "
            "ORDER BY scheduled DESC, seq DESC LIMIT ?",
            (schedule_name, *statuses, limit),
        )
        return [str(r[0]) for r in rows]

    def history(
        self,
        *,
        schedule_name: str | None = None,
        alert_name: str | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        status: str | None = None,
        sort_by: str = "CreationTime",
        sort_order: str = "Descending",
        max_results: int = 100,
        next_token: str | None = None,
    ) -> Page[AlertChange]:
        where, args = where_set(
            *(
                ("schedule_name = ? COLLATE NOCASE", schedule_name),
                ("alert_name = ? COLLATE NOCASE", alert_name),
                ("created >= ?", created_after),
                ("created <= ?", created_before),
                ("status = ?", status),
            )
        )
        listing = Listing(where, args, sort_by, sort_order, max_results, next_token)
        return page_of(
            keyset_page(self._db, "monitoring_alert_history", _HISTORY_COLUMNS, _HISTORY_SORT, listing), _change
        )
