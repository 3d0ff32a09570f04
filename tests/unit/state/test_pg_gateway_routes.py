"""The gateway routes' tests (tests/unit/test_gateway_replica_routes.py),
with the state in PostgreSQL (tests/unit/state/pg_suite.py)."""

import pytest
from tests.unit.state.pg_suite import state_on_postgres  # noqa: F401
from tests.unit.test_gateway_replica_routes import *  # noqa: F403

pytestmark = pytest.mark.postgres
