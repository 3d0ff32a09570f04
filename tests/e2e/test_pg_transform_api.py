"""tests/e2e/test_transform_jobs_api_e2e.py with the state of servekit up (and of the runs it starts) in PostgreSQL
(tests/e2e/postgres_env.py)."""

import pytest
from tests.e2e.postgres_env import state_in_postgres  # noqa: F401
from tests.e2e.test_transform_jobs_api_e2e import *  # noqa: F403
from tests.postgres_fixtures import postgres_server  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def test_the_jobs_are_in_postgresql(state_in_postgres: str) -> None:  # noqa: F811
    import psycopg

    with psycopg.connect(state_in_postgres) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM transform_jobs").fetchall()}
    assert {"double-1", "slow-1"} <= names  # run as `servekit transform run` children of servekit up
