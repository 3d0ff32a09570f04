"""Inference Recommender's API tests (tests/unit/tools/recommend/test_recommend_api.py),
with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401
from tests.unit.tools.recommend.test_recommend_api import *  # noqa: F403

pytestmark = pytest.mark.postgres
