"""The state database's and transform jobs' tests (tests/unit/state/test_state_db.py and, with processes,
tests/integration/state/test_state_db_processes.py), with the state in PostgreSQL
(tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres, without  # noqa: F401
from tests.integration.state.test_state_db_processes import *  # noqa: F403
from tests.unit.state.test_state_db import *  # noqa: F403

pytestmark = pytest.mark.postgres

# SQLite's own: its pragmas and catalogue, a file written before migrations, an unwritable home's file, a file's
# schema edited by hand. tests/integration/state/test_postgres_state.py checks what applies to PostgreSQL.
without(
    globals(),
    "test_a_new_database_is_migrated_in_wal_with_foreign_keys",
    "test_a_database_of_a_newer_servekit_is_refused",
    "test_aggregates_this_servekit_does_not_know_are_left_alone",
    "test_a_home_from_before_migrations_is_adopted",
    "test_an_unusable_home_is_a_state_error",
    "test_home_flag_then_environment_then_default",
)
