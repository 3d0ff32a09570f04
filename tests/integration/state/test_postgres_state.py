"""PostgreSQL as the state database on a real server (marked ``postgres``; tests/postgres_fixtures.py starts it, so
not a unit test): migrations from empty and from two processes at once, a newer schema refused, the writers' lock
(compare-and-set and read-merge-write under concurrent writers lose nothing), names unique ignoring case, and the
errors a user sees. The SQL translation, which needs no server, is tests/unit/state/test_postgres_translate.py; the
repositories' own test modules run on PostgreSQL too: tests/integration/state/test_pg_*.py."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path

import pytest
from tests.postgres_fixtures import PostgresServer

from servekit.gateway.store import GatewayRoutes
from servekit.services.cloudwatch.metric_store import MinuteRow
from servekit.services.database import StateDB
from servekit.services.hosting.store import AlreadyExists, ContainerSpec, StaleStatus
from servekit.services.schema import MIGRATIONS
from servekit.state import Migration, SchemaTooNew, StateError, migrate, schema_versions
from servekit.state.postgres import PostgresIntegrityError, connect_postgres

# ---- on a real server ------------------------------------------------------------------------------------------


@pytest.mark.postgres
def test_an_empty_database_is_migrated_once(postgres_url: str, tmp_path: Path) -> None:
    with StateDB.open(tmp_path, database_url=postgres_url, clock=lambda: 1.0) as db:
        assert db.where == postgres_url
        assert not db.path.exists()  # the home holds no SQLite file: the state is in PostgreSQL
        assert schema_versions(db.conn) == {a: len(steps) for a, steps in MIGRATIONS.items()}
        types = dict(
            db.conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'metric_minutes'"
            ).fetchall()
        )
        assert (types["sum"], types["minute"], types["histogram"]) == ("double precision", "bigint", "bytea")
    with StateDB.open(tmp_path, database_url=postgres_url, clock=lambda: 2.0) as db:
        applied = db.conn.execute("SELECT DISTINCT applied FROM schema_migrations").fetchall()
        assert applied == [(1.0,)]  # the second open applied nothing
        assert migrate(db.conn, MIGRATIONS) == {}


def _open_and_close(url: str, home: str) -> None:
    StateDB.open(Path(home), database_url=url).close()


@pytest.mark.postgres
def test_processes_migrating_one_database_at_once_all_succeed(postgres_url: str, tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_and_close, args=(postgres_url, str(tmp_path / f"h{i}"))) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with StateDB.open(tmp_path, database_url=postgres_url) as db:
        rows = db.conn.execute("SELECT aggregate, version FROM schema_migrations").fetchall()
    assert sorted(rows) == sorted((a, n) for a, steps in MIGRATIONS.items() for n in range(1, len(steps) + 1))


@pytest.mark.postgres
def test_a_failing_step_rolls_back_and_a_newer_schema_is_refused(postgres_url: str, tmp_path: Path) -> None:
    def boom(conn: object) -> None:
        raise RuntimeError("data migration failed")

    things = Migration(1, "things", ("CREATE TABLE things (id INTEGER PRIMARY KEY, at REAL NOT NULL)",))
    conn = connect_postgres(postgres_url, timeout=5)
    try:
        with pytest.raises(RuntimeError, match="data migration failed"):
            migrate(conn, {"demo": (things, Migration(2, "bad", (), run=boom))})
        assert schema_versions(conn) == {}
        assert conn.execute("SELECT to_regclass('things')").fetchone() == (None,)  # DDL rolled back too
        assert migrate(conn, {"demo": (things,)}) == {"demo": 1}
        conn.execute("INSERT INTO schema_migrations VALUES ('hosting', 99, 'from the future', 0)")
    finally:
        conn.close()
    with pytest.raises(SchemaTooNew, match=r"hosting schema is at version 99"):
        StateDB.open(tmp_path, database_url=postgres_url)


@pytest.mark.postgres
def test_names_are_unique_ignoring_case_and_found_by_any_case(postgres_url: str, tmp_path: Path) -> None:
    with StateDB.open(tmp_path, database_url=postgres_url) as db:
        db.hosting.create_model("MyModel", "arn:m", ContainerSpec(image="x"))
        with pytest.raises(AlreadyExists):
            db.hosting.create_model("mymodel", "arn:m2", ContainerSpec())
        found = db.hosting.get_model("MYMODEL")
        assert found is not None and found.name == "MyModel"  # the spelling it was created with
        page = db.hosting.list_models(name_contains="ymod")
        assert [m.name for m in page.items] == ["MyModel"]


@pytest.mark.postgres
def test_a_constraint_is_sqlites_error_class(postgres_url: str) -> None:
    conn = connect_postgres(postgres_url, timeout=5)
    try:
        conn.execute("CREATE TABLE u (k TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO u VALUES (?)", ("a",))
        with pytest.raises(sqlite3.IntegrityError, match=r"^UNIQUE constraint failed") as caught:
            conn.execute("INSERT INTO u VALUES (?)", ("a",))
        assert isinstance(caught.value, PostgresIntegrityError)
        assert not conn.in_transaction  # the lone write's own transaction was rolled back
        with pytest.raises(sqlite3.OperationalError, match=r"^no such table"):
            conn.execute("SELECT 1 FROM missing")
    finally:
        conn.close()


@pytest.mark.postgres
def test_concurrent_writers_lose_nothing(postgres_url: str, tmp_path: Path) -> None:
    """Eight writers, each on its own connection: metric buckets merged by read-merge-write, route versions from
    MAX()+1, and one compare-and-set status change that only one of them may win."""
    with StateDB.open(tmp_path, database_url=postgres_url) as db:
        db.hosting.create_endpoint("ep", "arn:ep", "cfg", "Creating", [])
    writers, rounds = 8, 25
    won: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def write(i: int) -> None:
        try:
            with StateDB.open(tmp_path, database_url=postgres_url) as db:
                start.wait()
                try:
                    db.hosting.transition("ep", "InService", expected="Creating", reason=f"writer {i}")
                    won.append(str(i))
                except StaleStatus:
                    pass
                routes = GatewayRoutes(db.conn)
                for r in range(rounds):
                    row = MinuteRow("ns", "Invocations", (("EndpointName", "ep"),), 60, 1.0, float(i), i, i, {r % 3: 1})
                    db.metrics.add([row])
                    routes.publish(f"ep-{i}", f'{{"r": {r}}}')
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(won) == 1
    with StateDB.open(tmp_path, database_url=postgres_url) as db:
        [minute] = db.metrics.minutes("ns", "Invocations", (("EndpointName", "ep"),), 0, 120)
        assert minute.count == writers * rounds
        assert minute.sum == sum(range(writers)) * rounds
        assert (minute.min, minute.max) == (0, writers - 1)
        assert sum(minute.histogram.values()) == writers * rounds
        versions = [r.version for r in GatewayRoutes(db.conn).since(0)]
        assert max(versions) == writers * rounds  # every publish took the next version: none lost or repeated
        history = db.hosting.history("ep")
        assert [(h.from_status, h.to_status) for h in history] == [(None, "Creating"), ("Creating", "InService")]


@pytest.mark.postgres
def test_an_unreachable_server_is_a_state_error_without_the_password(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = f"postgresql://sk:s3cret@127.0.0.1:{postgres_server.port}/no_such_database"
    with pytest.raises(StateError) as caught:
        StateDB.open(tmp_path, database_url=url, timeout=2)
    assert "sk:***@" in str(caught.value) and "s3cret" not in str(caught.value)


@pytest.mark.postgres
def test_the_server_is_postgresql_15_or_later(postgres_server: PostgresServer) -> None:
    import psycopg  # the servekit[postgres] extra: not needed by the tests above the marker

    with psycopg.connect(postgres_server.url()) as conn:
        assert conn.info.server_version >= 150000


@pytest.mark.postgres
def test_text_sorts_by_bytes_as_on_sqlite_in_a_database_of_another_locale(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    import psycopg

    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:  # en-US sorts "a" before "B"
        admin.execute("CREATE DATABASE t_en_us TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'")
    try:
        for url in (None, postgres_server.url("t_en_us")):
            with StateDB.open(tmp_path, database_url=url) as db:
                for name in ("a-alarm", "B-alarm", "C-alarm"):
                    db.alarms.put(name, "ns", "m", {"AlarmName": name})
                assert [a.name for a in db.alarms.all()] == ["B-alarm", "C-alarm", "a-alarm"]  # bytes: B < C < a
    finally:
        with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
            admin.execute("DROP DATABASE t_en_us WITH (FORCE)")
