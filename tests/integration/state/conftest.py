"""The PostgreSQL server fixtures (tests/postgres_fixtures.py) for this directory's ``postgres`` tests."""

from tests.postgres_fixtures import postgres_server, postgres_url  # noqa: F401
