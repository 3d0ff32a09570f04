"""A real PostgreSQL server for the tests marked ``postgres``: Debian's binaries (``initdb``, ``pg_ctl``), a data
directory in a fresh temporary directory, listening on 127.0.0.1 at a free port with trust authentication, started
once per session. PostgreSQL refuses to run as root, so under root (CI) the server runs as the ``postgres`` user
(``runuser``). Each test gets a database of its own (:func:`postgres_url`).

Without the binaries or psycopg the tests skip; ``SERVEKIT_REQUIRE_POSTGRES=1`` (``make test-postgres``) makes
that a failure instead."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REQUIRE_ENV = "SERVEKIT_REQUIRE_POSTGRES"


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    base: Path  # data directory, socket and log

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def log(self) -> str:
        path = self.base / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _unavailable(why: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"PostgreSQL is required ({REQUIRE_ENV}=1) but {why}")
    pytest.skip(f"PostgreSQL tests need a server: {why}")


def _bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    try:
        import psycopg  # noqa: F401  # the driver servekit[postgres] installs
    except ImportError:
        _unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    bindir = _bindir()
    if bindir is None:
        _unavailable("no initdb was found (apt-get install postgresql)")
    assert bindir is not None
    as_root = os.geteuid() == 0
    prefix: list[str] = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root and there is no postgres user to run the server as")
    base = Path(tempfile.mkdtemp(prefix="servekit-pg-"))  # not under pytest's 0700 tmp: the postgres user reads it
    if as_root:
        os.chown(base, account.pw_uid, account.pw_gid)
    data = base / "data"
    user = "postgres" if as_root else pwd.getpwuid(os.geteuid()).pw_name
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", user, "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
    )
    server: PostgresServer | None = None
    for _ in range(3):  # a free port may be taken between choosing it and binding it: choose again
        port = _free_port()
        options = f"-k {base} -p {port} -h 127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=200"
        started = subprocess.run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(base / "server.log"),
                "-w",
                "start",
            ],
            capture_output=True,
        )
        if started.returncode == 0:
            server = PostgresServer("127.0.0.1", port, user, base)
            break
    if server is None:
        log = (base / "server.log").read_text(errors="replace") if (base / "server.log").exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start:\n{log}")
    try:
        yield server
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], check=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a new, empty database on the session's server (dropped after the test)."""
    import psycopg

    name = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8'")
    try:
        yield postgres_server.url(name)
    finally:
        with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
