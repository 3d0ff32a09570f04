"""Data capture to servekit up's own S3 store, end to end with boto3: an endpoint config whose
``DataCaptureConfig.DestinationS3Uri`` is ``s3://<the SDK's default bucket>/capture`` (what ``DataCaptureConfig(True)``
sets) has its captured records in that bucket, in SageMaker's layout ``capture/<endpoint>/<variant>/yyyy/mm/dd/hh/``,
listed and read through S3 — the plane ships them, as SageMaker's platform does, so neither an instance without
credentials nor one of a model with ``EnableNetworkIsolation`` (no network to the plane) has to reach S3. What the
instances publish as the plane stops is shipped before it exits."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from servekit._utils import netns
from servekit.aws.names import Account
from servekit.launch.up import default_bucket
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # two endpoints, a restart of the plane: over 10 s
FAST = {"Delay": 1, "MaxAttempts": 120}
BUCKET = default_bucket(Account())
LAYOUT = r"capture/{endpoint}/AllTraffic/\d{{4}}/\d{{2}}/\d{{2}}/\d{{2}}/[^/]+\.jsonl"


def captured(s3: Any, endpoint: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The keys under the endpoint's capture prefix and the records they hold, read through S3."""
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"capture/{endpoint}/")
    keys = sorted(o["Key"] for o in listed.get("Contents", []))
    records = [
        json.loads(line)
        for key in keys
        for line in s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().splitlines()
        if line.strip()
    ]
    return keys, records


def wait_for_records(s3: Any, endpoint: str, count: int, timeout_s: float = 60.0) -> tuple[list[str], list[Any]]:
    deadline = time.monotonic() + timeout_s
    keys, records = captured(s3, endpoint)
    while len(records) < count and time.monotonic() < deadline:  # capture publishes every 5 s, then the plane ships
        time.sleep(0.2)
        keys, records = captured(s3, endpoint)
    assert len(records) == count, (keys, records)
    return keys, records


def test_capture_to_the_planes_own_bucket_is_listed_and_read_through_s3(up: UpProcess, tmp_path: Path) -> None:
    sm, rt, s3 = up.sm(), up.rt(), up.client("s3")
    model = scaling_model(tmp_path / "models", "double", 2.0)
    endpoints = {"open": False, **({"isolated": True} if netns.available() else {})}
    capture = {
        "EnableCapture": True,
        "InitialSamplingPercentage": 100,
        "DestinationS3Uri": f"s3://{BUCKET}/capture",
        "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
    }
    for name, isolated in endpoints.items():
        sm.create_model(
            ModelName=name,
            PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(model)},
            EnableNetworkIsolation=isolated,
        )
        variant = {"VariantName": "AllTraffic", "ModelName": name, "InitialInstanceCount": 1}
        sm.create_endpoint_config(
            EndpointConfigName=name,
            ProductionVariants=[{**variant, "InstanceType": "ml.m5.large"}],
            DataCaptureConfig=capture,
        )
        # the config keeps the S3 URI as given: where the instances write meanwhile is the plane's business
        assert sm.describe_endpoint_config(EndpointConfigName=name)["DataCaptureConfig"] == capture
        sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    bodies = [json.dumps([float(i), i + 0.5]) for i in range(3)]
    for name in endpoints:
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
        for body in bodies:
            got = rt.invoke_endpoint(EndpointName=name, Body=body, ContentType="application/json")
            assert json.loads(got["Body"].read()) == {"out": [2 * x for x in json.loads(body)]}

    for name in endpoints:
        keys, records = wait_for_records(s3, name, len(bodies))
        assert all(re.fullmatch(LAYOUT.format(endpoint=name), k) for k in keys), keys
        assert all(s3.head_object(Bucket=BUCKET, Key=k)["ETag"].strip('"') for k in keys)
        inputs = sorted(r["captureData"]["endpointInput"]["data"] for r in records)
        outputs = sorted(r["captureData"]["endpointOutput"]["data"] for r in records)
        assert inputs == sorted(bodies)
        assert outputs == sorted(json.dumps({"out": [2 * x for x in json.loads(b)]}) for b in bodies)
        assert {r["captureData"]["endpointInput"]["observedContentType"] for r in records} == {"application/json"}
    staging = up.home / "capture-staging"
    assert not [p for p in staging.rglob("*") if p.is_file() and not p.name.startswith(".")]  # shipped, then removed
    logs = "".join(p.read_text(errors="replace") for p in (up.home / "instances").glob("*.log"))
    assert "could not publish" not in logs and "Unable to locate credentials" not in logs

    # the plane stops before the writer's flush: the instances publish their last files as they stop, and the
    # plane ships them before it exits
    last = json.dumps([9.0, 9.5])
    rt.invoke_endpoint(EndpointName="open", Body=last, ContentType="application/json")
    up.stop()
    assert not [p for p in staging.rglob("*") if p.is_file()], sorted(staging.rglob("*"))
    up.start()
    _, records = wait_for_records(s3, "open", len(bodies) + 1, timeout_s=10.0)
    assert last in {r["captureData"]["endpointInput"]["data"] for r in records}
