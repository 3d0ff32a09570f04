"""The state database: home resolution, connection settings, migrations, the transform jobs repository."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from servekit.services.database import StateDB
from servekit.services.schema import MIGRATIONS
from servekit.services.transform.repo import TransformObjectRow
from servekit.services.transform.spec import TransformSpec
from servekit.services.transform.status import JobStatus
from servekit.services.transform.store import JobStore
from servekit.state import DB_NAME, Migration, SchemaTooNew, StateError, connect, migrate, resolve_home, schema_versions
from servekit.state.migrations import check_migrations

# ---- home ------------------------------------------------------------------------------------------------------


def test_home_flag_then_environment_then_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"SERVEKIT_HOME": str(tmp_path / "from-env")}
    assert resolve_home(tmp_path / "flag", env) == tmp_path / "flag"
    assert resolve_home(None, env) == tmp_path / "from-env"
    assert resolve_home(None, {"SERVEKIT_HOME": ""}) == tmp_path / ".servekit"
    assert resolve_home(None, {}) == tmp_path / ".servekit"
    assert resolve_home("rel", {}) == tmp_path / "rel"  # always absolute


# ---- connection and migrations -----------------------------------------------------------------------------------


def test_a_new_database_is_migrated_in_wal_with_foreign_keys(tmp_path: Path) -> None:
    with StateDB.open(tmp_path / "home") as db:
        assert db.path == tmp_path / "home" / DB_NAME
        assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert db.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        assert schema_versions(db.conn) == {a: len(steps) for a, steps in MIGRATIONS.items()}
        tables = {r[0] for r in db.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"schema_migrations", "transform_jobs", "transform_objects"} <= tables


def test_migrations_apply_once(tmp_path: Path) -> None:
    StateDB.open(tmp_path, clock=lambda: 1.0).close()
    with StateDB.open(tmp_path, clock=lambda: 2.0) as db:
        rows = db.conn.execute("SELECT aggregate, version, applied FROM schema_migrations").fetchall()
        # the second open applied nothing: one row per aggregate step, all from the first open
        assert sorted(rows) == sorted((a, n, 1.0) for a, steps in MIGRATIONS.items() for n in range(1, len(steps) + 1))
        assert migrate(db.conn, MIGRATIONS) == {}


def _demo(*steps: Migration) -> dict[str, tuple[Migration, ...]]:
    return {"demo": steps}


V1 = Migration(1, "things", ("CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",))
V2 = Migration(2, "a colour", ("ALTER TABLE things ADD COLUMN colour TEXT NOT NULL DEFAULT 'red'",))


def test_an_aggregate_grows_by_appending_steps(tmp_path: Path) -> None:
    conn = connect(tmp_path / "x.db")
    assert migrate(conn, _demo(V1)) == {"demo": 1}
    conn.execute("INSERT INTO things (name) VALUES ('a')")
    assert migrate(conn, _demo(V1, V2)) == {"demo": 2}  # only the new step runs; data stays
    assert conn.execute("SELECT name, colour FROM things").fetchall() == [("a", "red")]
    assert schema_versions(conn) == {"demo": 2}


def test_a_failing_step_rolls_back_the_whole_migration(tmp_path: Path) -> None:
    def boom(conn: sqlite3.Connection) -> None:
        raise RuntimeError("data migration failed")

    conn = connect(tmp_path / "x.db")
    with pytest.raises(RuntimeError, match="data migration failed"):
        migrate(conn, _demo(V1, Migration(2, "bad", (), run=boom)))
    assert schema_versions(conn) == {}
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'things'").fetchall() == []


def test_migrations_must_be_numbered_in_order() -> None:
    with pytest.raises(ValueError, match=r"numbered 1\.\.2"):
        check_migrations(_demo(V2, V1))


def test_a_database_of_a_newer_servekit_is_refused(tmp_path: Path) -> None:
    StateDB.open(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_NAME) as raw:
        raw.execute("INSERT INTO schema_migrations VALUES ('transform_jobs', 99, 'from the future', 0)")
    raw.close()
    with pytest.raises(SchemaTooNew, match=r"transform_jobs schema is at version 99.*knows versions up to 1"):
        StateDB.open(tmp_path)
    assert isinstance(SchemaTooNew("x"), StateError)


def test_aggregates_this_servekit_does_not_know_are_left_alone(tmp_path: Path) -> None:
    conn = connect(tmp_path / DB_NAME)
    migrate(conn, {**_demo(V1), **MIGRATIONS})  # a newer servekit that knows "demo"
    conn.close()
    with StateDB.open(tmp_path, migrations=MIGRATIONS) as db:  # no "demo" here: an older servekit
        assert schema_versions(db.conn)["demo"] == 1


def test_a_home_from_before_migrations_is_adopted(tmp_path: Path) -> None:
    """servekit used to create the transform tables with CREATE TABLE IF NOT EXISTS and no version table."""
    old = sqlite3.connect(tmp_path / DB_NAME)
    for statement in MIGRATIONS["transform_jobs"][0].statements:
        old.execute(statement)
    request = '{"TransformJobName": "old-job", "ModelName": "/m/1", "TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": "/in"}}}, "TransformOutput": {"S3OutputPath": "/out"}}'  # noqa: E501
    old.execute(
        "INSERT INTO transform_jobs (name, request, status, created) VALUES ('old-job', ?, 'Completed', 5.0)",
        (request,),
    )
    old.execute("INSERT INTO transform_objects VALUES ('old-job', 'a.csv', 'Done', 0, 7, 1, '', 6.0)")
    old.commit()
    old.close()
    with JobStore(tmp_path) as store:
        job = store.get("old-job")
        assert job is not None and job.status is JobStatus.COMPLETED
        assert (job.spec.input_uri, job.objects_done, job.records, job.errors) == ("/in", 1, 7, 1)
    with StateDB.open(tmp_path) as db:
        assert schema_versions(db.conn) == {a: len(steps) for a, steps in MIGRATIONS.items()}


def test_an_unusable_home_is_a_state_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(StateError, match="cannot open the servekit home"):
        StateDB.open(tmp_path / "file")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / DB_NAME).write_bytes(b"this is not a database, just some text " * 100)
    with pytest.raises(StateError, match="state database"):
        StateDB.open(tmp_path / "home")


# ---- the transform jobs repository ---------------------------------------------------------------------------


def test_transform_jobs_round_trip(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as db:
        repo = db.transform_jobs
        assert repo.get("j") is None and repo.list() == []
        with repo.transaction():
            repo.insert(
                "j", {"k": [1, "two"]}, "InProgress", created=10.0, owner_pid=42, owner_host="h", engine="local"
            )
        repo.insert("i", {}, "Failed", created=20.0, owner_pid=1, owner_host="h", engine="ray")
        repo.set_total("j", 3)
        repo.set_live("j", 11)
        repo.put_objects(
            "j",
            [
                TransformObjectRow("b", "Done", 0, 5, 1, "", 11.0),
                TransformObjectRow("a", "Failed", 1, 0, 0, "boom", 12.0),
            ],
        )
        row = repo.get("j")
        assert row is not None
        assert (row.request, row.status, row.created, row.started, row.ended) == (
            {"k": [1, "two"]},
            "InProgress",
            10.0,
            10.0,
            None,
        )
        assert (row.owner_pid, row.owner_host, row.engine, row.objects_total, row.records_live) == (
            42,
            "h",
            "local",
            3,
            11,
        )
        assert (row.objects_by_status, row.records, row.errors) == ({"Done": 1, "Failed": 1}, 5, 1)
        assert [o.key for o in repo.objects("j")] == ["a", "b"]
        assert repo.objects("j")[0] == TransformObjectRow("a", "Failed", 1, 0, 0, "boom", 12.0)
        assert repo.keys_with_status("j", "Done") == {"b"}
        assert [r.name for r in repo.list()] == ["j", "i"]  # oldest first

        repo.set_status("j", "Stopped", reason="ctrl-c", ended=30.0)
        repo.restart("j", {"k": 2}, "InProgress", started=40.0, owner_pid=43, owner_host="h2", engine="ray")
        repo.delete_objects_except("j", "Done")
        row = repo.get("j")
        assert row is not None
        assert (row.request, row.status, row.failure_reason, row.started, row.ended) == (
            {"k": 2},
            "InProgress",
            "",
            40.0,
            None,
        )
        assert (row.owner_pid, row.engine, row.records_live, row.objects_by_status) == (43, "ray", 0, {"Done": 1})


def test_a_transaction_that_raises_writes_nothing(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as db:
        repo = db.transform_jobs
        with pytest.raises(KeyError), repo.transaction():
            repo.insert("j", {}, "InProgress", created=1.0, owner_pid=1, owner_host="h", engine="local")
            raise KeyError("abandon")
        assert repo.get("j") is None


def test_job_store_on_a_shared_database_leaves_it_open(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as db:
        with JobStore(db, clock=lambda: 7.0) as store:
            store.begin(TransformSpec(name="s", input_uri="/in", output_path="/out", model="/m/1"), "local")
        assert db.transform_jobs.get("s") is not None  # still open after the store closed


def test_concurrent_writers_on_two_connections_lose_nothing(tmp_path: Path) -> None:
    """Two connections (as two processes would have) do read-modify-write transactions at once; the busy
    timeout makes each wait for the other's write lock instead of failing, and none overwrites the other."""
    with StateDB.open(tmp_path) as setup:
        setup.transform_jobs.insert("j", {}, "InProgress", created=0.0, owner_pid=1, owner_host="h", engine="local")
    rounds, errors = 200, []
    barrier = threading.Barrier(2)

    def writer() -> None:
        try:
            with StateDB.open(tmp_path) as db:
                repo = db.transform_jobs
                barrier.wait()
                for _ in range(rounds):
                    with repo.transaction():
                        row = repo.get("j")
                        assert row is not None
                        repo.set_live("j", row.records_live + 1)
        except BaseException as exc:  # reported below: an exception in a thread would be lost
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    with StateDB.open(tmp_path) as db:
        row = db.transform_jobs.get("j")
        assert row is not None and row.records_live == 2 * rounds


def test_a_reader_sees_committed_rows_while_a_writer_holds_its_lock(tmp_path: Path) -> None:
    with StateDB.open(tmp_path) as writer, StateDB.open(tmp_path) as reader:
        writer.transform_jobs.insert("a", {}, "Completed", created=1.0, owner_pid=1, owner_host="h", engine="local")
        with writer.transform_jobs.transaction():
            writer.transform_jobs.insert("b", {}, "InProgress", created=2.0, owner_pid=1, owner_host="h", engine="x")
            assert [r.name for r in reader.transform_jobs.list()] == ["a"]  # WAL: no wait, no uncommitted row
        assert [r.name for r in reader.transform_jobs.list()] == ["a", "b"]
