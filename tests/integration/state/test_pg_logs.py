"""CloudWatch Logs' operations, store and shipper tests (tests/unit/services/logs/), with the state in PostgreSQL
(tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401
from tests.unit.services.logs.test_logs_api import *  # noqa: F403
from tests.unit.services.logs.test_logs_parts import *  # noqa: F403
from tests.unit.services.logs.test_shipper import *  # noqa: F403

pytestmark = pytest.mark.postgres
