"""tests/e2e/test_pipeline_api.py with the state of servekit up (and of the runs it starts) in PostgreSQL
(tests/e2e/postgres_env.py)."""

import pytest
from tests.e2e.postgres_env import state_in_postgres  # noqa: F401
from tests.e2e.test_pipeline_api import *  # noqa: F403
from tests.postgres_fixtures import postgres_server  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]
