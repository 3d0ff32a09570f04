"""Run a test module of the state's users with their state in PostgreSQL: every ``StateDB.open(home)`` the tests
make (directly or through the service they build) opens the test's own database on the session's server instead
of the home's SQLite file. The tests themselves are unchanged: the same assertions hold on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.services.database import StateDB


@pytest.fixture(autouse=True)
def state_on_postgres(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    real = StateDB.open.__func__  # type: ignore[attr-defined]
    opened: list[StateDB] = []

    def open_on_postgres(cls: type[StateDB], home: Path, **options: Any) -> StateDB:
        options.setdefault("database_url", postgres_url)
        db: StateDB = real(cls, home, **options)
        opened.append(db)
        return db

    monkeypatch.setattr(StateDB, "open", classmethod(open_on_postgres))
    yield postgres_url
    for db in opened:  # some tests leave theirs open (a SQLite connection closes quietly when collected)
        db.close()


def without(namespace: dict[str, Any], *names: str) -> None:
    """Drop tests that do not apply to PostgreSQL from a module that imported them (each caller says why)."""
    for name in names:
        del namespace[name]
