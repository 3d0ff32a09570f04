"""The gateway routes' tests (tests/unit/gateway/test_gateway_replica_routes.py),
with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401
from tests.unit.gateway.test_gateway_replica_routes import *  # noqa: F403

pytestmark = pytest.mark.postgres
