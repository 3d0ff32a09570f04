"""Pipeline triggers' tests (tests/integration/pipelines/test_pipeline_triggers.py),
with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.pipelines.test_pipeline_triggers import *  # noqa: F403
from tests.integration.state.pg_suite import state_on_postgres, without  # noqa: F401

pytestmark = pytest.mark.postgres

# runs `servekit pipeline watch` processes, which open the home's SQLite file (the pipeline CLI has no --database-url)
without(globals(), "test_two_watchers_at_once_start_each_partition_once")
