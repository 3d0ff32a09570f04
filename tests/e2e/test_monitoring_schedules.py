"""Model Monitor schedules on a real ``servekit up`` driven by boto3: an endpoint captures its traffic, a baseline is
made with ``servekit monitor baseline``, a time-compressed hourly data-quality schedule (tag
``servekit:hour-seconds``) runs ``servekit monitor`` on the capture, its executions are listed with their status and
violations report, DriftedFeatures drives a CloudWatch alarm to ALARM, and Stop / Start / Delete do what they say."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # make test-slow: over 20 s in all
FAST = {"Delay": 1, "MaxAttempts": 120}
HOUR_S = 3  # each hour of the schedules lasts three seconds (a 24-hour window: 72 s)
ROLE = "arn:aws:iam::000000000000:role/monitor"

INFERENCE_PY = textwrap.dedent(
    """
    import json

    def model_fn(model_dir):
        return 1.0

    def transform_fn(model, data, content_type, accept):
        rows = json.loads(data)
        return json.dumps({"score": [sum(r) for r in rows]}), "application/json"
    """
)


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1")  # alarms of 2-second periods
    u.start()
    try:
        yield u
    finally:
        u.stop()


def until(check: Callable[[], Any], what: str, timeout: float = 120.0) -> Any:
    """Poll ``check`` until it returns something truthy (another process's progress)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def executions(sm: Any, schedule: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = sm.list_monitoring_executions(
        MonitoringScheduleName=schedule, SortBy="ScheduledTime", SortOrder="Descending", MaxResults=100
    )["MonitoringExecutionSummaries"]
    return out


def data_quality_definition(sm: Any, name: str, baseline: Path, reports: Path) -> None:
    sm.create_data_quality_job_definition(
        JobDefinitionName=name,
        DataQualityBaselineConfig={"ConstraintsResource": {"S3Uri": f"file://{baseline}"}},
        DataQualityAppSpecification={"ImageUri": "servekit", "ContainerArguments": ["--no-report"]},
        DataQualityJobInput={"EndpointInput": {"EndpointName": "churn", "LocalPath": "/opt/ml/processing/input"}},
        DataQualityJobOutputConfig={
            "MonitoringOutputs": [{"S3Output": {"S3Uri": f"file://{reports}", "LocalPath": "/opt/ml/processing/out"}}]
        },
        JobResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}},
        RoleArn=ROLE,
    )


def hourly_schedule(sm: Any, name: str, definition: str) -> str:
    arn: str = sm.create_monitoring_schedule(
        MonitoringScheduleName=name,
        MonitoringScheduleConfig={
            # every (compressed) hour, over the last 24 of them: 48 s of capture
            "ScheduleConfig": {
                "ScheduleExpression": "cron(0 * ? * * *)",
                "DataAnalysisStartTime": "-PT24H",
                "DataAnalysisEndTime": "-PT0H",
            },
            "MonitoringJobDefinitionName": definition,
            "MonitoringType": "DataQuality",
        },
        Tags=[{"Key": "servekit:hour-seconds", "Value": str(HOUR_S)}],
    )["MonitoringScheduleArn"]
    return arn


def test_a_schedule_monitors_captured_traffic_and_its_drift_raises_an_alarm(up: UpProcess, tmp_path: Path) -> None:
    sm, rt, cw = up.sm(), up.rt(), up.client("cloudwatch")
    rng = np.random.default_rng(11)

    # a baseline from training data, made the way a user makes one
    train = tmp_path / "train.csv"
    rows = rng.normal(0.0, 1.0, size=(2000, 2))
    train.write_text("x,y\n" + "\n".join(f"{a:.5f},{b:.5f}" for a, b in rows) + "\n")
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

    # an endpoint that captures its requests
    model = tmp_path / "m" / "1" / "code"
    model.mkdir(parents=True)
    (model / "inference.py").write_text(INFERENCE_PY)
    capture = tmp_path / "capture"
    sm.create_model(ModelName="churn-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path / "m")})
    sm.create_endpoint_config(
        EndpointConfigName="churn-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "churn-m", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
        ],
        DataCaptureConfig={
            "EnableCapture": True,
            "InitialSamplingPercentage": 100,
            "DestinationS3Uri": f"file://{capture}",
            "CaptureOptions": [{"CaptureMode": "Input"}],
        },
    )
    sm.create_endpoint(EndpointName="churn", EndpointConfigName="churn-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="churn", WaiterConfig=FAST)

    # a bad schedule expression is refused with what SageMaker accepts
    reports = tmp_path / "reports"
    data_quality_definition(sm, "churn-dq", baseline, reports)
    with pytest.raises(ClientError) as err:
        sm.create_monitoring_schedule(
            MonitoringScheduleName="bad",
            MonitoringScheduleConfig={
                "ScheduleConfig": {"ScheduleExpression": "cron(15 * * * ? *)"},
                "MonitoringJobDefinitionName": "churn-dq",
                "MonitoringType": "DataQuality",
            },
        )
    error = err.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert "Invalid ScheduleExpression 'cron(15 * * * ? *)'" in error["Message"]
    assert "cron(0 * ? * * *) (hourly)" in error["Message"]

    dims = [{"Name": "EndpointName", "Value": "churn"}]
    cw.put_metric_alarm(
        AlarmName="churn-drift",
        Namespace="servekit",
        MetricName="DriftedFeatures",
        Dimensions=dims,
        Statistic="Maximum",
        Period=2,
        EvaluationPeriods=1,
        Threshold=0.0,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )

    def alarm_state() -> str:
        return str(cw.describe_alarms(AlarmNames=["churn-drift"])["MetricAlarms"][0]["StateValue"])

    until(lambda: alarm_state() == "OK", "the alarm to start OK (no data, notBreaching)")

    arn = hourly_schedule(sm, "churn-drift", "churn-dq")
    assert arn.endswith(":monitoring-schedule/churn-drift")
    until(
        lambda: (
            sm.describe_monitoring_schedule(MonitoringScheduleName="churn-drift")["MonitoringScheduleStatus"]
            == "Scheduled"
        ),
        "the schedule to be taken up",
    )

    # drifted traffic: x moved by three standard deviations, y did not
    live = rng.normal(0.0, 1.0, size=(300, 2))
    live[:, 0] += 3.0
    body = json.dumps([[round(a, 5), round(b, 5)] for a, b in live])
    answer = json.loads(
        rt.invoke_endpoint(EndpointName="churn", Body=body, ContentType="application/json")["Body"].read()
    )
    assert len(answer["score"]) == 300
    until(lambda: list(capture.rglob("*.jsonl")), "the capture file to be published")

    def drifted() -> dict[str, Any] | None:
        done = [e for e in executions(sm, "churn-drift") if e["MonitoringExecutionStatus"] == "CompletedWithViolations"]
        return done[0] if done else None

    execution = until(drifted, "an execution over the drifted capture")
    assert execution["EndpointName"] == "churn" and execution["MonitoringType"] == "DataQuality"
    assert execution["MonitoringJobDefinitionName"] == "churn-dq"
    job_name = execution["ProcessingJobArn"].rsplit("/", 1)[1]
    job = sm.describe_processing_job(ProcessingJobName=job_name)
    assert job["ProcessingJobStatus"] == "Completed" and job["MonitoringScheduleArn"] == arn
    assert job["ExitMessage"].startswith("CompletedWithViolations: Job completed successfully with")
    output = job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
    folder = Path(output.removeprefix("file://"))
    assert folder.is_relative_to(reports / "churn" / "churn-drift")
    report = json.loads((folder / "constraint_violations.json").read_text())
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in report["violations"]}
    assert ("x", "baseline_drift_check") in checks, report
    metrics = json.loads((folder / "metrics.json").read_text())
    [window] = metrics["windows"]
    assert window["rows"] == 300 and window["features"]["x"]["drifted"]
    # before the traffic (or before its file was published) there was nothing to read: those failed, saying so
    failed = [e for e in executions(sm, "churn-drift") if e["MonitoringExecutionStatus"] == "Failed"]
    assert all(e["FailureReason"].startswith("Job inputs had no data") for e in failed), failed

    # the drift reaches the alarm through the metrics store, and SageMaker's per-feature metric is listed
    until(lambda: alarm_state() == "ALARM", "the DriftedFeatures alarm to fire")
    listed = cw.list_metrics(Namespace="aws/sagemaker/Endpoints/data-metrics")["Metrics"]
    assert {"feature_baseline_drift_x", "feature_baseline_drift_y"} <= {m["MetricName"] for m in listed}
    last = sm.describe_monitoring_schedule(MonitoringScheduleName="churn-drift")["LastMonitoringExecutionSummary"]
    assert last["MonitoringScheduleName"] == "churn-drift"

    # Stop: no new executions, while a second schedule (the witness) shows that the scheduler kept going
    sm.stop_monitoring_schedule(MonitoringScheduleName="churn-drift")
    stopped_at = datetime.now(UTC)
    hourly_schedule(sm, "witness", "churn-dq")
    assert (
        sm.describe_monitoring_schedule(MonitoringScheduleName="churn-drift")["MonitoringScheduleStatus"] == "Stopped"
    )
    until(
        lambda: any(
            e["ScheduledTime"].timestamp() >= stopped_at.timestamp() + 2 * HOUR_S for e in executions(sm, "witness")
        ),
        "the witness schedule to run two hours after the stop",
    )
    assert all(e["ScheduledTime"] <= stopped_at for e in executions(sm, "churn-drift"))

    # Start: it runs again
    sm.start_monitoring_schedule(MonitoringScheduleName="churn-drift")
    started_at = datetime.now(UTC)
    until(
        lambda: any(e["ScheduledTime"] > started_at for e in executions(sm, "churn-drift")),
        "an execution after the restart",
    )

    # Delete: the schedule goes, its history stays
    count = len(executions(sm, "churn-drift"))
    sm.delete_monitoring_schedule(MonitoringScheduleName="churn-drift")
    with pytest.raises(ClientError) as err:
        sm.describe_monitoring_schedule(MonitoringScheduleName="churn-drift")
    assert err.value.response["Error"]["Code"] == "ResourceNotFound"
    assert len(executions(sm, "churn-drift")) >= count
    names = {s["MonitoringScheduleName"] for s in sm.list_monitoring_schedules()["MonitoringScheduleSummaries"]}
    assert names == {"witness"}
    sm.delete_monitoring_schedule(MonitoringScheduleName="witness")
    sm.delete_data_quality_job_definition(JobDefinitionName="churn-dq")


def test_a_model_quality_schedule_joins_labels_and_records_accuracy(up: UpProcess, tmp_path: Path) -> None:
    from sklearn.datasets import load_iris

    from servekit.tools.demo.build import iris_onnx

    sm, rt, cw = up.sm(), up.rt(), up.client("cloudwatch")
    iris_onnx(tmp_path / "iris" / "1")
    capture = tmp_path / "capture"
    sm.create_model(ModelName="iris-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path / "iris")})
    sm.create_endpoint_config(
        EndpointConfigName="iris-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "iris-m", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
        ],
        DataCaptureConfig={
            "EnableCapture": True,
            "InitialSamplingPercentage": 100,
            "DestinationS3Uri": f"file://{capture}",
            "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
        },
    )
    sm.create_endpoint(EndpointName="iris", EndpointConfigName="iris-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="iris", WaiterConfig=FAST)

    # traffic with boto3's inference ids, and labels for it (a few the model gets wrong)
    x, y = load_iris(return_X_y=True)
    labels: dict[str, int] = {}
    right = 0
    for n, i in enumerate(range(0, 150, 5)):
        out = rt.invoke_endpoint(
            EndpointName="iris", Body=json.dumps([x[i].tolist()]), ContentType="application/json", InferenceId=f"r-{i}"
        )
        predicted = json.loads(out["Body"].read())["predictions"][0]["label"]
        labels[f"r-{i}"] = int(y[i]) if n % 6 else (int(y[i]) + 1) % 3
        right += int(predicted == labels[f"r-{i}"])
    (tmp_path / "labels.csv").write_text("inference_id,label\n" + "".join(f"{k},{v}\n" for k, v in labels.items()))
    store = tmp_path / "store"
    ingested = subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", "monitor", "labels", "--data", str(tmp_path / "labels.csv"),
         "--id-column", "inference_id", "--store", str(store)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ingested.returncode == 0, ingested.stdout + ingested.stderr
    constraints = tmp_path / "constraints.json"
    constraints.write_text(json.dumps({"multiclass_classification_constraints": {"accuracy": {"threshold": 0.99}}}))

    def published() -> int:
        return sum(len(f.read_bytes().splitlines()) for f in capture.rglob("*.jsonl"))

    until(lambda: published() == len(labels), "every request's capture record to be published")
    sm.create_model_quality_job_definition(
        JobDefinitionName="iris-mq",
        ModelQualityBaselineConfig={"ConstraintsResource": {"S3Uri": f"file://{constraints}"}},
        ModelQualityAppSpecification={
            "ImageUri": "servekit",
            "ProblemType": "MulticlassClassification",
            "ContainerArguments": ["--min-window-rows", "10", "--no-report"],
        },
        ModelQualityJobInput={
            "EndpointInput": {"EndpointName": "iris", "LocalPath": "/opt/ml/processing/input"},
            "GroundTruthS3Input": {"S3Uri": f"file://{store}"},
        },
        ModelQualityJobOutputConfig={
            "MonitoringOutputs": [{"S3Output": {"S3Uri": f"file://{tmp_path}/mq", "LocalPath": "/opt/ml/processing/o"}}]
        },
        JobResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}},
        RoleArn=ROLE,
    )
    sm.create_monitoring_schedule(
        MonitoringScheduleName="iris-quality",
        MonitoringScheduleConfig={
            "ScheduleConfig": {
                "ScheduleExpression": "cron(0 * ? * * *)",
                "DataAnalysisStartTime": "-PT24H",
                "DataAnalysisEndTime": "-PT0H",
            },
            "MonitoringJobDefinitionName": "iris-mq",
            "MonitoringType": "ModelQuality",
        },
        Tags=[{"Key": "servekit:hour-seconds", "Value": str(HOUR_S)}],
    )

    def judged() -> dict[str, Any] | None:
        found = [
            e
            for e in executions(sm, "iris-quality")
            if e["MonitoringExecutionStatus"] in ("Completed", "CompletedWithViolations")
        ]
        return found[0] if found else None

    execution = until(judged, "a model-quality execution over the labelled capture")
    assert execution["MonitoringExecutionStatus"] == "CompletedWithViolations"  # accuracy under 0.99
    job = sm.describe_processing_job(ProcessingJobName=execution["ProcessingJobArn"].rsplit("/", 1)[1])
    folder = Path(job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"].removeprefix("file://"))
    report = json.loads((folder / "constraint_violations.json").read_text())
    assert [v["metric_name"] for v in report["violations"]] == ["accuracy"]
    [window] = json.loads((folder / "quality_metrics.json").read_text())["windows"]
    assert window["labelled"] == len(labels) == 30

    # the window's accuracy is in the metrics store under SageMaker's model-metrics namespace
    dims = [{"Name": "Endpoint", "Value": "iris"}, {"Name": "MonitoringSchedule", "Value": "iris-quality"}]
    now = datetime.now(UTC)
    points = cw.get_metric_statistics(
        Namespace="aws/sagemaker/Endpoints/model-metrics",
        MetricName="accuracy",
        Dimensions=dims,
        StartTime=datetime.fromtimestamp(now.timestamp() - 600, UTC),
        EndTime=datetime.fromtimestamp(now.timestamp() + 60, UTC),
        Period=600,
        Statistics=["Maximum", "Minimum"],
    )["Datapoints"]
    assert points and points[0]["Maximum"] == pytest.approx(right / len(labels)) == points[0]["Minimum"]
    sm.delete_monitoring_schedule(MonitoringScheduleName="iris-quality")
