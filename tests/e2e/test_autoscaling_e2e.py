"""Autoscaling end to end: a real `servekit up` with one-second metrics (time compressed 60x), a real endpoint of
`servekit serve` instances, and boto3's `application-autoscaling`, `sagemaker` and `sagemaker-runtime` clients.

A load ramp scales the variant out (the activity is listed and a new instance serves requests); once the load
falls, it scales back in, and no request of the load that keeps running through the scale-in fails. Every wait is
a poll for a condition with a deadline."""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # make test-slow: over 20 s in all
RID = "endpoint/auto/variant/AllTraffic"
DIM = "sagemaker:variant:DesiredInstanceCount"
KEY = {"ServiceNamespace": "sagemaker", "ResourceId": RID, "ScalableDimension": DIM}


def boto(up: UpProcess, service: str) -> Any:
    key = Credentials.load(up.home).first("admin")
    return boto3.session.Session().client(
        service, endpoint_url=up.url, region_name="us-east-1",
        aws_access_key_id=key.access_key_id, aws_secret_access_key=key.secret_access_key,
        config=Config(retries={"total_max_attempts": 1}, read_timeout=30),  # a failure is counted, never retried
    )  # fmt: skip


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, up: UpProcess) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)  # polling another process's state
    raise AssertionError(f"{what} not within {timeout_s} s; servekit up's log:\n{up.log.read_text()[-4000:]}")


class Load:
    """InvokeEndpoint from one thread, ``pause_s`` between requests (0: as fast as it goes); counts every outcome."""

    def __init__(self, up: UpProcess, pause_s: float) -> None:
        self.rt = boto(up, "sagemaker-runtime")
        self.pause_s = pause_s
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                r = self.rt.invoke_endpoint(EndpointName="auto", Body=b"[2.0]", ContentType="application/json")
                assert json.loads(r["Body"].read())["out"] == [6.0]
                self.ok += 1
            except Exception as exc:  # every kind of failure is what this test counts
                self.failures.append(f"{type(exc).__name__}: {exc}")
            if self.pause_s:
                self._stop.wait(self.pause_s)  # pacing the load, not waiting for anything

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def instance_ports(home: Path) -> dict[str, int]:
    """Live instances (pid files of `servekit serve` processes) and their ports, read from their command lines."""
    out = {}
    for pid_file in (home / "instances").glob("*.pid"):
        try:
            cmdline = Path(f"/proc/{pid_file.read_text().strip()}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        args = [a.decode() for a in cmdline]
        if "--rest_api_port" in args:
            out[pid_file.stem] = int(args[args.index("--rest_api_port") + 1])
    return out


def requests_served(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/monitoring/prometheus/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(m) for m in re.findall(r'^:tensorflow:serving:request_count\{[^}]*status="OK"[^}]*\} (\S+)$',
                                            text, re.MULTILINE))  # fmt: skip


@pytest.fixture
def fast_up(tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1")
    u.start()
    try:
        yield u
    finally:
        u.stop()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads instance ports from /proc")
@pytest.mark.timeout(240)
def test_load_scales_out_then_in_without_failing_a_request(fast_up: UpProcess, tmp_path: Path) -> None:
    up = fast_up
    sm, aas = boto(up, "sagemaker"), boto(up, "application-autoscaling")
    model = str(scaling_model(tmp_path, "triple", 3.0))
    sm.create_model(ModelName="auto-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": model})
    sm.create_endpoint_config(EndpointConfigName="auto-c", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "auto-m", "InitialInstanceCount": 1,
        "InstanceType": "ml.t2.medium", "InitialVariantWeight": 1.0,
    }])  # fmt: skip
    sm.create_endpoint(EndpointName="auto", EndpointConfigName="auto-c")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="auto", WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    first = set(instance_ports(up.home))
    assert len(first) == 1

    # a variant hosting does not have is refused, as AWS does (it was accepted, then dropped in the background)
    for missing in ("endpoint/does-not-exist/variant/A", KEY["ResourceId"].rsplit("/", 1)[0] + "/no-such-variant"):
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            aas.register_scalable_target(MinCapacity=1, MaxCapacity=3, **{**KEY, "ResourceId": missing})
        assert refused.value.response["Error"]["Code"] == "ValidationException"
        assert f"Resource {missing} does not exist" in refused.value.response["Error"]["Message"]
    assert aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []
    aas.register_scalable_target(MinCapacity=1, MaxCapacity=3, **KEY)
    aas.put_scaling_policy(
        PolicyName="ipi", PolicyType="TargetTrackingScaling", **KEY,
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 600.0,  # invocations per minute per instance: 10 a second
            "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
            "ScaleOutCooldown": 5, "ScaleInCooldown": 5,
        },
    )  # fmt: skip

    def variant() -> dict[str, Any]:
        [v] = sm.describe_endpoint(EndpointName="auto")["ProductionVariants"]
        return dict(v)

    def activities() -> list[dict[str, Any]]:
        return list(aas.describe_scaling_activities(ServiceNamespace="sagemaker", ResourceId=RID)["ScalingActivities"])

    # ---- overload: far over 10 requests a second on one instance ----
    with Load(up, 0.0) as heavy, Load(up, 0.0) as heavy2:
        wait_for("scale-out to 3", lambda: variant()["CurrentInstanceCount"] == 3, 90, up)
        out = wait_for(
            "a successful scale-out activity",
            lambda: [a for a in activities() if a["StatusCode"] == "Successful"],
            30, up,
        )  # fmt: skip
        new = set(instance_ports(up.home)) - first
        assert len(new) == 2, new
        ports = instance_ports(up.home)
        wait_for("the new instances to serve", lambda: all(requests_served(ports[i]) > 0 for i in new), 30, up)
    assert heavy.ok + heavy2.ok > 0
    assert heavy.failures == heavy2.failures == [], (heavy.failures + heavy2.failures)[:5]
    scale_out = out[-1]
    assert scale_out["Description"] == "Setting desired instance count to 3."
    assert re.fullmatch(
        rf"monitor alarm TargetTracking-{RID}-AlarmHigh-[0-9a-f-]{{36}} in state ALARM triggered policy ipi",
        scale_out["Cause"],
    ), scale_out["Cause"]
    assert scale_out["StatusMessage"] == (
        "Successfully set desired instance count to 3. Change successfully fulfilled by sagemaker."
    )

    # ---- the load falls to a trickle (about 4 a second) that keeps running through the scale-in ----
    with Load(up, 0.25) as light:
        wait_for("scale-in", lambda: variant()["DesiredInstanceCount"] < 3, 90, up)
        wait_for("the scale-in to finish", lambda: sm.describe_endpoint(EndpointName="auto")["EndpointStatus"]
                 == "InService" and variant()["CurrentInstanceCount"] < 3, 60, up)  # fmt: skip
        served_before = light.ok
        wait_for("requests after the scale-in", lambda: light.ok > served_before + 5, 30, up)
    assert light.failures == [], light.failures[:5]
    assert light.ok > 20
    scale_in = activities()[0]
    assert re.fullmatch(r"Setting desired instance count to [12]\.", scale_in["Description"]), scale_in
    assert "-AlarmLow-" in scale_in["Cause"]
    assert len(instance_ports(up.home)) == variant()["CurrentInstanceCount"]  # the removed ones were stopped


@pytest.mark.timeout(240)
def test_an_idle_variant_publishes_zeros_lists_its_alarms_and_scales_in(fast_up: UpProcess, tmp_path: Path) -> None:
    """Issue 30, item 6: with no traffic at all, InvocationsPerInstance has datapoints of 0 (it had none, so the
    low alarm stayed INSUFFICIENT_DATA and the variant stayed at 2) and DescribeAlarms lists the policy's alarms."""
    up = fast_up
    sm, aas, cw = boto(up, "sagemaker"), boto(up, "application-autoscaling"), boto(up, "cloudwatch")
    sm.create_model(ModelName="idle-m", PrimaryContainer={
        "Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path, "double", 2.0)),
    })  # fmt: skip
    sm.create_endpoint_config(EndpointConfigName="idle-c", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "idle-m", "InitialInstanceCount": 2, "InstanceType": "ml.t2.medium",
    }])  # fmt: skip
    sm.create_endpoint(EndpointName="idle", EndpointConfigName="idle-c")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="idle", WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    rid = "endpoint/idle/variant/AllTraffic"
    aas.register_scalable_target(MinCapacity=1, MaxCapacity=2, **{**KEY, "ResourceId": rid})
    aas.put_scaling_policy(
        PolicyName="ipi", PolicyType="TargetTrackingScaling", **{**KEY, "ResourceId": rid},
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 600.0,
            "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
        },
    )  # fmt: skip
    prefix = f"TargetTracking-{rid}-Alarm"
    listed = wait_for(
        "the target-tracking alarms", lambda: cw.describe_alarms(AlarmNamePrefix=prefix)["MetricAlarms"], 30, up
    )
    assert [a["AlarmName"].removeprefix(prefix)[:4] for a in listed] == ["High", "Low-"]

    def variant() -> dict[str, Any]:
        [v] = sm.describe_endpoint(EndpointName="idle")["ProductionVariants"]
        return dict(v)

    wait_for("the idle variant to scale in", lambda: variant()["DesiredInstanceCount"] == 1, 120, up)
    now = time.time()
    points = cw.get_metric_statistics(
        Namespace="AWS/SageMaker", MetricName="InvocationsPerInstance", Period=1, Statistics=["Sum"],
        Dimensions=[{"Name": "EndpointName", "Value": "idle"}, {"Name": "VariantName", "Value": "AllTraffic"}],
        StartTime=now - 20, EndTime=now,
    )["Datapoints"]  # fmt: skip
    assert len(points) >= 10 and {p["Sum"] for p in points} == {0.0}, points
    activity = aas.describe_scaling_activities(ServiceNamespace="sagemaker", ResourceId=rid)["ScalingActivities"][0]
    assert f"{prefix}Low-" in activity["Cause"]
