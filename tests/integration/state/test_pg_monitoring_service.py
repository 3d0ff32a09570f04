"""The Model Monitor service's tests (tests/unit/monitor/schedules/test_monitoring_service.py),
with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401
from tests.unit.conftest import *  # noqa: F403  # its fixtures (boto_client, …)
from tests.unit.monitor.schedules.test_monitoring_service import *  # noqa: F403

pytestmark = pytest.mark.postgres
