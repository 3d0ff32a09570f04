"""Application Auto Scaling's API tests (tests/unit/services/autoscaling/test_autoscaling_api.py),
with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401
from tests.unit.services.autoscaling.test_autoscaling_api import *  # noqa: F403

pytestmark = pytest.mark.postgres
