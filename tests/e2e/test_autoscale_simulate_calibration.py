"""Calibration of the autoscaling what-if against the real thing: a `servekit up` with one-second metrics (time
compressed 60x: one alarm period is a second), one endpoint with a target-tracking policy (10 requests a second
per instance, 1-2 instances), and a load generator playing a short curve (idle, about 20 requests a second for 8 s,
idle). The real autoscaler scales out (AlarmHigh, 3 periods) and back in (AlarmLow, 15 periods). Then
`servekit autoscale simulate --from-endpoint` replays the endpoint's own CloudWatch Invocations through the
simulator in real mode (1 s steps and periods, the same policy, the measured start-up time) and its instance count
at every step matches the one the real autoscaler had within one step (its ticks are not on the second)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.test_autoscaling_e2e import boto, wait_for
from typer.testing import CliRunner

from servekit.cli.main import app
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
RID = "endpoint/calib/variant/AllTraffic"
KEY = {
    "ServiceNamespace": "sagemaker",
    "ResourceId": RID,
    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
}


@pytest.fixture
def fast_up(tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def play(up: UpProcess, rps: float, seconds: float, threads: int = 2) -> int:
    """Open-loop InvokeEndpoint at about ``rps`` for ``seconds`` (each thread keeps its own schedule)."""
    sent = [0] * threads
    stop_at = time.monotonic() + seconds

    def run(i: int) -> None:
        rt = boto(up, "sagemaker-runtime")
        gap = threads / rps
        due = time.monotonic() + i * gap / threads
        while due < stop_at:
            delay = due - time.monotonic()
            if delay > 0:
                threading.Event().wait(delay)  # pacing an open-loop load, not synchronising
            rt.invoke_endpoint(EndpointName="calib", Body=b"[1.0]", ContentType="application/json")
            sent[i] += 1
            due += gap

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(seconds + 30)
    return sum(sent)


@pytest.mark.slow  # make test-slow
@pytest.mark.timeout(240)
def test_simulated_counts_match_the_real_autoscaler(fast_up: UpProcess, tmp_path: Path) -> None:
    up = fast_up
    sm, aas = boto(up, "sagemaker"), boto(up, "application-autoscaling")
    model = str(scaling_model(tmp_path, "calib", 2.0))
    sm.create_model(ModelName="calib-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": model})
    sm.create_endpoint_config(EndpointConfigName="calib-c", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "calib-m", "InitialInstanceCount": 1,
        "InstanceType": "ml.t2.medium", "InitialVariantWeight": 1.0,
    }])  # fmt: skip
    sm.create_endpoint(EndpointName="calib", EndpointConfigName="calib-c")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="calib", WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    aas.register_scalable_target(MinCapacity=1, MaxCapacity=2, **KEY)
    aas.put_scaling_policy(
        PolicyName="ipi", PolicyType="TargetTrackingScaling", **KEY,
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 600.0,  # per minute per instance: 10 requests a second
            "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
            "ScaleOutCooldown": 3, "ScaleInCooldown": 3,
        },
    )  # fmt: skip
    began = time.time()

    def done() -> list[dict[str, Any]]:
        acts = aas.describe_scaling_activities(ServiceNamespace="sagemaker", ResourceId=RID)["ScalingActivities"]
        ok = [a for a in acts if a["StatusCode"] == "Successful"]
        return ok if len(ok) >= 2 else []

    assert play(up, 20.0, 8.0) > 60
    activities = sorted(wait_for("a scale-out and a scale-in", done, 90, up), key=lambda a: a["StartTime"])
    assert [a["Description"] for a in activities[:2]] == [
        "Setting desired instance count to 2.", "Setting desired instance count to 1.",
    ]  # fmt: skip
    out = activities[0]
    startup = max(0.0, (out["EndTime"] - out["StartTime"]).total_seconds() - 0.5)
    threading.Event().wait(2.5)  # let the store publish the last periods the scale-in read (a fixed margin)

    hours = (time.time() - began + 2) / 3600
    result = CliRunner().invoke(app, [
        "autoscale", "simulate", "--from-endpoint", "calib", "--hours", f"{hours:.6f}", "--url", up.url,
        "--home", str(up.home), "--capacity-rps", "10", "--target-utilization", "1.0", "--min", "1", "--max", "2",
        "--cooldown-s", "3", "--startup-s", f"{startup:.2f}", "--price-per-hour", "1", "--mode", "real",
        "--step-s", "1", "--period-s", "1", "--json",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    epoch = doc["traffic_epoch"]
    assert max(s["rps"] for s in doc["steps"]) > 10  # the load was seen over the target

    def real(t: float) -> int:
        count = 1
        for a in activities:
            if a["StartTime"].timestamp() <= t:
                count = int(a["Description"].rsplit(" ", 1)[1].rstrip("."))
        return count

    mismatches = []
    for s in doc["steps"]:
        end = epoch + s["time_s"] + 1  # the simulated count is the one at the step's end
        if s["desired"] not in {real(end - 1), real(end), real(end + 1)}:
            mismatches.append((s["time_s"], s["desired"], real(end)))
    assert mismatches == [], (mismatches, [(a["StartTime"].timestamp() - epoch, a["Description"]) for a in activities])
    simulated = [a for a in doc["activities"] if a["status"] == "Successful"]
    assert [a["description"] for a in simulated[:2]] == [a["Description"] for a in activities[:2]]
