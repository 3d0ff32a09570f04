"""A serverless variant's CloudWatch metrics read back with boto3's GetMetricStatistics from a real ``servekit up``
(one-second metrics; issue 29): each cold start publishes one ``ModelSetupTime``, every answered request one
``OverheadLatency``, and the cold start's wait for its instance is in its OverheadLatency. A throttled request
(past MaxConcurrency) never reaches the model: servekit neither queues nor retries it."""

from __future__ import annotations

import datetime
import json
import textwrap
import threading
import time
from collections.abc import Callable
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

CALLS = os.path.join(os.path.dirname(__file__), "calls")

def model_fn(model_dir):
    return 3.0

def predict_fn(data, factor):
    with open(CALLS, "a") as f:  # every request that reaches the model
        f.write(json.dumps(data) + "\\n")
    gate = data.get("wait_for")
    if gate:  # held until the test lets it go
        open(gate + ".started", "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)
    return {"out": data["x"] * factor}

def input_fn(body, content_type):
    return json.loads(body)

def output_fn(prediction, accept):
    return json.dumps(prediction), "application/json"
"""


def poll(what: str, check: Callable[[], Any], timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.1)  # polling another process's state
    raise AssertionError(f"{what} not within {timeout_s} s")


def stats(up: UpProcess, metric: str) -> dict[str, float]:
    """The metric's statistics over the last minutes (its periods merged)."""
    now = datetime.datetime.now(datetime.UTC)
    points = up.client("cloudwatch").get_metric_statistics(
        Namespace="AWS/SageMaker",
        MetricName=metric,
        Dimensions=[{"Name": "EndpointName", "Value": "sl"}, {"Name": "VariantName", "Value": "AllTraffic"}],
        StartTime=now - datetime.timedelta(minutes=10),
        EndTime=now + datetime.timedelta(minutes=1),
        Period=60,
        Statistics=["SampleCount", "Maximum", "Minimum"],
    )["Datapoints"]
    assert all(p["Unit"] == "Microseconds" for p in points)
    return {
        "SampleCount": sum(float(p["SampleCount"]) for p in points),
        "Maximum": max((float(p["Maximum"]) for p in points), default=0.0),
        "Minimum": min((float(p["Minimum"]) for p in points), default=0.0),
    }


def test_cold_start_metrics_and_a_throttle_that_never_reaches_the_model(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1", "--serverless-idle-s", "2")
    up.start()
    try:
        code = tmp_path / "triple" / "1" / "code"
        code.mkdir(parents=True)
        (code / "inference.py").write_text(textwrap.dedent(HANDLER))
        calls = code / "calls"
        sm = up.sm()
        sm.create_model(
            ModelName="triple", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path / "triple")}
        )
        config = {"MemorySizeInMB": 1024, "MaxConcurrency": 1}
        sm.create_endpoint_config(
            EndpointConfigName="sl",
            ProductionVariants=[{"VariantName": "AllTraffic", "ModelName": "triple", "ServerlessConfig": config}],
        )
        sm.create_endpoint(EndpointName="sl", EndpointConfigName="sl")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="sl", WaiterConfig=FAST)
        # one attempt per call: any retry would be servekit's
        rt = client(
            up.home, "sagemaker-runtime", up.url, config=botocore.config.Config(retries={"total_max_attempts": 1})
        )

        def invoke(body: dict[str, Any]) -> float:
            answer = rt.invoke_endpoint(EndpointName="sl", Body=json.dumps(body), ContentType="application/json")
            return float(json.loads(answer["Body"].read())["out"])

        assert stats(up, "ModelSetupTime")["SampleCount"] == 0  # nothing started yet
        assert invoke({"x": 2.0}) == 6.0  # the cold start
        assert invoke({"x": 3.0}) == 9.0  # warm
        setup = poll(
            "ModelSetupTime", lambda: stats(up, "ModelSetupTime")["SampleCount"] == 1 and stats(up, "ModelSetupTime")
        )
        overhead = poll(
            "OverheadLatency", lambda: stats(up, "OverheadLatency")["SampleCount"] == 2 and stats(up, "OverheadLatency")
        )
        assert setup["Maximum"] > 0
        # the cold request waited for the whole setup: it is in that request's OverheadLatency
        assert overhead["Maximum"] >= setup["Maximum"]
        assert overhead["Minimum"] < setup["Maximum"]  # the warm one did not wait for a setup

        # past MaxConcurrency: refused at once, and the model never sees the refused request
        gate = tmp_path / "gate"
        answers: list[float] = []
        slow = threading.Thread(target=lambda: answers.append(invoke({"x": 1.0, "wait_for": str(gate)})))
        slow.start()
        poll("the slow request in the model", (tmp_path / "gate.started").exists)
        with pytest.raises(botocore.exceptions.ClientError) as throttled:
            invoke({"x": 7.0})
        assert throttled.value.response["Error"]["Code"] == "ThrottlingException"
        gate.write_text("go")
        slow.join(60)
        assert answers == [3.0]
        seen = [json.loads(line)["x"] for line in calls.read_text().splitlines()]
        assert seen == [2.0, 3.0, 1.0]  # 7.0 never reached the model: not queued, not retried
        assert stats(up, "OverheadLatency")["SampleCount"] == 3  # the refused request answered nothing

        # idle past --serverless-idle-s: the instance stops, the next request is a second cold start
        poll("scale to zero", lambda: sm.describe_endpoint(EndpointName="sl")["ProductionVariants"][0][
            "CurrentInstanceCount"] == 0)  # fmt: skip
        assert invoke({"x": 5.0}) == 15.0
        poll("a second ModelSetupTime", lambda: stats(up, "ModelSetupTime")["SampleCount"] == 2)
        assert [json.loads(line)["x"] for line in calls.read_text().splitlines()] == [2.0, 3.0, 1.0, 5.0]
    finally:
        up.stop()
