"""SageMaker Model Monitor code a user writes with the SDK, run unchanged by `make test-sdk` in the SDK's virtualenv
after `eval "$(servekit env)"`: DefaultModelMonitor.suggest_baseline on a CSV (the analyzer image's processing job),
the baseline's statistics and constraints read back, then an hourly schedule on an endpoint that captures its
traffic, described, and its executions listed once drifted traffic made one find violations. The schedule's hours
are compressed (servekit's tag servekit:hour-seconds, passed as the monitor's tags). Locations servekit needs local
(the endpoint's capture, the schedule's reports) are file:// URIs. Prints one ``STEP <name> <json>`` line per step."""

import json
import random
import sys
import time
from pathlib import Path

import sagemaker
from sagemaker.deserializers import JSONDeserializer
from sagemaker.model_monitor import CronExpressionGenerator, DataCaptureConfig, DefaultModelMonitor
from sagemaker.model_monitor.dataset_format import DatasetFormat
from sagemaker.serializers import JSONSerializer
from sagemaker.sklearn import SKLearnModel

ROLE = "arn:aws:iam::000000000000:role/servekit-sdk-test"


def step(name, value):
    print("STEP", name, json.dumps(value), flush=True)


model_tar, entry_point, work = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
work.mkdir(parents=True, exist_ok=True)
session = sagemaker.Session()
bucket = session.default_bucket()
rng = random.Random(7)

# training data: two features the endpoint's model takes, in its order
train = work / "train.csv"
rows = [(rng.gauss(0.0, 1.0), rng.gauss(5.0, 2.0)) for _ in range(1000)]
train.write_text("x,y\n" + "\n".join(f"{a:.5f},{b:.5f}" for a, b in rows) + "\n")

monitor = DefaultModelMonitor(
    role=ROLE,
    instance_count=1,
    instance_type="ml.m5.xlarge",
    volume_size_in_gb=20,
    max_runtime_in_seconds=1800,
    sagemaker_session=session,
    tags=[{"Key": "servekit:hour-seconds", "Value": "10"}],
)
step("image", monitor.image_uri)
job = monitor.suggest_baseline(
    baseline_dataset=str(train),
    dataset_format=DatasetFormat.csv(header=True),
    output_s3_uri=f"s3://{bucket}/model-monitor/sdk-baseline",
    wait=True,
    logs=True,
)
step("baseline_job", job.describe()["ProcessingJobStatus"])
statistics = monitor.baseline_statistics()
step("statistics_uri", statistics.file_s3_uri)
step(
    "statistics",
    {
        "item_count": statistics.body_dict["dataset"]["item_count"],
        "features": {
            f["name"]: [f["inferred_type"], round(f["numerical_statistics"]["mean"], 6)]
            for f in statistics.body_dict["features"]
        },
    },
)
constraints = monitor.suggested_constraints()
step(
    "constraints",
    {
        "features": {f["name"]: f["completeness"] for f in constraints.body_dict["features"]},
        "comparison_threshold": constraints.body_dict["monitoring_config"]["distribution_constraints"][
            "comparison_threshold"
        ],
    },
)

# an endpoint that captures its traffic
model_uri = sagemaker.s3.S3Uploader.upload(str(model_tar), f"s3://{bucket}/mm/model", sagemaker_session=session)
model = SKLearnModel(
    model_data=model_uri,
    role=ROLE,
    entry_point=str(entry_point),
    framework_version="1.2-1",
    sagemaker_session=session,
)
capture = work / "capture"
predictor = model.deploy(
    initial_instance_count=1,
    instance_type="ml.m5.large",
    serializer=JSONSerializer(),
    deserializer=JSONDeserializer(),
    data_capture_config=DataCaptureConfig(
        enable_capture=True,
        sampling_percentage=100,
        destination_s3_uri=f"file://{capture}",
        sagemaker_session=session,
    ),
)
step("predict", predictor.predict([[1.0, 2.0]]))

# the schedule, against the baselining job's files (s3:// of servekit up's store)
reports = work / "reports"
monitor.create_monitoring_schedule(
    endpoint_input=predictor.endpoint_name,
    output_s3_uri=f"file://{reports}",
    statistics=statistics,
    constraints=constraints,
    schedule_cron_expression=CronExpressionGenerator.hourly(),
    enable_cloudwatch_metrics=True,
)
described = monitor.describe_schedule()
step(
    "schedule",
    {
        "name": described["MonitoringScheduleName"] == monitor.monitoring_schedule_name,
        "type": described["MonitoringType"],
        "expression": described["MonitoringScheduleConfig"]["ScheduleConfig"]["ScheduleExpression"],
        "endpoint": described["EndpointName"] == predictor.endpoint_name,
    },
)

# drifted traffic (x moved by three standard deviations) until an execution reports violations; each compressed
# hour is ten seconds and judges the traffic captured in it
client = session.sagemaker_client
deadline = time.monotonic() + 240
found = []
while not found and time.monotonic() < deadline:
    predictor.predict([[rng.gauss(3.0, 1.0), rng.gauss(5.0, 2.0)] for _ in range(100)])
    found = client.list_monitoring_executions(
        MonitoringScheduleName=monitor.monitoring_schedule_name, StatusEquals="CompletedWithViolations"
    )["MonitoringExecutionSummaries"]
    time.sleep(0.5)  # traffic paced for the monitor to read it, while polling the schedule's progress
step("found", bool(found))
executions = monitor.list_executions()  # each as the SDK builds it from DescribeProcessingJob, failed ones too
latest = next(e for e in reversed(executions) if e.describe().get("ExitMessage", "").startswith("CompletedWith"))
folder = Path(latest.output.destination.removeprefix("file://"))
report = json.loads((folder / "constraint_violations.json").read_text())
step(
    "violations",
    sorted({(v["feature_name"], v["constraint_check_type"]) for v in report["violations"]}),
)

monitor.delete_monitoring_schedule()
predictor.delete_endpoint()
step(
    "deleted", [s["MonitoringScheduleName"] for s in client.list_monitoring_schedules()["MonitoringScheduleSummaries"]]
)
