"""Serverless endpoints (a variant with ServerlessConfig) on a real ``servekit up`` through boto3 (issue 29): no
process while idle; the first request starts one and is answered once it serves (a cold start); requests past
MaxConcurrency are refused at once with ThrottlingException (429, Retry-After), not queued; after
``--serverless-idle-s`` without traffic the instance stops, and the next request cold-starts again. Configs
SageMaker refuses are refused with its reasons."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import botocore.config
import botocore.exceptions
import pytest

from servekit.aws import client
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
HANDLER = """
import json, os, time

def model_fn(model_dir):
    return 3.0

def input_fn(body, content_type):
    return json.loads(body)

def predict_fn(data, factor):
    gate = data.get("wait_for")
    if gate:  # a slow request: says it started, then is held until the test lets it go
        open(gate + ".started", "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)
    return {"out": data["x"] * factor, "pid": os.getpid()}

def output_fn(prediction, accept):
    return json.dumps(prediction), "application/json"
"""


def poll(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"still {last!r} after {timeout_s}s")


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UpProcess, Path]]:
    tmp = tmp_path_factory.mktemp("serverless")
    plane = UpProcess(tmp / "home", "--serverless-idle-s", "2")
    plane.start()
    try:
        code = tmp / "triple" / "1" / "code"
        code.mkdir(parents=True)
        (code / "inference.py").write_text(textwrap.dedent(HANDLER))
        sm = plane.sm()
        sm.create_model(ModelName="triple", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp / "triple")})
        yield plane, tmp
    finally:
        plane.stop()


def instances(up: UpProcess, endpoint: str) -> int:
    described = up.sm().describe_endpoint(EndpointName=endpoint)
    return int(described["ProductionVariants"][0]["CurrentInstanceCount"])


def answer(up: UpProcess, endpoint: str, body: dict[str, Any], rt: Any = None) -> dict[str, Any]:
    out = (rt or up.rt()).invoke_endpoint(EndpointName=endpoint, Body=json.dumps(body), ContentType="application/json")
    return dict(json.loads(out["Body"].read()))


def invoke(up: UpProcess, endpoint: str, body: dict[str, Any], rt: Any = None) -> float:
    return float(answer(up, endpoint, body, rt)["out"])


def test_cold_start_serve_throttle_and_scale_to_zero(up: tuple[UpProcess, Path]) -> None:
    plane, tmp = up
    sm = plane.sm()
    serverless = {"VariantName": "AllTraffic", "ModelName": "triple"}
    serverless["ServerlessConfig"] = {"MemorySizeInMB": 1024, "MaxConcurrency": 1}  # type: ignore[assignment]
    sm.create_endpoint_config(EndpointConfigName="sl", ProductionVariants=[serverless])
    sm.create_endpoint(EndpointName="sl", EndpointConfigName="sl")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="sl", WaiterConfig=FAST)
    variant = sm.describe_endpoint(EndpointName="sl")["ProductionVariants"][0]
    assert variant["CurrentServerlessConfig"] == {"MemorySizeInMB": 1024, "MaxConcurrency": 1}
    assert variant["CurrentInstanceCount"] == 0  # InService with no process at all

    cold = answer(plane, "sl", {"x": 2.0})  # the cold start: answered once the instance serves
    assert cold["out"] == 6.0
    assert instances(plane, "sl") == 1
    warm = answer(plane, "sl", {"x": 3.0})
    assert (warm["out"], warm["pid"]) == (9.0, cold["pid"])  # warm now: the process the cold start made answers

    # a slow request fills MaxConcurrency; another is refused at once, not queued, and not retried by servekit
    gate = tmp / "gate"
    answers: list[float] = []
    slow = threading.Thread(target=lambda: answers.append(invoke(plane, "sl", {"x": 1.0, "wait_for": str(gate)})))
    slow.start()
    poll(lambda: (tmp / "gate.started").exists(), bool)  # the slow one is in the model
    once = client(
        plane.home, "sagemaker-runtime", plane.url, config=botocore.config.Config(retries={"total_max_attempts": 1})
    )
    began = time.perf_counter()
    with pytest.raises(botocore.exceptions.ClientError) as throttled:
        invoke(plane, "sl", {"x": 1.0}, rt=once)
    assert time.perf_counter() - began < 5  # refused at once
    refused = throttled.value.response
    assert refused["Error"]["Code"] == "ThrottlingException"
    assert refused["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert refused["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "1"
    assert "MaxConcurrency of 1" in refused["Error"]["Message"]
    gate.write_text("go")
    slow.join(60)
    assert answers == [3.0]
    assert invoke(plane, "sl", {"x": 1.0}, rt=once) == 3.0  # room again

    # idle for --serverless-idle-s: the instance stops; the next request starts one again
    poll(lambda: instances(plane, "sl"), lambda n: n == 0, timeout_s=60)
    assert invoke(plane, "sl", {"x": 5.0}) == 15.0
    assert instances(plane, "sl") == 1


def test_serverless_configs_sagemaker_refuses(up: tuple[UpProcess, Path]) -> None:
    plane, _ = up
    sm = plane.sm()

    def refused(variant: dict[str, Any]) -> str:
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            sm.create_endpoint_config(EndpointConfigName="bad", ProductionVariants=[variant])
        assert exc.value.response["Error"]["Code"] == "ValidationException"
        return str(exc.value.response["Error"]["Message"])

    base = {"VariantName": "A", "ModelName": "triple"}
    assert "MemorySizeInMB must be one of 1024" in refused(
        {**base, "ServerlessConfig": {"MemorySizeInMB": 1500, "MaxConcurrency": 2}}
    )
    assert "takes no InstanceType" in refused(
        {**base, "InstanceType": "ml.m5.large", "ServerlessConfig": {"MemorySizeInMB": 2048, "MaxConcurrency": 2}}
    )
    assert "must not exceed MaxConcurrency" in refused(
        {**base, "ServerlessConfig": {"MemorySizeInMB": 2048, "MaxConcurrency": 2, "ProvisionedConcurrency": 3}}
    )


def test_provisioned_concurrency_keeps_instances_warm(up: tuple[UpProcess, Path]) -> None:
    plane, _ = up
    sm = plane.sm()
    config = {"MemorySizeInMB": 2048, "MaxConcurrency": 4, "ProvisionedConcurrency": 1}
    variant = {"VariantName": "AllTraffic", "ModelName": "triple", "ServerlessConfig": config}
    sm.create_endpoint_config(EndpointConfigName="warm", ProductionVariants=[variant])
    sm.create_endpoint(EndpointName="warm", EndpointConfigName="warm")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="warm", WaiterConfig=FAST)
    assert instances(plane, "warm") == 1  # provisioned: started with the endpoint
    assert invoke(plane, "warm", {"x": 1.0}) == 3.0
    time.sleep(3)  # past --serverless-idle-s (2 s): a provisioned instance is kept
    assert instances(plane, "warm") == 1
    assert sm.describe_endpoint(EndpointName="warm")["ProductionVariants"][0]["CurrentServerlessConfig"] == config
