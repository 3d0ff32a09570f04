"""The state database opened by several processes at once (forked here, so not a unit test; the rest of the state
database's tests are tests/unit/state/test_state_db.py). tests/integration/state/test_pg_state_db.py runs it with the
state in PostgreSQL too."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from servekit.services.database import StateDB
from servekit.state import StateError


def _open_at_barrier(barrier: object, home: str) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    try:
        StateDB.open(Path(home)).close()
    except StateError:
        os._exit(1)
    os._exit(0)


def test_processes_opening_a_new_home_together_all_succeed(tmp_path: Path) -> None:
    # SQLite answers "database is locked" at once (no busy handler) to the loser of two processes switching a new
    # file to WAL together; two pipeline watchers started at once hit it in CI. Without the retry, about one
    # round in six failed here.
    ctx = multiprocessing.get_context("fork")
    failed = 0
    for round_ in range(30):
        home = tmp_path / f"home{round_}"
        barrier = ctx.Barrier(4)
        procs = [ctx.Process(target=_open_at_barrier, args=(barrier, str(home))) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
        failed += sum(p.exitcode != 0 for p in procs)
    assert failed == 0
