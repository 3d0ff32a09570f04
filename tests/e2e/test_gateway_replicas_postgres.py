"""Gateway replicas on one PostgreSQL database, end to end: a leader (``servekit up --database-url``) and a
``--role gateway`` replica on another home (as on another host: nothing shared but the database and the signing
keys), a real PostgreSQL server started by the tests. boto3 creates an endpoint through the leader and invokes it
through the replica, and the reverse; the state is in PostgreSQL, not in either home."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from tests.postgres_fixtures import PostgresServer, postgres_server, postgres_url  # noqa: F401

from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]
FAST = {"Delay": 1, "MaxAttempts": 120}


@pytest.fixture
def pair(postgres_url: str, tmp_path: Path) -> Iterator[tuple[UpProcess, UpProcess]]:  # noqa: F811
    leader = UpProcess(tmp_path / "leader-home", "--database-url", postgres_url)
    replica = UpProcess(tmp_path / "replica-home", "--role", "gateway", "--database-url", postgres_url)
    started: list[UpProcess] = []
    try:
        leader.start()
        started.append(leader)
        # SigV4 keys are per home: a replica on another host is given the leader's credentials.json
        replica.home.mkdir(parents=True)
        shutil.copy2(leader.home / "credentials.json", replica.home / "credentials.json")
        replica.start()
        started.append(replica)
        yield leader, replica
    finally:
        for p in reversed(started):
            p.stop()


def poll(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)  # polling other processes' state
    raise AssertionError(f"not within {timeout_s}s: {what}")


def invoke(rt: Any, endpoint: str, x: float) -> list[float]:
    r = rt.invoke_endpoint(EndpointName=endpoint, Body=json.dumps([x]), ContentType="application/json")
    return list(json.loads(r["Body"].read())["out"])


def serves(rt: Any, endpoint: str) -> bool:
    try:
        invoke(rt, endpoint, 1.0)
    except botocore.exceptions.ClientError:  # not in this process's routes yet
        return False
    return True


def deploy(sm: Any, tmp_path: Path, name: str, factor: float) -> None:
    model = scaling_model(tmp_path / "models", name, factor)
    sm.create_model(ModelName=name, PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(model)})
    sm.create_endpoint_config(
        EndpointConfigName=name,
        ProductionVariants=[
            {"VariantName": "A", "ModelName": name, "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
        ],
    )
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)


def test_a_replica_on_another_home_shares_the_leaders_state_through_postgresql(
    pair: tuple[UpProcess, UpProcess],
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    leader, replica = pair
    # created through the leader, invoked through the replica
    deploy(leader.sm(), tmp_path, "ep-one", 2.0)
    replica.sm().get_waiter("endpoint_in_service").wait(EndpointName="ep-one", WaiterConfig=FAST)
    poll(lambda: serves(replica.rt(), "ep-one"), "the replica routes ep-one")
    assert [invoke(replica.rt(), "ep-one", float(i)) for i in range(5)] == [[2.0 * i] for i in range(5)]

    # created through the replica (forwarded to the leader), invoked through the leader
    deploy(replica.sm(), tmp_path, "ep-two", 3.0)
    leader.sm().get_waiter("endpoint_in_service").wait(EndpointName="ep-two", WaiterConfig=FAST)
    assert invoke(leader.rt(), "ep-two", 4.0) == [12.0]
    listed = {e["EndpointName"] for e in replica.sm().list_endpoints()["Endpoints"]}
    assert listed == {"ep-one", "ep-two"}

    # the state is in PostgreSQL: neither home has a SQLite file, and the database holds both endpoints
    assert not (leader.home / "servekit.db").exists() and not (replica.home / "servekit.db").exists()
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT name, status FROM hosting_endpoints ORDER BY name").fetchall()
        leader_row = conn.execute("SELECT url FROM hosting_leader").fetchone()
    assert rows == [("ep-one", "InService"), ("ep-two", "InService")]
    assert leader_row == (leader.url,)


def test_a_database_that_cannot_be_opened_stops_up_with_status_2(
    postgres_server: PostgresServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    url = f"postgresql://{postgres_server.user}:s3cret@127.0.0.1:{postgres_server.port}/no_such_database"
    argv = [sys.executable, "-m", "servekit.cli.main", "up", "--home", str(tmp_path / "h"), "--database-url", url]
    for extra in ([], ["--role", "gateway"]):
        done = subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "cannot open the state database" in done.stderr and "no_such_database" in done.stderr
        assert "s3cret" not in done.stderr + done.stdout
