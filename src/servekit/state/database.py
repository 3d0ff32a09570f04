"""The state database: one SQLite file under the servekit home (or a PostgreSQL database named by a URL, shared by
processes on several hosts), migrated when opened, with a repository per aggregate."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from servekit.state.alarms import Alarms
from servekit.state.autoscaling import Autoscaling
from servekit.state.connection import DEFAULT_TIMEOUT_S, Connection, connect
from servekit.state.hosting import Hosting
from servekit.state.hosting_rows import AsyncQueue, InferenceComponentRepo
from servekit.state.logs import Logs
from servekit.state.metrics import Metrics
from servekit.state.migrations import Migrations, StateError, migrate
from servekit.state.monitoring import Monitoring
from servekit.state.pipelines import Pipelines
from servekit.state.postgres import connect_postgres, is_database_url, redact
from servekit.state.recommend_jobs import RecommendJobs
from servekit.state.registry import Registry
from servekit.state.sagemaker_jobs import SageMakerJobs
from servekit.state.schema import MIGRATIONS
from servekit.state.transform_jobs import TransformJobs

DB_NAME = "servekit.db"  # the name servekit has always used: older homes open as they are


def database_path(home: Path) -> Path:
    return home / DB_NAME


class StateDB:
    """An open, migrated state database. Not for concurrent use from several threads at once; open one per
    process (or thread) instead: WAL lets them read while one writes."""

    def __init__(self, conn: Connection, path: Path, where: str | None = None) -> None:
        self.conn = conn
        self.path = path  # the home's SQLite file (not used when the state is in PostgreSQL: see ``where``)
        self.where = where or str(path)  # what messages name: the file, or the database URL without password
        self.transform_jobs = TransformJobs(conn)

    @cached_property
    def hosting(self) -> Hosting:
        """Models, endpoint configs, endpoints and instances, stamped with the wall clock (build a
        :class:`Hosting` over ``conn`` with another clock where time must be controlled)."""
        return Hosting(self.conn)

    @cached_property
    def alarms(self) -> Alarms:
        """CloudWatch alarms and their history, stamped with the wall clock (build :class:`Alarms` over ``conn``
        with another clock where time must be controlled)."""
        return Alarms(self.conn)

    @cached_property
    def metrics(self) -> Metrics:
        """One-minute metric aggregates (the endpoint metrics CloudWatch's API and alarms read)."""
        return Metrics(self.conn)

    @cached_property
    def autoscaling(self) -> Autoscaling:
        """Application Auto Scaling's scalable targets, policies and activities, stamped with the wall clock."""
        return Autoscaling(self.conn)

    @cached_property
    def recommend_jobs(self) -> RecommendJobs:
        """Inference recommendation jobs, stamped with the wall clock."""
        return RecommendJobs(self.conn)

    @cached_property
    def registry(self) -> Registry:
        """Model package groups, model packages and their approval/deployment events, stamped with the wall
        clock."""
        return Registry(self.conn)

    @cached_property
    def monitoring(self) -> Monitoring:
        """Monitoring job definitions, schedules and their executions, stamped with the wall clock."""
        return Monitoring(self.conn)

    @cached_property
    def pipelines(self) -> Pipelines:
        """Pipeline runs, their steps, and the artifacts they wrote with their lineage, stamped with the
        wall clock."""
        return Pipelines(self.conn)

    @cached_property
    def sagemaker_jobs(self) -> SageMakerJobs:
        """SageMaker's training, processing and tuning jobs, stamped with the wall clock."""
        return SageMakerJobs(self.conn)

    @cached_property
    def async_invocations(self) -> AsyncQueue:
        """InvokeEndpointAsync's queue (the hosting aggregate's), stamped with the wall clock."""
        return AsyncQueue(self.conn)

    @cached_property
    def inference_components(self) -> InferenceComponentRepo:
        """The inference components of IC-based endpoints (the hosting aggregate's), stamped with the wall clock."""
        return InferenceComponentRepo(self.conn)

    @cached_property
    def logs(self) -> Logs:
        """CloudWatch Logs' groups, streams and events, and the shipper's offsets, stamped with the wall clock."""
        return Logs(self.conn)

    @classmethod
    def open(
        cls,
        home: Path,
        *,
        database_url: str | None = None,
        migrations: Migrations = MIGRATIONS,
        timeout: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> StateDB:
        """Open (creating the home and the file if needed) and migrate ``home``'s database, or with
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

    def __enter__(self) -> StateDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
