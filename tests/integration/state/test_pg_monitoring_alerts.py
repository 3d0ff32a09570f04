"""Model Monitor's alerts (tests/integration/monitor/test_monitoring_alerts.py), with the state in PostgreSQL
(tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.monitor.conftest import world  # noqa: F401
from tests.integration.monitor.test_monitoring_alerts import *  # noqa: F403
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401

pytestmark = pytest.mark.postgres
