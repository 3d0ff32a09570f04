"""The model registry API's tests (tests/unit/registry/test_registry_api.py),
with the state in PostgreSQL (tests/unit/state/pg_suite.py)."""

import pytest
from tests.unit.conftest import *  # noqa: F403  # its fixtures (boto_client, …)
from tests.unit.registry.test_registry_api import *  # noqa: F403
from tests.unit.state.pg_suite import state_on_postgres  # noqa: F401

pytestmark = pytest.mark.postgres
