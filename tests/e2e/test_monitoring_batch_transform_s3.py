"""Model Monitor on a real ``servekit up`` as the SageMaker SDK drives it, with its ``s3://`` defaults: a data-quality
job definition whose input is a batch transform job's capture (``BatchTransformInput``: manifests under
``<destination>/input/yyyy/mm/dd/hh/`` listing the transform's input files in the plane's S3), or an endpoint's
capture, and whose output is an ``s3://`` URI of the plane's own store; a one-time (``NOW``)
schedule runs it once, its reports are S3 objects under SageMaker's layout, and an empty capture ends the execution
Failed saying the inputs had no data."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from servekit.testing.hosting import UpProcess, until

pytestmark = pytest.mark.e2e  # about 7 s
BUCKET = "sagemaker-us-east-1-000000000000"  # the SDK's default bucket, made by servekit up
ROLE = "arn:aws:iam::000000000000:role/monitor"
FAST = {"Delay": 1, "MaxAttempts": 120}
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


def make_baseline(tmp_path: Path) -> Path:
    rows = np.random.default_rng(11).normal(0.0, 1.0, size=(2000, 2))
    train = tmp_path / "train.csv"
    train.write_text("x,y\n" + "\n".join(f"{a:.5f},{b:.5f}" for a, b in rows) + "\n")
    out = tmp_path / "baseline"
    made = subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", "monitor", "baseline", "--data", str(train), "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    return out


def definition(name: str, capture: str, output: str, baseline: Path) -> dict[str, Any]:
    """CreateDataQualityJobDefinition as DefaultModelMonitor sends it for a batch_transform_input (for an endpoint
    when ``capture`` is no URI but its name)."""
    job_input: dict[str, Any] = {"EndpointInput": {"EndpointName": capture, "LocalPath": "/opt/ml/processing/input"}}
    if "://" in capture:
        job_input = {
            "BatchTransformInput": {
                "DataCapturedDestinationS3Uri": capture,
                "DatasetFormat": {"Csv": {"Header": False}},
                "LocalPath": "/opt/ml/processing/input",
                "S3InputMode": "File",
                "S3DataDistributionType": "FullyReplicated",
            }
        }
    return {
        "JobDefinitionName": name,
        "DataQualityBaselineConfig": {"ConstraintsResource": {"S3Uri": f"file://{baseline}"}},
        "DataQualityAppSpecification": {
            "ImageUri": "156813124566.dkr.ecr.us-east-1.amazonaws.com/sagemaker-model-monitor-analyzer",
            "ContainerArguments": ["--no-report", "--min-window-rows", "50"],
            "Environment": {"publish_cloudwatch_metrics": "Disabled"},
        },
        "DataQualityJobInput": job_input,
        "DataQualityJobOutputConfig": {
            "MonitoringOutputs": [
                {"S3Output": {"S3Uri": output, "LocalPath": "/opt/ml/processing/output", "S3UploadMode": "EndOfJob"}}
            ]
        },
        "JobResources": {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 20}},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "RoleArn": ROLE,
    }


def run_once(sm: Any, name: str, job_definition: str) -> dict[str, Any]:
    """A NOW schedule over the last hour, as CronExpressionGenerator.now() makes one; its one finished execution."""
    sm.create_monitoring_schedule(
        MonitoringScheduleName=name,
        MonitoringScheduleConfig={
            "ScheduleConfig": {
                "ScheduleExpression": "NOW",
                "DataAnalysisStartTime": "-PT1H",
                "DataAnalysisEndTime": "-PT0H",
            },
            "MonitoringJobDefinitionName": job_definition,
            "MonitoringType": "DataQuality",
        },
    )

    def finished() -> dict[str, Any] | None:
        last = sm.describe_monitoring_schedule(MonitoringScheduleName=name).get("LastMonitoringExecutionSummary")
        done = last and last["MonitoringExecutionStatus"] in ("Completed", "CompletedWithViolations", "Failed")
        return last if done else None

    execution: dict[str, Any] = until(finished, f"the execution of {name} to finish")
    return execution


def test_a_batch_transform_capture_is_judged_and_the_reports_land_in_the_planes_s3(
    up: UpProcess, tmp_path: Path
) -> None:
    sm, s3 = up.sm(), up.client("s3")
    baseline = make_baseline(tmp_path)

    # what a batch transform job with DataCaptureConfig left: its input file, and a manifest naming it in this hour
    live = np.random.default_rng(5).normal(0.0, 1.0, size=(300, 2))
    live[:, 0] += 3.0  # x drifted by three standard deviations, y did not
    s3.put_object(Bucket=BUCKET, Key="transform/in/part-0.csv", Body="\n".join(f"{a:.5f},{b:.5f}" for a, b in live))
    hour = datetime.now(UTC).strftime("%Y/%m/%d/%H")
    capture = f"s3://{BUCKET}/batch-capture/transform-1"
    manifest = [{"prefix": f"s3://{BUCKET}/transform/in/"}, "part-0.csv"]
    s3.put_object(Bucket=BUCKET, Key=f"batch-capture/transform-1/input/{hour}/m.json", Body=json.dumps(manifest))

    # an output in a bucket that is not servekit's is refused, saying where outputs can go
    output = f"s3://{BUCKET}/monitoring-output/run-1"
    with pytest.raises(ClientError) as refused:
        sm.create_data_quality_job_definition(**definition("elsewhere", capture, "s3://not-servekits/out", baseline))
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "is not in servekit up's own S3 store" in refused.value.response["Error"]["Message"]

    request = definition("batch-dq", capture, output, baseline)
    sm.create_data_quality_job_definition(**request)
    described = sm.describe_data_quality_job_definition(JobDefinitionName="batch-dq")
    assert described["DataQualityJobInput"] == request["DataQualityJobInput"]  # answered back as given

    execution = run_once(sm, "batch-once", "batch-dq")
    assert execution["MonitoringExecutionStatus"] == "CompletedWithViolations", execution
    assert "EndpointName" not in execution
    job = sm.describe_processing_job(ProcessingJobName=execution["ProcessingJobArn"].rsplit("/", 1)[1])
    assert job["ProcessingJobStatus"] == "Completed"
    assert job["ProcessingInputs"][0]["S3Input"]["S3Uri"] == capture
    uri = job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
    assert uri.startswith(f"{output}/transform-1/batch-once/{hour}"), uri  # SageMaker's layout, in the store
    [listed] = sm.list_monitoring_executions(MonitoringScheduleName="batch-once")["MonitoringExecutionSummaries"]
    assert listed["ProcessingJobArn"] == execution["ProcessingJobArn"]

    prefix = uri.removeprefix(f"s3://{BUCKET}/")
    keys = {o["Key"].removeprefix(f"{prefix}/") for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]}
    assert {"constraint_violations.json", "metrics.json", "servekit-monitor.log"} <= keys, keys
    assert not any(k.startswith(".batch-capture") for k in keys)  # what the execution read is not an output
    got = s3.get_object(Bucket=BUCKET, Key=f"{prefix}/constraint_violations.json")
    assert got["ETag"].strip('"') and got["ContentType"] == "application/json"
    report = json.loads(got["Body"].read())
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in report["violations"]}
    assert ("x", "baseline_drift_check") in checks and ("y", "baseline_drift_check") not in checks, report
    metrics = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{prefix}/metrics.json")["Body"].read())
    assert metrics["windows"][-1]["rows"] == 300

    # nothing captured in the window: the execution fails as an endpoint's empty window does
    sm.create_data_quality_job_definition(
        **definition("empty-dq", f"s3://{BUCKET}/batch-capture/never-ran", output, baseline)
    )
    empty = run_once(sm, "batch-empty", "empty-dq")
    assert empty["MonitoringExecutionStatus"] == "Failed"
    assert empty["FailureReason"].startswith("Job inputs had no data: no batch transform capture under"), empty


@pytest.mark.slow  # an endpoint and a monitor run: over 10 s
def test_an_endpoints_capture_is_monitored_into_the_planes_s3(up: UpProcess, tmp_path: Path) -> None:
    sm, rt, s3 = up.sm(), up.rt(), up.client("s3")
    baseline = make_baseline(tmp_path)
    model = tmp_path / "m" / "1" / "code"
    model.mkdir(parents=True)
    (model / "inference.py").write_text(INFERENCE_PY)
    sm.create_model(ModelName="churn-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path / "m")})
    sm.create_endpoint_config(
        EndpointConfigName="churn-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "churn-m", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
        ],
        DataCaptureConfig={
            "EnableCapture": True,
            "InitialSamplingPercentage": 100,
            "DestinationS3Uri": f"file://{tmp_path}/capture",
            "CaptureOptions": [{"CaptureMode": "Input"}],
        },
    )
    sm.create_endpoint(EndpointName="churn", EndpointConfigName="churn-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="churn", WaiterConfig=FAST)
    live = np.random.default_rng(5).normal(0.0, 1.0, size=(300, 2))
    live[:, 0] += 3.0
    body = json.dumps([[round(a, 5), round(b, 5)] for a, b in live])
    rt.invoke_endpoint(EndpointName="churn", Body=body, ContentType="application/json")["Body"].read()
    until(lambda: list((tmp_path / "capture").rglob("*.jsonl")), "the capture file to be published")

    output = f"s3://{BUCKET}/monitoring-output/endpoint"
    sm.create_data_quality_job_definition(**definition("churn-dq", "churn", output, baseline))
    execution = run_once(sm, "churn-once", "churn-dq")
    assert execution["MonitoringExecutionStatus"] == "CompletedWithViolations", execution
    assert execution["EndpointName"] == "churn"
    job = sm.describe_processing_job(ProcessingJobName=execution["ProcessingJobArn"].rsplit("/", 1)[1])
    assert job["ProcessingInputs"][0]["S3Input"]["S3Uri"] == f"file://{tmp_path}/capture/churn"
    uri = job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
    assert uri.startswith(f"{output}/churn/churn-once/"), uri
    key = f"{uri.removeprefix(f's3://{BUCKET}/')}/constraint_violations.json"
    report = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in report["violations"]}
    assert ("x", "baseline_drift_check") in checks, report


COUNT_PY = textwrap.dedent(
    """
    import json

    def model_fn(model_dir):
        return None

    def transform_fn(model, data, content_type, accept):
        text = data.decode() if isinstance(data, bytes) else data
        return json.dumps({"rows": len(text.splitlines())}), "application/json"
    """
)


def test_a_transform_jobs_own_capture_is_monitored_end_to_end(up: UpProcess, tmp_path: Path) -> None:
    sm, s3 = up.sm(), up.client("s3")
    baseline = make_baseline(tmp_path)
    code = tmp_path / "count" / "1" / "code"
    code.mkdir(parents=True)
    (code / "inference.py").write_text(COUNT_PY)
    sm.create_model(ModelName="count", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path / "count")})
    live = np.random.default_rng(5).normal(0.0, 1.0, size=(300, 2))
    live[:, 0] += 3.0
    s3.put_object(Bucket=BUCKET, Key="jobs/in/part-0.csv", Body="\n".join(f"{a:.5f},{b:.5f}" for a, b in live))
    capture = f"s3://{BUCKET}/batch-capture/scoring"
    started = datetime.now(UTC)
    sm.create_transform_job(
        TransformJobName="scoring",
        ModelName="count",
        TransformInput={
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/jobs/in"}},
            "ContentType": "text/csv",
        },
        TransformOutput={"S3OutputPath": f"s3://{BUCKET}/jobs/out"},
        TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1},
        DataCaptureConfig={"DestinationS3Uri": capture},  # what BatchDataCaptureConfig sends
    )
    sm.get_waiter("transform_job_completed_or_stopped").wait(TransformJobName="scoring", WaiterConfig=FAST)
    described = sm.describe_transform_job(TransformJobName="scoring")
    assert described["TransformJobStatus"] == "Completed", described.get("FailureReason")
    assert described["DataCaptureConfig"]["DestinationS3Uri"] == capture

    # SageMaker's layout: manifests under input/ and output/, labelled with the hour the job started
    hours = {started.strftime("%Y/%m/%d/%H"), datetime.now(UTC).strftime("%Y/%m/%d/%H")}
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="batch-capture/scoring/")["Contents"]
    keys = {o["Key"].removeprefix("batch-capture/scoring/") for o in listed}
    assert any(keys == {f"input/{h}/scoring.json", f"output/{h}/scoring.json"} for h in hours), keys
    [key] = [k for k in keys if k.startswith("input/")]
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=f"batch-capture/scoring/{key}")["Body"].read())
    assert manifest == [{"prefix": f"s3://{BUCKET}/jobs/in/"}, "part-0.csv"]

    sm.create_data_quality_job_definition(
        **definition("scoring-dq", capture, f"s3://{BUCKET}/monitoring-output/scoring", baseline)
    )
    execution = run_once(sm, "scoring-once", "scoring-dq")
    assert execution["MonitoringExecutionStatus"] == "CompletedWithViolations", execution
    job = sm.describe_processing_job(ProcessingJobName=execution["ProcessingJobArn"].rsplit("/", 1)[1])
    uri = job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
    key = f"{uri.removeprefix(f's3://{BUCKET}/')}/constraint_violations.json"
    report = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in report["violations"]}
    assert ("x", "baseline_drift_check") in checks, report
