"""The metrics store's tests (tests/unit/services/cloudwatch/test_metrics_store.py),
with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401
from tests.unit.services.cloudwatch.test_metrics_store import *  # noqa: F403

pytestmark = pytest.mark.postgres
