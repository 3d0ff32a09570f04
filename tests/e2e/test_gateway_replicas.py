"""Gateway replicas end to end: one leader (``servekit up``) and two ``servekit up --role gateway`` processes on
the same home, boto3 clients against each. Control calls through a replica reach the leader; a weight change made
through one replica is routed by the other within a bounded poll; a replica killed leaves the others serving;
CloudWatch on the leader counts the invocations of every process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import botocore.exceptions
import botocore.session
import pytest

from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[UpProcess, UpProcess, UpProcess]]:
    home = tmp_path / "home"
    leader = UpProcess(home, "--metrics-resolution-s", "2")
    replicas = [UpProcess(home, "--role", "gateway") for _ in range(2)]
    started: list[UpProcess] = []
    try:
        for p in (leader, *replicas):
            p.start()
            started.append(p)
        yield leader, replicas[0], replicas[1]
    finally:
        for p in reversed(started):
            p.stop()


def invoke(rt: Any, x: float) -> tuple[str, list[float]]:
    r = rt.invoke_endpoint(EndpointName="ep", Body=json.dumps([x]), ContentType="application/json")
    return r["InvokedProductionVariant"], json.loads(r["Body"].read())["out"]


def counted(cw: Any, start: datetime) -> float:
    """Invocations of both variants, as the leader's CloudWatch GetMetricData answers."""
    queries = [
        {
            "Id": f"v{v.lower()}",
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/SageMaker",
                    "MetricName": "Invocations",
                    "Dimensions": [{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": v}],
                },
                "Period": 3600,
                "Stat": "Sum",
            },
        }
        for v in ("A", "B")
    ]
    end = datetime.now(UTC) + timedelta(minutes=5)
    got = cw.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=end)
    return sum(sum(r["Values"]) for r in got["MetricDataResults"])


def poll(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)  # polling other processes' state
    raise AssertionError(f"not within {timeout_s}s: {what}")


def test_replicas_share_routes_weights_and_metrics(
    cluster: tuple[UpProcess, UpProcess, UpProcess], tmp_path: Path
) -> None:
    leader, r1, r2 = cluster
    start = datetime.now(UTC) - timedelta(minutes=5)
    sm1 = r1.sm()  # every control call goes through a replica: forwarded to the leader
    for name, factor in (("ma", 2.0), ("mb", 3.0)):
        sm1.create_model(
            ModelName=name,
            PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path, name, factor))},
        )
    sm1.create_endpoint_config(
        EndpointConfigName="cfg",
        ProductionVariants=[
            {
                "VariantName": v,
                "ModelName": m,
                "InitialInstanceCount": 1,
                "InstanceType": "ml.t2.medium",
                "InitialVariantWeight": w,
            }
            for v, m, w in (("A", "ma", 1.0), ("B", "mb", 0.0))
        ],
    )
    sm1.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    r2.sm().get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    assert leader.sm().describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService"

    clients = {"leader": leader.rt(), "r1": r1.rt(), "r2": r2.rt()}
    calls = 0
    # the replicas learn the endpoint's routes from the state database: poll until each one routes it
    for name in ("r1", "r2"):
        poll(lambda name=name: _serves(clients[name]), f"{name} routes ep")
        calls += 1
    for rt in clients.values():
        for i in range(5):
            assert invoke(rt, float(i)) == ("A", [2.0 * i])
            calls += 1

    # weights changed through one replica are routed by the other (and by the leader)
    sm1.update_endpoint_weights_and_capacities(
        EndpointName="ep",
        DesiredWeightsAndCapacities=[
            {"VariantName": "A", "DesiredWeight": 0.0},
            {"VariantName": "B", "DesiredWeight": 1.0},
        ],
    )
    sm1.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    for rt in (clients["r2"], clients["leader"]):
        seen: list[str] = []

        def routes_b(rt: Any = rt, seen: list[str] = seen) -> bool:
            seen.append(invoke(rt, 1.0)[0])
            return seen[-5:] == ["B"] * 5

        poll(routes_b, "the weight change reaches the other gateway", 30.0)
        calls += len(seen)
    assert [invoke(clients["r2"], 1.0) for _ in range(20)] == [("B", [3.0])] * 20  # A has weight 0: never chosen
    calls += 20

    # every process's invocations reach the leader's CloudWatch (each flushes its finished 2 s buckets)
    cw = leader.client("cloudwatch")
    poll(lambda: counted(cw, start) == calls, f"the leader's CloudWatch counts {calls} invocations")

    # a replica killed: the leader and the other replica keep serving
    r1.kill()
    for rt in (clients["r2"], clients["leader"]):
        for _ in range(5):
            assert invoke(rt, 2.0) == ("B", [6.0])
            calls += 1
    poll(lambda: counted(cw, start) == calls, f"the leader's CloudWatch counts {calls} invocations after the kill")

    # the endpoint deleted through the replica leaves its routes
    r2.sm().delete_endpoint(EndpointName="ep")

    def gone() -> bool:
        try:
            invoke(clients["r2"], 1.0)
        except botocore.exceptions.ClientError as exc:
            return bool(exc.response["Error"]["Code"] == "ValidationError")
        return False

    poll(gone, "the deleted endpoint leaves the replica's routes")


def _serves(rt: Any) -> bool:
    try:
        return invoke(rt, 0.0) == ("A", [0.0])
    except botocore.exceptions.ClientError:
        return False


@pytest.mark.slow  # 10 s on the 2-core machine (make test-slow)
def test_replica_checks_signatures_and_reports_an_unreachable_leader(tmp_path: Path) -> None:
    home = tmp_path / "home"
    leader = UpProcess(home)
    leader.start()
    replica = UpProcess(home, "--role", "gateway")
    try:
        replica.start()
        bad = botocore.session.get_session().create_client(
            "sagemaker-runtime",
            endpoint_url=replica.url,
            region_name="us-east-1",
            aws_access_key_id="AKIANOTAKEY000000000",
            aws_secret_access_key="wrong",
        )
        with pytest.raises(botocore.exceptions.ClientError) as err:
            bad.invoke_endpoint(EndpointName="ep", Body=b"[1]", ContentType="application/json")
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        # an unknown endpoint: the replica's own answer, in the runtime API's terms
        with pytest.raises(botocore.exceptions.ClientError) as err:
            replica.rt().invoke_endpoint(EndpointName="nope", Body=b"[1]", ContentType="application/json")
        assert err.value.response["Error"]["Code"] == "ValidationError"
        assert replica.sm().list_endpoints()["Endpoints"] == []  # forwarded
        leader.stop()
        sm = replica.client("sagemaker")
        with pytest.raises(botocore.exceptions.ClientError) as err:
            sm.list_endpoints()
        assert err.value.response["Error"]["Code"] == "ServiceUnavailable"
        assert "leader" in err.value.response["Error"]["Message"]
    finally:
        replica.stop()
        leader.stop()


def test_gateway_role_needs_a_leader_on_its_home(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", "up", "--role", "gateway", "--home", str(tmp_path / "h")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "no leader has run on the home" in out.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", "up", "--role", "follower", "--home", str(tmp_path / "h")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--role must be leader or gateway" in bad.stderr


def test_a_replica_follows_a_restarted_leader(tmp_path: Path) -> None:
    """The leader restarts (its instances are replaced by new ones on new ports): the replica drops the old routes,
    learns the new ones, and forwards to the leader again, without being restarted itself."""
    home = tmp_path / "home"
    leader = UpProcess(home)
    leader.start()
    replica = UpProcess(home, "--role", "gateway")
    try:
        replica.start()
        sm = replica.sm()
        sm.create_model(
            ModelName="ma",
            PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path, "ma", 2.0))},
        )
        sm.create_endpoint_config(
            EndpointConfigName="cfg",
            ProductionVariants=[
                {"VariantName": "A", "ModelName": "ma", "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
            ],
        )
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
        rt = replica.rt()
        poll(lambda: _serves(rt), "the replica routes ep")

        leader.stop()
        leader.start()  # same home and port: recovers ep on a new instance
        poll(lambda: _serves(rt), "the replica routes ep to the restarted leader's instance")
        assert [invoke(rt, 3.0) for _ in range(5)] == [("A", [6.0])] * 5
        assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService"  # forwarded again
    finally:
        replica.stop()
        leader.stop()
