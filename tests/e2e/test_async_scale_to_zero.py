"""An asynchronous endpoint scaled to zero and back by Application Auto Scaling, as AWS documents it, on a real
``servekit up`` (one-second metrics) through boto3 (issue 29):

- RegisterScalableTarget takes MinCapacity 0 for the asynchronous variant and refuses it for a real-time one;
- target tracking on ApproximateBacklogSizePerInstance scales the idle variant to 0 instances (DescribeEndpoint
  shows CurrentInstanceCount 0);
- InvokeEndpointAsync queues work there (HasBacklogWithoutCapacity is 1), a CloudWatch alarm on it runs a step
  policy that scales the variant 0 -> 1, the answers land in S3 equal to a real-time endpoint's answers for the same
  model, and the variant goes back to 0 once the queue is empty;
- the success and error notifications reach the webhooks ``--sns-webhook`` names for the config's SNS topics.

Every wait polls a condition with a deadline."""

from __future__ import annotations

import datetime
import functools
import json
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
BUCKET = "sagemaker-us-east-1-000000000000"
SUCCESS = "arn:aws:sns:us-east-1:000000000000:async-done"
ERROR = "arn:aws:sns:us-east-1:000000000000:async-failed"
DIM = "sagemaker:variant:DesiredInstanceCount"
HANDLER = """
import json

def model_fn(model_dir):
    return 3.0

def transform_fn(factor, body, content_type, accept):
    return json.dumps([x * factor for x in json.loads(body)]), "application/json"  # not JSON: the model's error
"""


class Webhook:
    """A tiny HTTP server on 127.0.0.1 keeping every JSON body POSTed to it, by path."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((self.path, json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Webhook:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def poll(what: str, check: Callable[[], Any], up: UpProcess, timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)  # polling another process's state
    raise AssertionError(f"{what} not within {timeout_s} s; servekit up's log:\n{up.log.read_text()[-4000:]}")


@pytest.fixture
def hooks() -> Iterator[Webhook]:
    with Webhook() as w:
        yield w


def deploy(up: UpProcess, tmp: Path, sync: bool = True) -> None:
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
            "OutputConfig": {
                "S3OutputPath": f"s3://{BUCKET}/async/out",
                "S3FailurePath": f"s3://{BUCKET}/async/fail",
                "NotificationConfig": {
                    "SuccessTopic": SUCCESS,
                    "ErrorTopic": ERROR,
                    "IncludeInferenceResponseIn": ["SUCCESS_NOTIFICATION_TOPIC"],
                },
            },
        },
    )
    sm.create_endpoint(EndpointName="async", EndpointConfigName="async")
    if sync:  # a real-time endpoint of the same model
        sm.create_endpoint_config(EndpointConfigName="sync", ProductionVariants=[variant])
        sm.create_endpoint(EndpointName="sync", EndpointConfigName="sync")
    for name in ("async", "sync") if sync else ("async",):
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)


def read(up: UpProcess, uri: str) -> bytes | None:
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    try:
        return bytes(up.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    except botocore.exceptions.ClientError:
        return None


def most(up: UpProcess, metric: str, since: float | None = None) -> float:
    """The metric's highest value over the last minutes (from ``since``, epoch seconds, when given); -1: none."""
    now = datetime.datetime.now(datetime.UTC)
    points = up.client("cloudwatch").get_metric_statistics(
        Namespace="AWS/SageMaker",
        MetricName=metric,
        Dimensions=[{"Name": "EndpointName", "Value": "async"}],
        StartTime=now - datetime.timedelta(minutes=5)
        if since is None
        else datetime.datetime.fromtimestamp(since, datetime.UTC),
        EndTime=now + datetime.timedelta(minutes=1),
        Period=1,
        Statistics=["Maximum"],
    )["Datapoints"]
    return max((p["Maximum"] for p in points), default=-1.0)


@pytest.mark.slow  # make test-slow
@pytest.mark.timeout(300)
def test_a_backlog_scales_an_async_variant_from_zero_to_one_and_back(tmp_path: Path, hooks: Webhook) -> None:
    up = UpProcess(
        tmp_path / "home",
        "--metrics-resolution-s", "1",
        "--sns-webhook", f"{SUCCESS}={hooks.url}/done",
        "--sns-webhook", f"{ERROR}={hooks.url}/failed",
    )  # fmt: skip
    up.start()
    try:
        deploy(up, tmp_path)
        sm, aas, cw = up.sm(), up.client("application-autoscaling"), up.client("cloudwatch")
        shown = sm.describe_endpoint(EndpointName="async")["AsyncInferenceConfig"]["OutputConfig"]
        assert shown["NotificationConfig"]["SuccessTopic"] == SUCCESS  # DescribeEndpoint repeats the config's
        assert "AsyncInferenceConfig" not in sm.describe_endpoint(EndpointName="sync")
        key = {"ServiceNamespace": "sagemaker", "ScalableDimension": DIM}

        # 0 is refused for a real-time variant, with SageMaker's reason, and taken for the asynchronous one
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            aas.register_scalable_target(ResourceId="endpoint/sync/variant/A", MinCapacity=0, MaxCapacity=1, **key)
        assert refused.value.response["Error"]["Code"] == "ValidationException"
        assert "MinCapacity must be at least 1" in refused.value.response["Error"]["Message"]
        rid = "endpoint/async/variant/A"
        aas.register_scalable_target(ResourceId=rid, MinCapacity=0, MaxCapacity=1, **key)
        assert (
            aas.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[rid])["ScalableTargets"][0][
                "MinCapacity"
            ]
            == 0
        )
        # AWS's documented pair: target tracking on the backlog per instance, and a step policy for 0 -> 1
        aas.put_scaling_policy(
            PolicyName="backlog", PolicyType="TargetTrackingScaling", ResourceId=rid, **key,
            TargetTrackingScalingPolicyConfiguration={
                "TargetValue": 5.0,
                "CustomizedMetricSpecification": {
                    "MetricName": "ApproximateBacklogSizePerInstance", "Namespace": "AWS/SageMaker",
                    "Dimensions": [{"Name": "EndpointName", "Value": "async"}], "Statistic": "Average",
                },
                "ScaleInCooldown": 1, "ScaleOutCooldown": 1,
            },
        )  # fmt: skip
        step = aas.put_scaling_policy(
            PolicyName="HasBacklogWithoutCapacity-ScalingPolicy", PolicyType="StepScaling", ResourceId=rid, **key,
            StepScalingPolicyConfiguration={
                "AdjustmentType": "ChangeInCapacity", "MetricAggregationType": "Average", "Cooldown": 5,
                "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}],
            },
        )  # fmt: skip
        cw.put_metric_alarm(
            AlarmName="async-backlog-without-capacity", MetricName="HasBacklogWithoutCapacity",
            Namespace="AWS/SageMaker", Statistic="Average", EvaluationPeriods=2, DatapointsToAlarm=2, Threshold=1,
            ComparisonOperator="GreaterThanOrEqualToThreshold", TreatMissingData="missing", Period=1,
            Dimensions=[{"Name": "EndpointName", "Value": "async"}], AlarmActions=[step["PolicyARN"]],
        )  # fmt: skip

        def variant() -> dict[str, Any]:
            d = sm.describe_endpoint(EndpointName="async")
            [v] = d["ProductionVariants"]
            return {**v, "EndpointStatus": d["EndpointStatus"]}

        def at(count: int) -> bool:
            v = variant()
            return bool(
                v["EndpointStatus"] == "InService"
                and v["CurrentInstanceCount"] == count
                and v["DesiredInstanceCount"] == count
            )

        def activities() -> list[dict[str, Any]]:
            return list(
                aas.describe_scaling_activities(ServiceNamespace="sagemaker", ResourceId=rid)["ScalingActivities"]
            )

        # ---- idle: the backlog per instance stays under target, so the variant goes to zero ----
        poll("the idle variant at 0 instances", lambda: at(0), up)
        first = poll(
            "the scale-in activity settled", lambda: [a for a in activities() if a["StatusCode"] != "InProgress"], up
        )
        assert first[0]["Description"] == "Setting desired instance count to 0."
        assert first[0]["StatusCode"] == "Successful"
        assert "AlarmLow" in first[0]["Cause"]
        assert most(up, "HasBacklogWithoutCapacity") == 0.0  # idle and published: the alarm has data

        # ---- work arrives at zero instances: it waits in the queue, the step policy starts an instance ----
        bodies: dict[str, list[float]] = {"a": [1, 2], "b": [5], "c": [0.5, 4]}
        s3 = up.client("s3")
        submitted = {}
        for name, data in {**bodies, "bad": None, "gone": [1]}.items():
            s3.put_object(Bucket=BUCKET, Key=f"async/in/{name}", Body=b"not json" if data is None else
                          json.dumps(data).encode())  # fmt: skip
            submitted[name] = up.rt().invoke_endpoint_async(
                EndpointName="async", InputLocation=f"s3://{BUCKET}/async/in/{name}", ContentType="application/json"
            )
        s3.delete_object(Bucket=BUCKET, Key="async/in/gone")  # its input vanishes while it waits
        assert at(0)  # still no instance: nothing has been taken from the queue yet
        poll("HasBacklogWithoutCapacity 1", lambda: most(up, "HasBacklogWithoutCapacity") == 1.0, up)
        poll("the variant at 1 instance", lambda: at(1), up)
        out = poll("the scale-out activity settled", lambda: [a for a in activities() if a["Description"] ==
                   "Setting desired instance count to 1." and a["StatusCode"] != "InProgress"], up)  # fmt: skip
        assert out[0]["StatusCode"] == "Successful", out
        assert out[0]["Cause"] == (
            "monitor alarm async-backlog-without-capacity in state ALARM triggered policy "
            "HasBacklogWithoutCapacity-ScalingPolicy"
        )
        for name, data in bodies.items():
            answer = poll(f"the answer to {name}", functools.partial(read, up, submitted[name]["OutputLocation"]), up)
            sync = up.rt().invoke_endpoint(EndpointName="sync", Body=json.dumps(data), ContentType="application/json")
            assert json.loads(answer) == json.loads(sync["Body"].read()) == [3.0 * x for x in data]
        failure = poll("the failure", lambda: read(up, submitted["bad"]["FailureLocation"]), up)
        assert b"Received server error (500) from model" in failure
        gone = poll("the missing input's failure", lambda: read(up, submitted["gone"]["FailureLocation"]), up)
        assert b"could not be read" in gone

        def total(metric: str, statistic: str = "Sum") -> float:
            now = datetime.datetime.now(datetime.UTC)
            points = cw.get_metric_statistics(
                Namespace="AWS/SageMaker", MetricName=metric, Period=60, Statistics=[statistic],
                Dimensions=[{"Name": "EndpointName", "Value": "async"}, {"Name": "VariantName", "Value": "A"}],
                StartTime=now - datetime.timedelta(minutes=10), EndTime=now + datetime.timedelta(minutes=1),
            )["Datapoints"]  # fmt: skip
            return sum(float(p[statistic]) for p in points)

        assert total("InvocationsProcesssed") == 3.0
        assert total("InvocationFailures") == 1.0  # the model's error
        assert total("RequestDownloadFailures") == 1.0  # the vanished input
        assert total("ModelLatency", "SampleCount") == 3.0
        assert total("TimeInBacklog", "SampleCount") == 5.0

        # ---- the notifications, at the webhooks standing in for the SNS topics ----
        poll("5 notifications", lambda: len(hooks.received) >= 5, up, 30)
        done = {m["inferenceId"]: m for path, m in hooks.received if path == "/done"}
        failed = [m for path, m in hooks.received if path == "/failed"]
        assert set(done) == {submitted[n]["InferenceId"] for n in bodies}
        for name, data in bodies.items():
            m = done[submitted[name]["InferenceId"]]
            assert m["invocationStatus"] == "Completed"
            assert m["eventName"] == "InferenceResult" and m["eventSource"] == "aws:sagemaker"
            assert m["eventVersion"] == "1.0" and m["awsRegion"] == "us-east-1"
            assert m["requestParameters"] == {
                "endpointName": "async", "inputLocation": f"s3://{BUCKET}/async/in/{name}",
                "contentType": "application/json",
            }  # fmt: skip
            assert m["responseParameters"]["outputLocation"] == submitted[name]["OutputLocation"]
            assert json.loads(m["responseBody"]["content"]) == [3.0 * x for x in data]
            assert m["receivedTime"] <= m["eventTime"]
        by_id = {m["inferenceId"]: m for m in failed}
        assert set(by_id) == {submitted["bad"]["InferenceId"], submitted["gone"]["InferenceId"]}
        assert "could not be read" in by_id[submitted["gone"]["InferenceId"]]["failureReason"]
        bad = by_id[submitted["bad"]["InferenceId"]]
        assert bad["invocationStatus"] == "Failed"
        assert "Received server error (500) from model" in bad["failureReason"]
        assert "responseBody" not in bad  # IncludeInferenceResponseIn names the success topic only

        # ---- the queue is empty again: back to zero ----
        poll("the variant back at 0 instances", lambda: at(0), up)
        last = poll("the second scale-in settled", lambda: [a for a in activities() if a["StatusCode"] != "InProgress"
                    and a["StartTime"] > out[0]["StartTime"]], up)  # fmt: skip
        assert last[0]["Description"] == "Setting desired instance count to 0."
        assert last[0]["StatusCode"] == "Successful"
        assert "AlarmLow" in last[0]["Cause"]
    finally:
        up.stop()


def test_requests_queued_at_zero_instances_wait_through_a_restart(tmp_path: Path) -> None:
    """At zero instances a request waits in the queue (HasBacklogWithoutCapacity 1, no answer); the plane killed
    with -9 and started again still has the variant at zero and the request queued; an instance answers it."""
    first = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1")
    first.start()
    try:
        deploy(first, tmp_path, sync=False)
        sm = first.sm()
        sm.update_endpoint_weights_and_capacities(
            EndpointName="async", DesiredWeightsAndCapacities=[{"VariantName": "A", "DesiredInstanceCount": 0}]
        )

        def at_zero(sm: Any = sm) -> bool:
            d = sm.describe_endpoint(EndpointName="async")
            return bool(d["EndpointStatus"] == "InService" and d["ProductionVariants"][0]["CurrentInstanceCount"] == 0)

        poll("zero instances", at_zero, first)
        first.client("s3").put_object(Bucket=BUCKET, Key="async/in/wait", Body=b"[2, 4]")
        queued = first.rt().invoke_endpoint_async(
            EndpointName="async", InputLocation=f"s3://{BUCKET}/async/in/wait", ContentType="application/json"
        )
        poll("HasBacklogWithoutCapacity 1", lambda: most(first, "HasBacklogWithoutCapacity") == 1.0, first)
        assert read(first, queued["OutputLocation"]) is None  # waiting, not failed
        assert read(first, queued["FailureLocation"]) is None
    finally:
        first.kill()
    second = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1")
    second.start()
    try:
        restarted = time.time()
        sm = second.sm()
        poll("zero instances after the restart", lambda: at_zero(sm), second)
        poll("the backlog after the restart", lambda: most(second, "HasBacklogWithoutCapacity", restarted) == 1.0,
             second)  # fmt: skip
        assert read(second, queued["OutputLocation"]) is None
        sm.update_endpoint_weights_and_capacities(
            EndpointName="async", DesiredWeightsAndCapacities=[{"VariantName": "A", "DesiredInstanceCount": 1}]
        )
        answer = poll("the answer", functools.partial(read, second, queued["OutputLocation"]), second)
        assert json.loads(answer) == [6.0, 12.0]
    finally:
        second.stop()
