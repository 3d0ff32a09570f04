"""Every aggregate's migrations, in the order they are applied on a new database.

An aggregate (endpoints, registry, pipeline runs, …) adds its module with a ``MIGRATIONS`` tuple and one entry
here; changing an existing aggregate appends to its tuple, never edits a step already released.
"""

from __future__ import annotations

from servekit.state import (
    alarms,
    autoscaling,
    hosting,
    logs,
    metrics,
    recommend_jobs,
    registry,
    sagemaker_jobs,
    transform_jobs,
)
from servekit.state import monitoring as monitoring_schedules
from servekit.state import pipelines as pipeline_runs
from servekit.state.migrations import Migration, check_migrations

MIGRATIONS: dict[str, tuple[Migration, ...]] = {
    transform_jobs.AGGREGATE: transform_jobs.MIGRATIONS,
    hosting.AGGREGATE: hosting.MIGRATIONS,
    alarms.AGGREGATE: alarms.MIGRATIONS,
    metrics.AGGREGATE: metrics.MIGRATIONS,
    autoscaling.AGGREGATE: autoscaling.MIGRATIONS,
    recommend_jobs.AGGREGATE: recommend_jobs.MIGRATIONS,
    registry.AGGREGATE: registry.MIGRATIONS,
    monitoring_schedules.AGGREGATE: monitoring_schedules.MIGRATIONS,
    pipeline_runs.AGGREGATE: pipeline_runs.MIGRATIONS,
    logs.AGGREGATE: logs.MIGRATIONS,
    sagemaker_jobs.AGGREGATE: sagemaker_jobs.MIGRATIONS,
}

check_migrations(MIGRATIONS)
