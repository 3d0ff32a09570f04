"""SageMaker Model Monitor's analyzer image on a real ``servekit up``, driven by boto3 exactly as the SageMaker SDK's
``DefaultModelMonitor.suggest_baseline`` drives it: a processing job of ``…/sagemaker-model-monitor-analyzer`` with
no entrypoint, the dataset at ``/opt/ml/processing/input/baseline_dataset_input`` and its configuration in
``Environment`` runs servekit's baseline in the job's sandbox and leaves SageMaker's ``statistics.json`` and
``constraints.json`` in S3; a data-quality job definition whose baseline is that output (``s3://`` of the plane's own
store) then monitors an endpoint's capture on a time-compressed schedule and finds the drifted feature."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import numpy as np
import pytest

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
ANALYZER = "156813124566.dkr.ecr.us-east-1.amazonaws.com/sagemaker-model-monitor-analyzer"
BUCKET = "sagemaker-us-east-1-000000000000"
ROLE = "arn:aws:iam::000000000000:role/monitor"
FAST = {"Delay": 1, "MaxAttempts": 120}
CSV_FORMAT = '{"csv": {"header": true, "output_columns_position": "START"}}'  # DatasetFormat.csv(header=True)
HOUR_S = 3  # each hour of the schedule lasts three seconds

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


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("analyzer") / "home", "--metrics-resolution-s", "1")
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


def training_data() -> tuple[str, np.ndarray[Any, Any]]:
    rows = np.random.default_rng(11).normal(0.0, 1.0, size=(2000, 2))
    return "x,y,plan\n" + "\n".join(f"{a:.5f},{b:.5f},{'ab'[i % 2]}" for i, (a, b) in enumerate(rows)) + "\n", rows


def baselining_request(name: str, environment: dict[str, str]) -> dict[str, Any]:
    """CreateProcessingJob as the SDK's suggest_baseline sends it (sagemaker 2.257)."""
    prefix = f"s3://{BUCKET}/model-monitor/baselining/{name}"
    return {
        "ProcessingJobName": name,
        "ProcessingInputs": [
            {
                "InputName": "baseline_dataset_input",
                "AppManaged": False,
                "S3Input": {
                    "S3Uri": f"{prefix}/input/baseline_dataset_input",
                    "LocalPath": "/opt/ml/processing/input/baseline_dataset_input",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                    "S3DataDistributionType": "FullyReplicated",
                },
            }
        ],
        "ProcessingOutputConfig": {
            "Outputs": [
                {
                    "OutputName": "monitoring_output",
                    "AppManaged": False,
                    "S3Output": {
                        "S3Uri": f"{prefix}/results",
                        "LocalPath": "/opt/ml/processing/output",
                        "S3UploadMode": "EndOfJob",
                    },
                }
            ]
        },
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 30}
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "AppSpecification": {"ImageUri": ANALYZER},
        "Environment": {
            "dataset_format": CSV_FORMAT,
            "output_path": "/opt/ml/processing/output",
            "publish_cloudwatch_metrics": "Disabled",
            "dataset_source": "/opt/ml/processing/input/baseline_dataset_input",
            **environment,
        },
        "RoleArn": ROLE,
    }


def suggest_baseline(up: UpProcess, name: str, **environment: str) -> dict[str, Any]:
    sm, s3 = up.sm(), up.client("s3")
    text, _ = training_data()
    s3.put_object(
        Bucket=BUCKET, Key=f"model-monitor/baselining/{name}/input/baseline_dataset_input/train.csv", Body=text
    )
    sm.create_processing_job(**baselining_request(name, environment))
    try:
        sm.get_waiter("processing_job_completed_or_stopped").wait(ProcessingJobName=name, WaiterConfig=FAST)
    except botocore.exceptions.WaiterError:
        pass  # Failed: the caller looks at it
    described: dict[str, Any] = sm.describe_processing_job(ProcessingJobName=name)
    return described


def read_json(up: UpProcess, key: str) -> Any:
    return json.loads(up.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read())


def test_a_baselining_job_writes_sagemakers_statistics_and_constraints(up: UpProcess) -> None:
    d = suggest_baseline(up, "baseline-1")
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    assert d["AppSpecification"] == {"ImageUri": ANALYZER}
    results = "model-monitor/baselining/baseline-1/results"
    _, rows = training_data()
    stats = read_json(up, f"{results}/statistics.json")
    assert stats["dataset"]["item_count"] == 2000
    features = {f["name"]: f for f in stats["features"]}
    assert list(features) == ["x", "y", "plan"]
    x = features["x"]["numerical_statistics"]
    assert features["x"]["inferred_type"] == "Fractional"
    assert x["common"] == {"num_present": 2000, "num_missing": 0}
    assert x["mean"] == pytest.approx(float(rows[:, 0].round(5).mean()))
    assert x["std_dev"] == pytest.approx(float(rows[:, 0].round(5).std()))
    assert len(x["distribution"]["kll"]["buckets"]) == 10
    plan = features["plan"]["string_statistics"]
    assert {b["value"]: b["count"] for b in plan["distribution"]["categorical"]["buckets"]} == {"a": 1000, "b": 1000}
    constraints = read_json(up, f"{results}/constraints.json")
    by_name = {f["name"]: f for f in constraints["features"]}
    assert by_name["x"]["num_constraints"] == {"is_non_negative": False} and by_name["x"]["completeness"] == 1.0
    assert by_name["plan"]["string_constraints"] == {"domains": ["a", "b"]}
    assert constraints["monitoring_config"]["distribution_constraints"]["perform_comparison"] == "Enabled"
    listed = up.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"{results}/")["Contents"]
    assert {o["Key"].removeprefix(f"{results}/") for o in listed} >= {"baseline.json", "thresholds.json"}

    # the job's log is servekit's analyzer's, in the processing jobs' log group
    logs = up.client("logs")
    group = "/aws/sagemaker/ProcessingJobs"
    [stream] = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="baseline-1/")["logStreams"]
    events = logs.get_log_events(logGroupName=group, logStreamName=stream["logStreamName"], startFromHead=True)
    text = "\n".join(e["message"] for e in events["events"])
    assert "servekit analyzer: 2000 rows from 1 files, 3 features" in text, text


def test_a_job_the_analyzer_cannot_run_fails_with_the_reason(up: UpProcess) -> None:
    d = suggest_baseline(up, "baseline-bad", dataset_format='{"avro": {}}')
    assert d["ProcessingJobStatus"] == "Failed"
    assert d["FailureReason"].startswith("ClientError: dataset_format 'avro' is not one servekit's analyzer reads")
    preprocess = suggest_baseline(up, "baseline-pre", record_preprocessor_script="/opt/ml/processing/code/pre.py")
    assert preprocess["ProcessingJobStatus"] == "Failed"
    assert "record_preprocessor_script is not supported" in preprocess["FailureReason"]


@pytest.mark.slow  # make test-slow
def test_a_schedule_judges_captured_traffic_against_the_baselining_jobs_output(up: UpProcess, tmp_path: Path) -> None:
    sm, rt = up.sm(), up.rt()
    d = suggest_baseline(up, "baseline-2")
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    results = d["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]

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

    # what DefaultModelMonitor.create_monitoring_schedule sends: the baselining job's files as s3:// URIs
    definition = {
        "JobDefinitionName": "churn-dq",
        "DataQualityBaselineConfig": {
            "ConstraintsResource": {"S3Uri": f"{results}/constraints.json"},
            "StatisticsResource": {"S3Uri": f"{results}/statistics.json"},
            "BaseliningJobName": "baseline-2",
        },
        "DataQualityAppSpecification": {
            "ImageUri": ANALYZER,
            "ContainerArguments": ["--no-report", "--min-window-rows", "50"],
            "Environment": {"publish_cloudwatch_metrics": "Enabled"},
        },
        "DataQualityJobInput": {
            "EndpointInput": {
                "EndpointName": "churn",
                "LocalPath": "/opt/ml/processing/input/endpoint",
                "S3InputMode": "File",
                "S3DataDistributionType": "FullyReplicated",
            }
        },
        "DataQualityJobOutputConfig": {
            "MonitoringOutputs": [
                {
                    "S3Output": {
                        "S3Uri": f"file://{tmp_path / 'reports'}",
                        "LocalPath": "/opt/ml/processing/output",
                        "S3UploadMode": "Continuous",
                    }
                }
            ]
        },
        "JobResources": {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 30}},
        "RoleArn": ROLE,
    }
    missing = {**definition, "JobDefinitionName": "elsewhere"}
    missing["DataQualityBaselineConfig"] = {"ConstraintsResource": {"S3Uri": "s3://no-such-bucket/constraints.json"}}
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        sm.create_data_quality_job_definition(**missing)
    assert "is not in servekit up's own S3 store" in refused.value.response["Error"]["Message"]
    sm.create_data_quality_job_definition(**definition)
    sm.create_monitoring_schedule(
        MonitoringScheduleName="churn-hourly",
        MonitoringScheduleConfig={
            "ScheduleConfig": {
                "ScheduleExpression": "cron(0 * ? * * *)",
                "DataAnalysisStartTime": "-PT24H",
                "DataAnalysisEndTime": "-PT0H",
            },
            "MonitoringJobDefinitionName": "churn-dq",
            "MonitoringType": "DataQuality",
        },
        Tags=[{"Key": "servekit:hour-seconds", "Value": str(HOUR_S)}],
    )
    schedule = sm.describe_monitoring_schedule(MonitoringScheduleName="churn-hourly")
    assert schedule["MonitoringScheduleConfig"]["MonitoringJobDefinitionName"] == "churn-dq"

    # drifted traffic: x moved by three standard deviations, y did not
    live = np.random.default_rng(5).normal(0.0, 1.0, size=(300, 2))
    live[:, 0] += 3.0
    body = json.dumps([[round(a, 5), round(b, 5)] for a, b in live])
    rt.invoke_endpoint(EndpointName="churn", Body=body, ContentType="application/json")["Body"].read()
    until(lambda: list(capture.rglob("*.jsonl")), "the capture file to be published")

    def drifted() -> dict[str, Any] | None:
        done = sm.list_monitoring_executions(
            MonitoringScheduleName="churn-hourly", StatusEquals="CompletedWithViolations"
        )["MonitoringExecutionSummaries"]
        return done[0] if done else None

    execution = until(drifted, "an execution over the drifted capture")
    job = sm.describe_processing_job(ProcessingJobName=execution["ProcessingJobArn"].rsplit("/", 1)[1])
    folder = Path(job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"].removeprefix("file://"))
    report = json.loads((folder / "constraint_violations.json").read_text())
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in report["violations"]}
    assert ("x", "baseline_drift_check") in checks and ("y", "baseline_drift_check") not in checks, report
