"""Inference Recommender's API tests (tests/unit/recommend/test_recommend_api.py),
with the state in PostgreSQL (tests/unit/state/pg_suite.py)."""

import pytest
from tests.unit.recommend.test_recommend_api import *  # noqa: F403
from tests.unit.state.pg_suite import state_on_postgres  # noqa: F401

pytestmark = pytest.mark.postgres
