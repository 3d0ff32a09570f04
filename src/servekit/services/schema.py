"""Every aggregate's migrations, in the order they are applied on a new database: the schema registry.

Each service keeps its store (and the store's ``MIGRATIONS``) in its own package; this list sits above them all, so
that ``servekit.state`` (the database and the migration mechanism) knows no service. An aggregate adds its module's
``MIGRATIONS`` tuple and one entry here (the order is the order a new database is built in, kept from when every
store lived in ``servekit.state``); changing an existing aggregate appends to its tuple, never edits a step already
released.
"""

from __future__ import annotations

from servekit.services.autoscaling import store as autoscaling
from servekit.services.cloudwatch import alarm_store as alarms
from servekit.services.cloudwatch import metric_store as metrics
from servekit.services.hosting import store as hosting
from servekit.services.iam import store as iam
from servekit.services.kms import store as kms
from servekit.services.logs import store as logs
from servekit.services.monitoring.schedules import store as monitoring_schedules
from servekit.services.pipelines.runs import repo as pipeline_runs
from servekit.services.registry import store as registry
from servekit.services.tagging import store as tags
from servekit.services.training import store as sagemaker_jobs
from servekit.services.transform import repo as transform_jobs
from servekit.state.migrations import Migration, check_migrations
from servekit.tools.recommend import store as recommend_jobs

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
    iam.AGGREGATE: iam.MIGRATIONS,
    kms.AGGREGATE: kms.MIGRATIONS,
    tags.AGGREGATE: tags.MIGRATIONS,
}

check_migrations(MIGRATIONS)
