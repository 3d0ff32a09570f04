"""Asynchronous inference on a real ``servekit up`` through boto3 (issue 29): InvokeEndpointAsync is answered 202
at once with where the answer will be; the answer appears under S3OutputPath (equal to what the model answers), a
failure under S3FailurePath; the endpoint refuses InvokeEndpoint; the backlog is published as
ApproximateBacklogSize; and queued requests survive a kill -9 of the plane: the restarted plane runs them."""

from __future__ import annotations

import datetime
import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
BUCKET = "sagemaker-us-east-1-000000000000"
HANDLER = """
import json, os, time

def model_fn(model_dir):
    return 3.0

def transform_fn(factor, body, content_type, accept):
    data = json.loads(body)  # a body that is not JSON: the model's error
    if isinstance(data, dict) and data.get("echo_content_type"):
        return json.dumps(content_type), "application/json"
    gate = data.get("wait_for") if isinstance(data, dict) else None
    if gate:  # held until the test lets it go
        deadline = time.monotonic() + 120
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)
        data = data["x"]
    return json.dumps([x * factor for x in data]), "application/json"
"""


def poll(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"still {last!r} after {timeout_s}s")


def deploy(up: UpProcess, tmp: Path) -> None:
    code = tmp / "triple" / "1" / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "inference.py").write_text(textwrap.dedent(HANDLER))
    sm = up.sm()
    sm.create_model(ModelName="triple", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp / "triple")})
    variant = {"VariantName": "A", "ModelName": "triple", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
    sm.create_endpoint_config(
        EndpointConfigName="async",
        ProductionVariants=[variant],
        AsyncInferenceConfig={
            "OutputConfig": {"S3OutputPath": f"s3://{BUCKET}/async/out", "S3FailurePath": f"s3://{BUCKET}/async/fail"},
            "ClientConfig": {"MaxConcurrentInvocationsPerInstance": 2},
        },
    )
    sm.create_endpoint(EndpointName="async", EndpointConfigName="async")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="async", WaiterConfig=FAST)


def read(up: UpProcess, uri: str) -> bytes | None:
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    try:
        return bytes(up.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    except botocore.exceptions.ClientError:
        return None


def submit(up: UpProcess, name: str, body: bytes) -> dict[str, Any]:
    up.client("s3").put_object(Bucket=BUCKET, Key=f"async/in/{name}", Body=body)
    answer = up.rt().invoke_endpoint_async(
        EndpointName="async", InputLocation=f"s3://{BUCKET}/async/in/{name}", ContentType="application/json"
    )
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 202
    return dict(answer)


def test_answers_and_failures_land_in_s3_and_invoke_endpoint_is_refused(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1")
    up.start()
    try:
        deploy(up, tmp_path)
        ok = submit(up, "ok.json", b"[1, 2]")
        assert ok["OutputLocation"] == f"s3://{BUCKET}/async/out/{ok['InferenceId']}.out"
        assert json.loads(poll(lambda: read(up, ok["OutputLocation"]), bool)) == [3.0, 6.0]
        bad = submit(up, "bad.json", b"not json")
        failure = poll(lambda: read(up, bad["FailureLocation"]), bool)
        assert b"Received server error (500) from model" in failure
        assert read(up, bad["OutputLocation"]) is None
        with pytest.raises(botocore.exceptions.ClientError) as sync:
            up.rt().invoke_endpoint(EndpointName="async", Body=b"[1]", ContentType="application/json")
        assert sync.value.response["Error"]["Code"] == "ValidationError"
        assert "InvokeEndpointAsync" in sync.value.response["Error"]["Message"]
        with pytest.raises(botocore.exceptions.ClientError) as missing:
            up.rt().invoke_endpoint_async(EndpointName="async", InputLocation=f"s3://{BUCKET}/async/in/nothing")
        assert "does not exist" in missing.value.response["Error"]["Message"]
        named = up.rt().invoke_endpoint_async(
            EndpointName="async", InputLocation=f"s3://{BUCKET}/async/in/ok.json", InferenceId="my-id-1"
        )
        assert named["OutputLocation"].endswith("/my-id-1.out")
        assert json.loads(poll(lambda: read(up, named["OutputLocation"]), bool)) == [3.0, 6.0]
        # no ContentType: the model gets the input object's own, as SageMaker gives it (AsyncPredictor.predict)
        typed = f"s3://{BUCKET}/async/in/typed.json"
        body = json.dumps({"echo_content_type": True}).encode()
        up.client("s3").put_object(Bucket=BUCKET, Key="async/in/typed.json", Body=body, ContentType="application/json")
        seen = up.rt().invoke_endpoint_async(EndpointName="async", InputLocation=typed)
        assert json.loads(poll(lambda: read(up, seen["OutputLocation"]), bool)) == "application/json"
        # the backlog, as Application Auto Scaling would read it
        gate = tmp_path / "gate"
        held = [submit(up, f"held-{i}.json", json.dumps({"wait_for": str(gate), "x": [i]}).encode()) for i in range(4)]
        cw = up.client("cloudwatch")

        def most_backlog() -> float:
            now = datetime.datetime.now(datetime.UTC)
            points = cw.get_metric_statistics(
                Namespace="AWS/SageMaker",
                MetricName="ApproximateBacklogSize",
                Dimensions=[{"Name": "EndpointName", "Value": "async"}],
                StartTime=now - datetime.timedelta(minutes=2),
                EndTime=now + datetime.timedelta(minutes=1),
                Period=1,
                Statistics=["Maximum"],
            )["Datapoints"]
            return max((p["Maximum"] for p in points), default=0.0)

        assert poll(most_backlog, lambda n: n >= 4) >= 4
        gate.write_text("go")
        for i, h in enumerate(held):
            assert json.loads(poll(lambda h=h: read(up, h["OutputLocation"]), bool)) == [3.0 * i]
    finally:
        up.stop()


def test_queued_requests_survive_a_kill_of_the_plane(tmp_path: Path) -> None:
    first = UpProcess(tmp_path / "home")
    first.start()
    gate = tmp_path / "gate"
    try:
        deploy(first, tmp_path)
        # two run (held in the model), three wait in the queue: MaxConcurrentInvocationsPerInstance is 2
        held = [submit(first, f"r{i}.json", json.dumps({"wait_for": str(gate), "x": [i]}).encode()) for i in range(5)]
    finally:
        first.kill()
    gate.write_text("go")
    second = UpProcess(tmp_path / "home")
    second.start()
    try:
        for i, h in enumerate(held):  # every one answered, the running ones run again
            assert json.loads(poll(lambda h=h: read(second, h["OutputLocation"]), bool)) == [3.0 * i]
    finally:
        second.stop()
