"""Run an end-to-end test module of ``servekit up`` with its state in PostgreSQL: a database of the module's own on
the session's server, named by ``SERVEKIT_DATABASE_URL`` in the environment the module's processes inherit (the
``servekit up`` it starts, the runs that starts, the CLI it calls), and every ``StateDB.open`` the test process
makes pointed at it too. The tests themselves are unchanged: the same assertions hold on both backends."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.postgres_fixtures import PostgresServer

from servekit.services.database import StateDB
from servekit.state.home import DATABASE_URL_ENV


@pytest.fixture(scope="module", autouse=True)
def state_in_postgres(postgres_server: PostgresServer) -> Iterator[str]:
    import psycopg

    name = f"e2e_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8'")
    url = postgres_server.url(name)
    real = StateDB.open.__func__  # type: ignore[attr-defined]

    def open_in_postgres(cls: type[StateDB], home: Path, **options: Any) -> StateDB:
        options.setdefault("database_url", url)
        return real(cls, home, **options)  # type: ignore[no-any-return]

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DATABASE_URL_ENV, url)
        patch.setattr(StateDB, "open", classmethod(open_in_postgres))
        yield url
    with psycopg.connect(url) as conn:  # servekit up used this database (its leader row), not the home's file
        assert conn.execute("SELECT COUNT(*) FROM hosting_leader").fetchone() == (1,)
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
