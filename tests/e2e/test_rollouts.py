"""Guarded deployments end to end with boto3: a healthy linear rollout whose every step shows in DescribeEndpoint,
and a canary to a model that fails, rolled back by a CloudWatch alarm on the endpoint's own metrics with no
failed request on the old fleet. Real ``servekit up``, real instances, real alarms (time compressed with
``--metrics-resolution-s 1`` so a 10-second alarm period is possible)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.services.database import StateDB
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 180}


@pytest.fixture
def up1(tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def failing_model(root: Path, name: str) -> Path:
    """Loads fine, then raises on every request: the "deliberately bad second model"."""
    version = root / name / "1"
    (version / "code").mkdir(parents=True)
    (version / "code" / "inference.py").write_text(
        textwrap.dedent(
            """
            def model_fn(model_dir):
                return None

            def transform_fn(model, data, content_type, accept):
                raise ValueError("the new model is broken")
            """
        )
    )
    return root / name


def config(sm: Any, name: str, model: str, path: Path, count: int = 1) -> None:
    sm.create_model(ModelName=model, PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(path)})
    sm.create_endpoint_config(
        EndpointConfigName=name,
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": model,
                "InitialInstanceCount": count,
                "InstanceType": "ml.t2.medium",
            }
        ],
    )


class Load:
    """Requests from a thread until stopped: every answer's output and every failure's message, in order."""

    def __init__(self, client: Callable[[], Any], endpoint: str) -> None:
        self.answers: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._client, self._endpoint = client, endpoint
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        rt = self._client()
        while not self._stop.is_set():
            try:
                r = rt.invoke_endpoint(EndpointName=self._endpoint, Body=b"[1.0]", ContentType="application/json")
                self.answers.append(json.loads(r["Body"].read())["out"][0])
            except botocore.exceptions.ClientError as exc:  # counted: the assertions say which are allowed
                self.failures.append(exc.response["Error"].get("Message", ""))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def watch(
    sm: Any, endpoint: str, until: Callable[[dict[str, Any]], bool], timeout_s: float = 120
) -> list[dict[str, Any]]:
    """DescribeEndpoint every 0.1 s until ``until`` holds; every answer (polling another process's progress)."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        desc = sm.describe_endpoint(EndpointName=endpoint)
        seen.append(desc)
        if until(desc):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"no such state within {timeout_s} s; last: {seen[-1]}")


@pytest.mark.slow  # make test-slow
def test_a_linear_rollout_shows_each_step_and_completes_under_load(up1: UpProcess, tmp_path: Path) -> None:
    sm, cw = up1.sm(), up1.client("cloudwatch")
    config(sm, "v1", "m1", scaling_model(tmp_path, "m1", 1.0))
    config(sm, "v2", "m2", scaling_model(tmp_path, "m2", 2.0))
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="v1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    cw.put_metric_alarm(
        AlarmName="ep-5xx",
        Namespace="AWS/SageMaker",
        MetricName="Invocation5XXErrors",
        Dimensions=[{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "AllTraffic"}],
        Statistic="Sum",
        Period=10,
        EvaluationPeriods=1,
        Threshold=0,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )
    deployment = {
        "BlueGreenUpdatePolicy": {
            "TrafficRoutingConfiguration": {
                "Type": "LINEAR",
                "WaitIntervalInSeconds": 3,
                "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 50},
            },
            "TerminationWaitInSeconds": 2,
        },
        "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "ep-5xx"}]},
    }
    with Load(up1.rt, "ep") as load:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="v2", DeploymentConfig=deployment)
        seen = watch(sm, "ep", lambda d: d["EndpointStatus"] == "InService")
        time.sleep(0.5)  # a little load on the finished fleet (the assertion below reads its answers)
    steps = [
        (v["CurrentWeight"], v["VariantStatus"][0]["Status"])
        for d in seen
        for v in d.get("PendingDeploymentSummary", {}).get("ProductionVariants", [])
        if v.get("VariantStatus")
    ]
    live = [(w, s) for w, s in dict.fromkeys(steps) if s != "Creating"]
    # every phase has a real start, the Creating one too (it read 1970-01-01 while the new fleet launched)
    starts = [
        s["StartTime"]
        for d in seen
        for v in d.get("PendingDeploymentSummary", {}).get("ProductionVariants", [])
        for s in v.get("VariantStatus", [])
    ]
    assert starts and min(starts).year >= 2020, sorted(set(starts))[:3]
    assert (0.5, "ActivatingTraffic") in live and (1.0, "ActivatingTraffic") in live, steps
    assert (1.0, "Baking") in live, steps
    blue_weights = {v["CurrentWeight"] for d in seen for v in d["ProductionVariants"]}
    assert 0.5 in blue_weights, blue_weights  # the old fleet's share while the new one had half
    assert {d["EndpointStatus"] for d in seen} == {"Updating", "InService"}
    # the endpoint's first deployment configuration is its most recent one from the moment UpdateEndpoint accepts
    # it: every answer while it runs names the alarms it watches
    running = [d.get("LastDeploymentConfig") for d in seen if d["EndpointStatus"] == "Updating"]
    assert running and all(c == deployment for c in running), running[:1]

    final = sm.describe_endpoint(EndpointName="ep")
    assert final["EndpointConfigName"] == "v2" and "FailureReason" not in final
    assert final["LastDeploymentConfig"]["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"]["Type"] == "LINEAR"
    assert "PendingDeploymentSummary" not in final
    assert load.failures == []
    assert set(load.answers) == {1.0, 2.0} and load.answers[-1] == 2.0


@pytest.mark.slow  # make test-slow
def test_a_canary_to_a_failing_model_is_rolled_back_by_its_alarm(up1: UpProcess, tmp_path: Path) -> None:
    sm, cw = up1.sm(), up1.client("cloudwatch")
    config(sm, "good", "m-good", scaling_model(tmp_path, "m-good", 1.0))
    config(sm, "bad", "m-bad", failing_model(tmp_path, "m-bad"))
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="good")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    cw.put_metric_alarm(
        AlarmName="ep-errors",
        Namespace="AWS/SageMaker",
        MetricName="Invocation5XXErrors",
        Dimensions=[{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "AllTraffic"}],
        Statistic="Sum",
        Period=10,
        EvaluationPeriods=1,
        Threshold=0,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )
    deployment = {
        "BlueGreenUpdatePolicy": {
            "TrafficRoutingConfiguration": {
                "Type": "CANARY",
                "WaitIntervalInSeconds": 600,  # only the alarm can end this bake within the test
                "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 20},
            },
            "MaximumExecutionTimeoutInSeconds": 1200,
        },
        "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "ep-errors"}]},
    }
    with Load(up1.rt, "ep") as load:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="bad", DeploymentConfig=deployment)
        watch(sm, "ep", lambda d: d["EndpointStatus"] == "InService", timeout_s=150)
        after_rollback = len(load.answers)
        time.sleep(1.0)  # load on the restored fleet, read below
    final = sm.describe_endpoint(EndpointName="ep")
    assert final["EndpointConfigName"] == "good"
    assert "ep-errors" in final["FailureReason"] and "Rolled back" in final["FailureReason"]
    assert final["LastDeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"] == [{"AlarmName": "ep-errors"}]
    assert cw.describe_alarms(AlarmNames=["ep-errors"])["MetricAlarms"][0]["StateValue"] == "ALARM"

    # The canary's requests failed with the new model's error; the old fleet failed none, before or after.
    assert load.failures, "the canary took no traffic"
    assert all("transform_fn failed" in f for f in load.failures), load.failures[:3]  # only the new model failed
    assert set(load.answers) == {1.0} and len(load.answers) > after_rollback

    db = StateDB.open(up1.home)
    try:
        moves = [(c.from_status, c.to_status) for c in db.hosting.history("ep")]
    finally:
        db.close()
    assert moves[-3:] == [("InService", "Updating"), ("Updating", "RollingBack"), ("RollingBack", "InService")]


def test_a_shadow_variant_gets_copies_never_answers_and_is_compared(up: UpProcess, tmp_path: Path) -> None:
    sm, rt = up.sm(), up.rt()
    for name, factor in (("prod-m", 2.0), ("shadow-m", 2.5)):
        path = scaling_model(tmp_path, name, factor)
        sm.create_model(ModelName=name, PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(path)})
    sm.create_model(
        ModelName="broken-shadow-m",
        PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(failing_model(tmp_path, "broken-shadow-m"))},
    )

    def variant(name: str, model: str, weight: float) -> dict[str, Any]:
        return {
            "VariantName": name,
            "ModelName": model,
            "InitialInstanceCount": 1,
            "InstanceType": "ml.t2.medium",
            "InitialVariantWeight": weight,
        }

    sm.create_endpoint_config(
        EndpointConfigName="shadowed",
        ProductionVariants=[variant("Prod", "prod-m", 1.0)],
        ShadowProductionVariants=[variant("Shadow", "shadow-m", 0.5)],
    )
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="shadowed")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    desc = sm.describe_endpoint(EndpointName="ep")
    assert [v["VariantName"] for v in desc["ProductionVariants"]] == ["Prod"]
    assert desc["ShadowProductionVariants"][0]["VariantName"] == "Shadow"
    assert desc["ShadowProductionVariants"][0]["CurrentInstanceCount"] == 1

    n = 400
    answers = set()
    for i in range(n):
        r = rt.invoke_endpoint(EndpointName="ep", Body=json.dumps([float(i)]), ContentType="application/json")
        assert r["InvokedProductionVariant"] == "Prod"
        answers.add(json.loads(r["Body"].read())["out"][0] / max(i, 1))
    assert answers <= {0.0, 2.0}  # the caller only ever sees production's answer

    def shadow_report(*args: str) -> str:
        cli = [sys.executable, "-m", "servekit.cli.main", "endpoint", "shadow-report", "ep", "--home", str(up.home)]
        return subprocess.run([*cli, *args], capture_output=True, text=True, check=True).stdout

    def report() -> dict[str, Any]:
        return dict(json.loads(shadow_report("--json"))["Shadow"])

    deadline = time.monotonic() + 30
    while True:  # the copies are sent after the callers' answers: wait for the stragglers to be logged
        r = report()
        if r["requests"] >= 150 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert 150 <= r["requests"] <= 250, r  # half of 400 copied (weight 0.5 against 1.0): far from both bounds
    assert r["shadow_errors"] == 0 and r["outputs"]["compared"] == r["requests"]
    # production answers 2x, the shadow 2.5x: the largest difference is 0.5 * the largest input copied
    assert 0.5 * 300 < r["outputs"]["max_abs_diff"] <= 0.5 * (n - 1)
    assert r["latency_ms"]["production"]["p99"] > 0 and r["latency_ms"]["shadow"]["p99"] > 0
    text = shadow_report()
    assert "shadow variant Shadow of endpoint ep" in text and "latency p99" in text

    # A shadow that fails never reaches the caller.
    sm.create_endpoint_config(
        EndpointConfigName="shadow-broken",
        ProductionVariants=[variant("Prod", "prod-m", 1.0)],
        ShadowProductionVariants=[variant("Shadow2", "broken-shadow-m", 1.0)],
    )
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="shadow-broken")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    for _ in range(50):
        r2 = rt.invoke_endpoint(EndpointName="ep", Body=json.dumps([1.0]), ContentType="application/json")
        assert json.loads(r2["Body"].read())["out"] == [2.0]
    deadline = time.monotonic() + 30
    while True:
        broken = json.loads(shadow_report("--variant", "Shadow2", "--json"))["Shadow2"]
        if broken["requests"] >= 50 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert broken["requests"] == 50 and broken["shadow_errors"] == 50


def test_the_cli_rolls_a_new_model_out_in_the_seed_steps(up: UpProcess, tmp_path: Path) -> None:
    sm, cw = up.sm(), up.client("cloudwatch")
    config(sm, "v1", "m1", scaling_model(tmp_path, "m1", 1.0))
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="v1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    cw.put_metric_alarm(
        AlarmName="quiet",
        Namespace="AWS/SageMaker",
        MetricName="Invocation5XXErrors",
        Dimensions=[{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "AllTraffic"}],
        Statistic="Sum",
        Period=60,
        EvaluationPeriods=1,
        Threshold=0,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )
    new_model = scaling_model(tmp_path, "m2", 3.0)
    cli = [sys.executable, "-m", "servekit.cli.main", "endpoint", "update", "ep", "--url", up.url, "--home"]
    args = ["--model-dir", str(new_model), "--steps", "5,20,50,100", "--wait-interval", "1", "--alarm", "quiet"]
    with Load(up.rt, "ep") as load:
        done = subprocess.run(
            [*cli, str(up.home), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    for n, share in enumerate(("5%", "20%", "50%", "100%"), start=1):
        assert f"Step {n} of 4: {share} of traffic on the new fleet" in done.stderr, done.stderr
    desc = sm.describe_endpoint(EndpointName="ep")
    assert desc["EndpointConfigName"].startswith("ep-config-") and "now runs" in done.stdout
    tags = sm.describe_endpoint_config(EndpointConfigName=desc["EndpointConfigName"])
    assert "ServekitTrafficSteps" not in tags  # the steps travel as a tag, not as a field SageMaker lacks
    assert load.failures == [] and set(load.answers) == {1.0, 3.0}

    # A malformed steps tag is refused where the config is created.
    with pytest.raises(botocore.exceptions.ClientError, match="growing traffic percentages"):
        sm.create_endpoint_config(
            EndpointConfigName="bad-steps",
            ProductionVariants=[
                {
                    "VariantName": "AllTraffic",
                    "ModelName": "m1",
                    "InitialInstanceCount": 1,
                    "InstanceType": "ml.t2.medium",
                }
            ],
            Tags=[{"Key": "servekit:TrafficSteps", "Value": "50 20"}],
        )


def test_a_scale_out_that_cannot_start_is_rolled_back_with_its_reason(up: UpProcess, tmp_path: Path) -> None:
    sm, rt = up.sm(), up.rt()
    model_dir = scaling_model(tmp_path, "doomed", 2.0)
    config(sm, "cfg", "doomed-m", model_dir)
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    (model_dir / "1" / "code" / "inference.py").write_text("raise RuntimeError('the weights are gone')\n")
    sm.update_endpoint_weights_and_capacities(
        EndpointName="ep", DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 2}]
    )
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    desc = sm.describe_endpoint(EndpointName="ep")
    assert "rolled back" in desc["FailureReason"] and "weights are gone" in desc["FailureReason"]
    (variant,) = desc["ProductionVariants"]
    assert variant["DesiredInstanceCount"] == 1 and variant["CurrentInstanceCount"] == 1
    r = rt.invoke_endpoint(EndpointName="ep", Body=b"[1.0]", ContentType="application/json")
    assert json.loads(r["Body"].read())["out"] == [2.0]  # the instance that ran serves on
    db = StateDB.open(up.home)
    try:
        moves = [(c.from_status, c.to_status) for c in db.hosting.history("ep")]
    finally:
        db.close()
    assert moves[-3:] == [("InService", "Updating"), ("Updating", "RollingBack"), ("RollingBack", "InService")]


def test_an_autoscaled_variant_keeps_its_instance_type_until_deregistered(up: UpProcess, tmp_path: Path) -> None:
    sm, aas = up.sm(), up.client("application-autoscaling")
    config(sm, "v1", "m1", scaling_model(tmp_path, "m1", 1.0))
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="v1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    target = {
        "ServiceNamespace": "sagemaker",
        "ResourceId": "endpoint/ep/variant/AllTraffic",
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
    }
    aas.register_scalable_target(MinCapacity=1, MaxCapacity=2, **target)
    sm.create_model(ModelName="m2", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path / "m1")})
    sm.create_endpoint_config(
        EndpointConfigName="bigger",
        ProductionVariants=[
            {"VariantName": "AllTraffic", "ModelName": "m2", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
        ],
    )
    with pytest.raises(botocore.exceptions.ClientError) as err:
        sm.update_endpoint(EndpointName="ep", EndpointConfigName="bigger")
    assert "deregister the scalable target first" in err.value.response["Error"]["Message"]
    sm.create_endpoint_config(
        EndpointConfigName="same-type",
        ProductionVariants=[
            {"VariantName": "AllTraffic", "ModelName": "m2", "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
        ],
    )
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="same-type")  # a model-only change is fine
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    aas.deregister_scalable_target(**target)
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="bigger")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    assert sm.describe_endpoint(EndpointName="ep")["EndpointConfigName"] == "bigger"
