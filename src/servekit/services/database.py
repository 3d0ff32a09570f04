"""The plane's state: the one database (:class:`servekit.state.database.Database`) opened with every service's
migrations (:data:`servekit.services.schema.MIGRATIONS`), with each service's store at hand. The composition roots,
the CLI and the tests open this; a service that needs only its own store builds it over ``conn``."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from servekit.services.autoscaling.store import Autoscaling
from servekit.services.cloudwatch.alarm_store import Alarms
from servekit.services.cloudwatch.metric_store import Metrics
from servekit.services.hosting.store import Hosting
from servekit.services.hosting.store_rows import AsyncQueue, InferenceComponentRepo
from servekit.services.iam.store import Roles
from servekit.services.kms.store import Keys
from servekit.services.logs.store import Logs
from servekit.services.monitoring.schedules.store import Monitoring
from servekit.services.pipelines.runs.repo import Pipelines
from servekit.services.registry.store import Registry
from servekit.services.schema import MIGRATIONS
from servekit.services.tagging.store import Tags
from servekit.services.training.store import SageMakerJobs
from servekit.services.transform.repo import TransformJobs
from servekit.state.connection import DEFAULT_TIMEOUT_S, Connection
from servekit.state.database import Database
from servekit.state.migrations import Migrations
from servekit.tools.recommend.store import RecommendJobs


class StateDB(Database):
    """The state database with every aggregate migrated, and a repository per aggregate."""

    def __init__(self, conn: Connection, path: Path, where: str | None = None) -> None:
        super().__init__(conn, path, where)
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
    def iam_roles(self) -> Roles:
        """IAM's roles, their inline policies and attached managed policies, stamped with the wall clock."""
        return Roles(self.conn)

    @cached_property
    def kms_keys(self) -> Keys:
        """KMS's keys and aliases, stamped with the wall clock."""
        return Keys(self.conn)

    @cached_property
    def tags(self) -> Tags:
        """The tags of SageMaker's resources, by ARN."""
        return Tags(self.conn)

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
        """:meth:`Database.open` with every service's migrations by default."""
        return super().open(home, database_url=database_url, migrations=migrations, timeout=timeout, clock=clock)
