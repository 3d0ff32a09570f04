"""A guarded rollout rolled back by a monitoring alarm, end to end with boto3 against a real ``servekit up``: an
endpoint captures its traffic, a time-compressed data-quality schedule (tag ``servekit:hour-seconds``) judges it
against a baseline, a CloudWatch alarm watches the schedule's ``servekit``/``DriftedFeatures``, and a canary rollout
whose ``AutoRollbackConfiguration`` names that alarm is rolled back once drifted traffic reaches the endpoint during
the canary's bake: the drift goes capture → execution → metric → alarm → RollingBack → InService on the old config."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servekit.services.database import StateDB
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # make test-slow: over 20 s in all
FAST = {"Delay": 1, "MaxAttempts": 120}
HOUR_S = 2  # each schedule hour lasts two seconds: a 12-hour analysis window is 24 s of capture
ROLE = "arn:aws:iam::000000000000:role/monitor"


def model(root: Path, name: str) -> Path:
    """A model that sums each row and says which model answered (so the test sees the canary take traffic)."""
    code = root / name / "1" / "code"
    code.mkdir(parents=True)
    (code / "inference.py").write_text(
        textwrap.dedent(
            f"""
            import json

            def model_fn(model_dir):
                return {name!r}

            def transform_fn(model, data, content_type, accept):
                rows = json.loads(data)
                return json.dumps({{"model": model, "score": [sum(r) for r in rows]}}), "application/json"
            """
        )
    )
    return root / name


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1")  # alarms of 2-second periods
    u.start()
    try:
        yield u
    finally:
        u.stop()


def until(check: Callable[[], Any], what: str, timeout: float = 150.0) -> Any:
    """Poll ``check`` until it returns something truthy (another process's progress)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_canary_receiving_drifted_traffic_is_rolled_back_by_the_monitoring_alarm(
    up: UpProcess, tmp_path: Path
) -> None:
    sm, rt, cw = up.sm(), up.rt(), up.client("cloudwatch")
    rng = np.random.default_rng(5)

    # the baseline, from training data
    train = tmp_path / "train.csv"
    train.write_text("x,y\n" + "".join(f"{a:.5f},{b:.5f}\n" for a, b in rng.normal(0.0, 1.0, size=(2000, 2))))
    baseline = tmp_path / "baseline"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "servekit.cli.main",
            "monitor",
            "baseline",
            "--data",
            str(train),
            "--out",
            str(baseline),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr

    # two endpoint configs capturing to the same place: the running one and the rollout's
    capture = tmp_path / "capture"
    data_capture = {
        "EnableCapture": True,
        "InitialSamplingPercentage": 100,
        "DestinationS3Uri": f"file://{capture}",
        "CaptureOptions": [{"CaptureMode": "Input"}],
    }
    for name in ("old", "new"):
        sm.create_model(
            ModelName=f"{name}-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(model(tmp_path, name))}
        )
        sm.create_endpoint_config(
            EndpointConfigName=f"{name}-cfg",
            ProductionVariants=[
                {
                    "VariantName": "AllTraffic",
                    "ModelName": f"{name}-m",
                    "InitialInstanceCount": 1,
                    "InstanceType": "ml.m5.large",
                }
            ],
            DataCaptureConfig=data_capture,
        )
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="old-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)

    def invoke(rows: np.ndarray) -> str:
        body = json.dumps([[round(a, 5), round(b, 5)] for a, b in rows])
        answer = json.loads(
            rt.invoke_endpoint(EndpointName="ep", Body=body, ContentType="application/json")["Body"].read()
        )
        assert len(answer["score"]) == len(rows)
        return str(answer["model"])

    # traffic like the training data, before any rollout
    assert {invoke(rng.normal(0.0, 1.0, size=(20, 2))) for _ in range(10)} == {"old"}

    # the schedule, and the alarm on the drift it records
    sm.create_data_quality_job_definition(
        JobDefinitionName="ep-dq",
        DataQualityBaselineConfig={"ConstraintsResource": {"S3Uri": f"file://{baseline}"}},
        DataQualityAppSpecification={"ImageUri": "servekit", "ContainerArguments": ["--no-report"]},
        DataQualityJobInput={"EndpointInput": {"EndpointName": "ep", "LocalPath": "/opt/ml/processing/input"}},
        DataQualityJobOutputConfig={
            "MonitoringOutputs": [
                {"S3Output": {"S3Uri": f"file://{tmp_path}/reports", "LocalPath": "/opt/ml/processing/out"}}
            ]
        },
        JobResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}},
        RoleArn=ROLE,
    )
    cw.put_metric_alarm(
        AlarmName="ep-drift",
        Namespace="servekit",
        MetricName="DriftedFeatures",
        Dimensions=[{"Name": "EndpointName", "Value": "ep"}],
        Statistic="Maximum",
        Period=2,
        EvaluationPeriods=1,
        Threshold=0.0,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )
    sm.create_monitoring_schedule(
        MonitoringScheduleName="ep-drift",
        MonitoringScheduleConfig={
            "ScheduleConfig": {
                "ScheduleExpression": "cron(0 * ? * * *)",
                "DataAnalysisStartTime": "-PT12H",
                "DataAnalysisEndTime": "-PT0H",
            },
            "MonitoringJobDefinitionName": "ep-dq",
            "MonitoringType": "DataQuality",
        },
        Tags=[{"Key": "servekit:hour-seconds", "Value": str(HOUR_S)}],
    )

    def executions() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = sm.list_monitoring_executions(
            MonitoringScheduleName="ep-drift", SortBy="ScheduledTime", SortOrder="Descending", MaxResults=100
        )["MonitoringExecutionSummaries"]
        return out

    def alarm_state() -> str:
        return str(cw.describe_alarms(AlarmNames=["ep-drift"])["MetricAlarms"][0]["StateValue"])

    # the undrifted traffic is judged clean (a metric of 0 drifted features), and the alarm stays OK
    until(lambda: any(e["MonitoringExecutionStatus"] == "Completed" for e in executions()), "a clean execution")
    until(lambda: alarm_state() == "OK", "the alarm to be OK")
    assert not [e for e in executions() if e["MonitoringExecutionStatus"] == "CompletedWithViolations"]

    # a canary rollout guarded by the monitoring alarm; only the alarm can end its bake within the test
    deployment = {
        "BlueGreenUpdatePolicy": {
            "TrafficRoutingConfiguration": {
                "Type": "CANARY",
                "WaitIntervalInSeconds": 600,
                "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 50},
            },
            "MaximumExecutionTimeoutInSeconds": 1200,
        },
        "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "ep-drift"}]},
    }
    sm.update_endpoint(EndpointName="ep", EndpointConfigName="new-cfg", DeploymentConfig=deployment)

    def canary_live() -> bool:
        pending = sm.describe_endpoint(EndpointName="ep").get("PendingDeploymentSummary", {})
        return any(
            s["Status"] == "ActivatingTraffic"
            for v in pending.get("ProductionVariants", [])
            for s in v.get("VariantStatus", [])
        )

    until(canary_live, "the canary to take traffic")

    # drifted traffic during the canary: x moved by three standard deviations; some of it reaches the new model
    answered: set[str] = set()
    seen: list[str] = []

    def drifted_traffic() -> bool:
        rows = rng.normal(0.0, 1.0, size=(20, 2))
        rows[:, 0] += 3.0
        answered.add(invoke(rows))
        seen.append(str(sm.describe_endpoint(EndpointName="ep")["EndpointStatus"]))
        return seen[-1] != "Updating"

    until(drifted_traffic, "the rollout to end")
    assert "new" in answered, "the canary took no traffic"
    assert seen[-1] in ("RollingBack", "InService"), seen[-1]
    until(lambda: sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService", "the rollback to end")

    final = sm.describe_endpoint(EndpointName="ep")
    assert final["EndpointConfigName"] == "old-cfg"
    assert "Rolled back" in final["FailureReason"] and "ep-drift" in final["FailureReason"], final["FailureReason"]
    assert alarm_state() == "ALARM"
    assert {invoke(rng.normal(0.0, 1.0, size=(5, 2))) for _ in range(10)} == {"old"}  # the old fleet serves on

    # the alarm fired because an execution found x drifted (and not y)
    flagged = [e for e in executions() if e["MonitoringExecutionStatus"] == "CompletedWithViolations"]
    assert flagged
    job = sm.describe_processing_job(ProcessingJobName=flagged[-1]["ProcessingJobArn"].rsplit("/", 1)[1])
    folder = Path(job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"].removeprefix("file://"))
    [window] = json.loads((folder / "metrics.json").read_text())["windows"]
    assert window["features"]["x"]["drifted"] and not window["features"]["y"]["drifted"]

    db = StateDB.open(up.home)
    try:
        moves = [(c.from_status, c.to_status) for c in db.hosting.history("ep")]
    finally:
        db.close()
    assert moves[-3:] == [("InService", "Updating"), ("Updating", "RollingBack"), ("RollingBack", "InService")]
    sm.delete_monitoring_schedule(MonitoringScheduleName="ep-drift")
