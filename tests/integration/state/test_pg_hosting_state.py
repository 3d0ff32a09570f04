"""The hosting repository's tests (tests/unit/services/hosting/test_hosting_state.py),
with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres, without  # noqa: F401
from tests.unit.services.hosting.test_hosting_state import *  # noqa: F403

pytestmark = pytest.mark.postgres

# reads SQLite's catalogue (sqlite_master); tests/integration/state/test_postgres_state.py checks PostgreSQL's
without(globals(), "test_the_hosting_aggregate_is_migrated_with_its_tables")
