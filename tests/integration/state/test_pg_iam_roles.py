"""IAM's roles and STS's sessions of them (tests/unit/services/iam/test_iam_roles.py,
tests/unit/services/sts/test_assume_role.py), with the state in PostgreSQL (tests/integration/state/pg_suite.py)."""

import pytest
from tests.integration.state.pg_suite import state_on_postgres  # noqa: F401
from tests.unit.services.iam.test_iam_roles import *  # noqa: F403
from tests.unit.services.sts.test_assume_role import *  # noqa: F403

pytestmark = pytest.mark.postgres
