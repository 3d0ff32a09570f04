"""The hosting control plane end to end: a real `servekit up`, real `servekit serve` instances, real boto3 clients
and botocore's own waiters."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import botocore.exceptions
import botocore.session
import pytest
from scipy.stats import binomtest

from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}  # the waiters' own acceptors, polled every second


def deploy(sm: Any, tmp: Path, endpoint: str, variants: list[tuple[str, float, float]], config: str = "") -> None:
    """Models, one endpoint config with a variant per (name, factor, weight), and the endpoint (not waited for)."""
    specs = []
    for name, factor, weight in variants:
        model = f"{endpoint}-{name}-m"
        sm.create_model(
            ModelName=model,
            PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp, model, factor))},
        )
        specs.append(
            {
                "VariantName": name,
                "ModelName": model,
                "InitialInstanceCount": 1,
                "InstanceType": "ml.t2.medium",
                "InitialVariantWeight": weight,
            }
        )
    sm.create_endpoint_config(EndpointConfigName=config or f"{endpoint}-cfg", ProductionVariants=specs)
    sm.create_endpoint(EndpointName=endpoint, EndpointConfigName=config or f"{endpoint}-cfg")


def invoke(rt: Any, endpoint: str, x: float = 1.0, **kw: Any) -> tuple[str, float]:
    r = rt.invoke_endpoint(EndpointName=endpoint, Body=json.dumps([x]), ContentType="application/json", **kw)
    return r["InvokedProductionVariant"], json.loads(r["Body"].read())["out"][0]


def test_lifecycle_weights_target_variant_update_and_delete(up: UpProcess, tmp_path: Path) -> None:
    sm, rt = up.sm(), up.rt()
    deploy(sm, tmp_path, "ep", [("A", 2.0, 70.0), ("B", 3.0, 30.0)])
    assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "Creating"
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    desc = sm.describe_endpoint(EndpointName="ep")
    assert {v["VariantName"]: v["CurrentInstanceCount"] for v in desc["ProductionVariants"]} == {"A": 1, "B": 1}

    n = 2000
    seen = [invoke(rt, "ep") for _ in range(n)]
    assert {(v, out) for v, out in seen} == {("A", 2.0), ("B", 3.0)}
    hits = sum(v == "A" for v, _ in seen)
    assert binomtest(hits, n, 0.7).pvalue > 1e-4, hits
    assert {invoke(rt, "ep", TargetVariant="B")[0] for _ in range(10)} == {"B"}

    sm.update_endpoint_weights_and_capacities(
        EndpointName="ep", DesiredWeightsAndCapacities=[{"VariantName": "A", "DesiredWeight": 0.0}]
    )
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    assert {invoke(rt, "ep")[0] for _ in range(30)} == {"B"}

    # Blue/green to a new config under steady load: nothing fails while the fleets change.
    deploy_config = [("C", 5.0, 1.0)]
    sm.create_model(
        ModelName="ep-C-m",
        PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path, "ep-C-m", 5.0))},
    )
    sm.create_endpoint_config(
        EndpointConfigName="ep-cfg2",
        ProductionVariants=[
            {"VariantName": "C", "ModelName": "ep-C-m", "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
        ],
    )
    assert deploy_config
    failures: list[str] = []
    answers: list[tuple[str, float]] = []
    stop = threading.Event()

    def load() -> None:
        client = up.rt()
        while not stop.is_set():
            try:
                answers.append(invoke(client, "ep"))
            except Exception as exc:  # counted, not raised: the assertion below says how many
                failures.append(repr(exc))

    worker = threading.Thread(target=load)
    worker.start()
    try:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="ep-cfg2")
        assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "Updating"
        sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
        while not any(v == "C" for v, _ in answers[-5:]):
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(30)
    assert failures == []
    assert {v for v, _ in answers} <= {"B", "C"} and answers[-1] == ("C", 5.0)
    assert sm.describe_endpoint(EndpointName="ep")["EndpointConfigName"] == "ep-cfg2"

    sm.delete_endpoint(EndpointName="ep")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="ep", WaiterConfig=FAST)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        sm.describe_endpoint(EndpointName="ep")
    assert err.value.response["Error"]["Code"] == "ValidationException"
    assert "Could not find endpoint" in err.value.response["Error"]["Message"]


def test_a_model_that_cannot_load_fails_the_endpoint_with_its_reason(up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    sm.create_model(
        ModelName="bad",
        PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path, "bad", 1, broken=True))},
    )
    sm.create_endpoint_config(
        EndpointConfigName="bad-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "bad", "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
        ],
    )
    sm.create_endpoint(EndpointName="bad-ep", EndpointConfigName="bad-cfg")
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="bad-ep", WaiterConfig=FAST)
    desc = sm.describe_endpoint(EndpointName="bad-ep")
    assert desc["EndpointStatus"] == "Failed"
    assert "weights file is corrupt" in desc["FailureReason"]


@pytest.mark.slow  # 13 s on the 2-core machine (make test-slow)
def test_errors_as_boto3_sees_them(up: UpProcess, tmp_path: Path) -> None:
    sm, rt = up.sm(), up.rt()
    with pytest.raises(botocore.exceptions.ClientError) as err:
        sm.create_endpoint(EndpointName="bad name!", EndpointConfigName="x")
    assert err.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(botocore.exceptions.ClientError) as err:
        sm.create_endpoint(EndpointName="nocfg", EndpointConfigName="missing")
    assert "Could not find endpoint configuration" in err.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as err:
        invoke(rt, "no-such-endpoint")
    assert err.value.response["Error"]["Code"] == "ValidationError"
    with pytest.raises(botocore.exceptions.ClientError) as err:
        invoke(rt, "no-such-endpoint", TargetModel="a.tar.gz")
    assert err.value.response["Error"]["Code"] == "ValidationError"

    # A model error is ModelError (424) with the instance's own status and message.
    deploy(sm, tmp_path, "strict", [("A", 2.0, 1.0)])
    sm.get_waiter("endpoint_in_service").wait(EndpointName="strict", WaiterConfig=FAST)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        rt.invoke_endpoint(EndpointName="strict", Body=b"not json", ContentType="application/json")
    assert err.value.response["Error"]["Code"] == "ModelError"
    assert err.value.response["OriginalStatusCode"] in (400, 500)

    # Listing filters and pages as the real API does.
    deploy(sm, tmp_path, "strict2", [("A", 2.0, 1.0)])
    page = sm.list_endpoints(NameContains="strict", MaxResults=1, SortBy="Name", SortOrder="Ascending")
    assert [e["EndpointName"] for e in page["Endpoints"]] == ["strict"] and page["NextToken"]
    rest = sm.list_endpoints(
        NameContains="strict", MaxResults=1, SortBy="Name", SortOrder="Ascending", NextToken=page["NextToken"]
    )
    assert [e["EndpointName"] for e in rest["Endpoints"]] == ["strict2"] and "NextToken" not in rest
    in_service = sm.list_endpoints(StatusEquals="InService")["Endpoints"]
    assert "strict" in {e["EndpointName"] for e in in_service}
    assert {e["EndpointStatus"] for e in in_service} == {"InService"}

    # No variant may take traffic: ServiceUnavailable (503), which boto3 retries and then raises.
    sm.update_endpoint_weights_and_capacities(
        EndpointName="strict", DesiredWeightsAndCapacities=[{"VariantName": "A", "DesiredWeight": 0.0}]
    )
    sm.get_waiter("endpoint_in_service").wait(EndpointName="strict", WaiterConfig=FAST)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        invoke(rt, "strict")
    assert err.value.response["Error"]["Code"] == "ServiceUnavailable"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503

    # A wrong secret is refused as AWS does.
    bad = botocore.session.get_session().create_client(
        "sagemaker",
        endpoint_url=up.url,
        region_name="us-east-1",
        aws_access_key_id="AKIAWRONG",
        aws_secret_access_key="nope",
    )
    with pytest.raises(botocore.exceptions.ClientError) as err:
        bad.list_endpoints()
    assert err.value.response["Error"]["Code"] in ("UnrecognizedClientException", "InvalidSignatureException")


def test_an_instance_killed_is_replaced_and_a_control_plane_restart_brings_endpoints_back(
    up: UpProcess, tmp_path: Path
) -> None:
    sm, rt = up.sm(), up.rt()
    deploy(sm, tmp_path, "keep", [("A", 2.0, 1.0)])
    sm.get_waiter("endpoint_in_service").wait(EndpointName="keep", WaiterConfig=FAST)
    assert invoke(rt, "keep") == ("A", 2.0)

    pids = [int(p.read_text()) for p in (up.home / "instances").glob("*.pid")]
    assert len(pids) == 1
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the supervisor replaces it; the endpoint never leaves InService
        assert sm.describe_endpoint(EndpointName="keep")["EndpointStatus"] == "InService"
        now = [int(p.read_text()) for p in (up.home / "instances").glob("*.pid")]
        if now and now != pids:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the killed instance was not replaced")
    while time.monotonic() < deadline:  # the replacement takes traffic once healthy (its pid file comes first)
        (variant,) = sm.describe_endpoint(EndpointName="keep")["ProductionVariants"]
        if variant["CurrentInstanceCount"] == 1:
            break
        time.sleep(0.2)
    assert invoke(rt, "keep") == ("A", 2.0)

    up.kill()  # SIGKILL: no chance to stop anything
    up.start()  # returns once /ping answers: the endpoint must serve from then on
    sm, rt = up.sm(), up.rt()
    assert sm.describe_endpoint(EndpointName="keep")["EndpointStatus"] == "InService"
    assert invoke(rt, "keep") == ("A", 2.0)
