"""The pipeline runner's tests (tests/integration/pipelines/test_pipeline_runner.py),
with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.pipelines.test_pipeline_runner import *  # noqa: F403
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401

pytestmark = pytest.mark.postgres
