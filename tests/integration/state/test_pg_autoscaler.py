"""The autoscaler's tests (tests/unit/services/autoscaling/test_autoscaler.py),
with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401
from tests.unit.services.autoscaling.test_autoscaler import *  # noqa: F403

pytestmark = pytest.mark.postgres
