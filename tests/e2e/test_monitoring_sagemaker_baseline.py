"""Data-quality schedules on a real ``servekit up`` (boto3) with a baseline in SageMaker's own format — a
``statistics.json`` and a ``constraints.json`` put into the plane's S3 under separate prefixes, as the SageMaker SDK's
``Statistics.from_file_path`` / ``Constraints.from_file_path`` do — and with no baseline at all (SageMaker's default
schedule: the execution computes the window's statistics only). A file that is not JSON is refused when the job
definition is made; one of the wrong shape fails the execution that reads it, as in SageMaker.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from servekit.testing.hosting import UpProcess, until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # an endpoint and two monitor runs: over 10 s
BUCKET = "sagemaker-us-east-1-000000000000"  # the SDK's default bucket, made by servekit up
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


def sagemaker_statistics(training: np.ndarray[Any, Any]) -> dict[str, Any]:
    """statistics.json as Model Monitor's analyzer writes it for two numerical CSV columns (``_c0``, ``_c1``)."""
    features = []
    for j in range(training.shape[1]):
        x = training[:, j]
        counts, edges = np.histogram(x, bins=10)
        buckets = [{"lower_bound": float(edges[i]), "upper_bound": float(edges[i + 1]), "count": float(counts[i])}
                   for i in range(10)]  # fmt: skip
        features.append(
            {
                "name": f"_c{j}",
                "inferred_type": "Fractional",
                "numerical_statistics": {
                    "common": {"num_present": len(x), "num_missing": 0},
                    "mean": float(x.mean()), "sum": float(x.sum()), "std_dev": float(x.std()),
                    "min": float(x.min()), "max": float(x.max()),
                    "distribution": {"kll": {"buckets": buckets}},
                },
            }
        )  # fmt: skip
    return {"version": 0.0, "dataset": {"item_count": len(training)}, "features": features}


CONSTRAINTS = {
    "version": 0.0,
    "features": [
        {"name": f"_c{j}", "inferred_type": "Fractional", "completeness": 1.0,
         "num_constraints": {"is_non_negative": False}} for j in range(2)
    ],
    "monitoring_config": {
        "evaluate_constraints": "Enabled", "emit_metrics": "Enabled", "datatype_check_threshold": 0.1,
        "domain_content_threshold": 0.1,
        "distribution_constraints": {"perform_comparison": "Enabled", "comparison_threshold": 0.1,
                                     "comparison_method": "Robust"},
    },
}  # fmt: skip


def definition(name: str, output: str, baseline: dict[str, Any] | None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "JobDefinitionName": name,
        "DataQualityAppSpecification": {
            "ImageUri": "156813124566.dkr.ecr.us-east-1.amazonaws.com/sagemaker-model-monitor-analyzer",
            "ContainerArguments": ["--no-report", "--min-window-rows", "50"],
            "Environment": {"publish_cloudwatch_metrics": "Disabled"},
        },
        "DataQualityJobInput": {"EndpointInput": {"EndpointName": "churn", "LocalPath": "/opt/ml/processing/input"}},
        "DataQualityJobOutputConfig": {
            "MonitoringOutputs": [{"S3Output": {"S3Uri": output, "LocalPath": "/opt/ml/processing/output"}}]
        },
        "JobResources": {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 20}},
        "RoleArn": "arn:aws:iam::000000000000:role/monitor",
    }
    if baseline is not None:
        request["DataQualityBaselineConfig"] = baseline
    return request


def run_once(sm: Any, name: str, job_definition: str) -> dict[str, Any]:
    """A NOW schedule over the last hour; its one finished execution."""
    sm.create_monitoring_schedule(
        MonitoringScheduleName=name,
        MonitoringScheduleConfig={
            "ScheduleConfig": {"ScheduleExpression": "NOW", "DataAnalysisStartTime": "-PT1H",
                               "DataAnalysisEndTime": "-PT0H"},
            "MonitoringJobDefinitionName": job_definition,
            "MonitoringType": "DataQuality",
        },
    )  # fmt: skip

    def finished() -> dict[str, Any] | None:
        last = sm.describe_monitoring_schedule(MonitoringScheduleName=name).get("LastMonitoringExecutionSummary")
        done = last and last["MonitoringExecutionStatus"] in ("Completed", "CompletedWithViolations", "Failed")
        return last if done else None

    execution: dict[str, Any] = until(finished, f"the execution of {name} to finish")
    return execution


def alert_of(sm: Any, schedule: str) -> str:
    """The status of the schedule's one alert (the default one every schedule has)."""
    [alert] = sm.list_monitoring_alerts(MonitoringScheduleName=schedule)["MonitoringAlertSummaries"]
    return str(alert["AlertStatus"])


def output_keys(sm: Any, s3: Any, execution: dict[str, Any]) -> tuple[str, set[str]]:
    job = sm.describe_processing_job(ProcessingJobName=execution["ProcessingJobArn"].rsplit("/", 1)[1])
    prefix = job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"].removeprefix(f"s3://{BUCKET}/")
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents") or []
    return prefix, {o["Key"].removeprefix(f"{prefix}/") for o in listed}


def test_sagemaker_format_baseline_judges_the_capture_and_no_baseline_gives_statistics(
    up: UpProcess, tmp_path: Path
) -> None:
    sm, rt, s3 = up.sm(), up.rt(), up.client("s3")
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
    sm.get_waiter("endpoint_in_service").wait(EndpointName="churn", WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    live = np.random.default_rng(5).normal(0.0, 1.0, size=(300, 2))
    live[:, 0] += 3.0  # _c0 drifted by three standard deviations, _c1 did not
    body = json.dumps([[round(a, 5), round(b, 5)] for a, b in live])
    rt.invoke_endpoint(EndpointName="churn", Body=body, ContentType="application/json")["Body"].read()
    until(lambda: list((tmp_path / "capture").rglob("*.jsonl")), "the capture file to be published")

    # SageMaker's files, each under its own prefix as the SDK uploads them
    training = np.random.default_rng(11).normal(0.0, 1.0, size=(2000, 2))
    s3.put_object(Bucket=BUCKET, Key="base/s-1/statistics.json", Body=json.dumps(sagemaker_statistics(training)))
    s3.put_object(Bucket=BUCKET, Key="base/c-1/constraints.json", Body=json.dumps(CONSTRAINTS))
    baseline = {
        "StatisticsResource": {"S3Uri": f"s3://{BUCKET}/base/s-1/statistics.json"},
        "ConstraintsResource": {"S3Uri": f"s3://{BUCKET}/base/c-1/constraints.json"},
    }
    request = definition("sm-dq", f"s3://{BUCKET}/monitoring-output/sm", baseline)
    sm.create_data_quality_job_definition(**request)
    described = sm.describe_data_quality_job_definition(JobDefinitionName="sm-dq")
    assert described["DataQualityBaselineConfig"] == baseline  # answered back as given (the SDK compares them)
    execution = run_once(sm, "sm-once", "sm-dq")
    assert execution["MonitoringExecutionStatus"] == "CompletedWithViolations", execution
    prefix, keys = output_keys(sm, s3, execution)
    assert "constraint_violations.json" in keys and not any(k.startswith(".baseline") for k in keys), keys
    report = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{prefix}/constraint_violations.json")["Body"].read())
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in report["violations"]}
    assert ("_c0", "baseline_drift_check") in checks and ("_c1", "baseline_drift_check") not in checks, report
    assert alert_of(sm, "sm-once") == "InAlert"  # the schedule's default alert counts the violations
    # the execution's log is its processing job's stream in CloudWatch Logs, naming the job first (what the SDK's
    # get_latest_execution_logs() prints)
    logs, job = up.client("logs"), execution["ProcessingJobArn"].rsplit("/", 1)[1]
    group = "/aws/sagemaker/ProcessingJobs"
    [stream] = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=job)["logStreams"]
    events = logs.get_log_events(logGroupName=group, logStreamName=stream["logStreamName"])["events"]
    assert events[0]["message"].startswith(f"Processing job {execution['ProcessingJobArn']}: monitoring schedule")

    # a file that is not SageMaker's statistics is refused when the job definition is made, naming it
    s3.put_object(Bucket=BUCKET, Key="base/bad/statistics.json", Body=b"not json")
    bad = {"StatisticsResource": {"S3Uri": f"s3://{BUCKET}/base/bad/statistics.json"}}
    with pytest.raises(ClientError) as refused:
        sm.create_data_quality_job_definition(**definition("bad-dq", f"s3://{BUCKET}/out", bad))
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert f"s3://{BUCKET}/base/bad/statistics.json" in error["Message"] and "not a JSON document" in error["Message"]

    # a JSON file of the wrong shape is taken, as SageMaker takes it (the SDK's update can name constraints.json as the
    # statistics), and fails the execution that reads it, saying what is wrong
    swapped = {"StatisticsResource": {"S3Uri": f"s3://{BUCKET}/base/c-1/constraints.json"}}
    sm.create_data_quality_job_definition(**definition("swapped-dq", f"s3://{BUCKET}/monitoring-output/sw", swapped))
    failed = run_once(sm, "swapped-once", "swapped-dq")
    assert failed["MonitoringExecutionStatus"] == "Failed", failed
    assert "statistics.json" in failed["FailureReason"] and "numerical_statistics" in failed["FailureReason"], failed
    assert alert_of(sm, "swapped-once") == "InAlert"

    # no baseline: the execution completes with the window's statistics and checks nothing
    sm.create_data_quality_job_definition(**definition("plain-dq", f"s3://{BUCKET}/monitoring-output/plain", None))
    plain = run_once(sm, "plain-once", "plain-dq")
    assert plain["MonitoringExecutionStatus"] == "Completed", plain
    assert alert_of(sm, "plain-once") == "OK"
    prefix, keys = output_keys(sm, s3, plain)
    assert "statistics.json" in keys and "constraint_violations.json" not in keys, keys
    statistics = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{prefix}/statistics.json")["Body"].read())
    assert statistics["dataset"]["item_count"] == 300
    assert [f["name"] for f in statistics["features"]] == ["_c0", "_c1"]
    mean = statistics["features"][0]["numerical_statistics"]["mean"]
    assert mean == pytest.approx(float(live[:, 0].mean()), abs=1e-3)
