"""The metrics store's tests (tests/unit/cloudwatch/test_metrics_store.py),
with the state in PostgreSQL (tests/unit/state/pg_suite.py)."""

import pytest
from tests.unit.cloudwatch.test_metrics_store import *  # noqa: F403
from tests.unit.conftest import *  # noqa: F403  # its fixtures (boto_client, …)
from tests.unit.state.pg_suite import state_on_postgres  # noqa: F401

pytestmark = pytest.mark.postgres
