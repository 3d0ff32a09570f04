"""Processing jobs on a real ``servekit up`` through boto3, as the SageMaker SDK's processors send them: a script
that hard-codes ``/opt/ml/processing/...`` paths reads its input and writes its outputs there, started by
``python3`` as the entrypoint says; the outputs land in S3, the log in CloudWatch Logs; failures and bad paths end
as SageMaker ends them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
BUCKET = "sagemaker-us-east-1-000000000000"
FAST = {"Delay": 1, "MaxAttempts": 120}
CLEAN = """
import os, sys
rows = open("/opt/ml/processing/input/raw.csv").read().split()
kept = [r for r in rows if "?" not in r]
os.makedirs("/opt/ml/processing/train/part", exist_ok=True)
open("/opt/ml/processing/train/part/clean.csv", "w").write("\\n".join(kept) + "\\n")
open("/opt/ml/processing/report/report.txt", "w").write(f"kept {len(kept)} of {len(rows)} {sys.argv[1:]}")
# inputs are writable, as a processing container's are (the SDK's FrameworkProcessor unpacks its code there)
open("/opt/ml/processing/input/code/unpacked.txt", "w").write("unpacked")
assert open("/opt/ml/processing/input/code/unpacked.txt").read() == "unpacked"
print("cleaned", len(kept), "rows with", sys.executable)
"""


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("processing") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def clients(up: UpProcess) -> tuple[Any, Any, Any]:
    key = Credentials.load_or_create(up.home).admin
    kw = {
        "endpoint_url": up.url,
        "region_name": "us-east-1",
        "aws_access_key_id": key.access_key_id,
        "aws_secret_access_key": key.secret_access_key,
    }
    session = boto3.session.Session()
    return session.client("sagemaker", **kw), session.client("s3", **kw), session.client("logs", **kw)


def request(s3: Any, name: str, code: str) -> dict[str, Any]:
    s3.put_object(Bucket=BUCKET, Key=f"{name}/input/code/clean.py", Body=code.encode())
    s3.put_object(Bucket=BUCKET, Key=f"{name}/raw/raw.csv", Body=b"1,2\n?,3\n4,5\n")
    return {
        "ProcessingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/processor",
        "AppSpecification": {
            "ImageUri": IMAGE,
            "ContainerEntrypoint": ["python3", "/opt/ml/processing/input/code/clean.py"],
            "ContainerArguments": ["--split", "0.2"],
        },
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 10}
        },
        "ProcessingInputs": [
            {
                "InputName": "input-1",
                "S3Input": {
                    "S3Uri": f"s3://{BUCKET}/{name}/raw",
                    "LocalPath": "/opt/ml/processing/input",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            },
            {
                "InputName": "code",
                "S3Input": {
                    "S3Uri": f"s3://{BUCKET}/{name}/input/code/clean.py",
                    "LocalPath": "/opt/ml/processing/input/code",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            },
        ],
        "ProcessingOutputConfig": {
            "Outputs": [
                {
                    "OutputName": "train",
                    "S3Output": {
                        "S3Uri": f"s3://{BUCKET}/{name}/output/train",
                        "LocalPath": "/opt/ml/processing/train",
                        "S3UploadMode": "EndOfJob",
                    },
                },
                {
                    "OutputName": "report",
                    "S3Output": {
                        "S3Uri": f"s3://{BUCKET}/{name}/output/report",
                        "LocalPath": "/opt/ml/processing/report",
                        "S3UploadMode": "EndOfJob",
                    },
                },
            ]
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def test_a_script_with_hard_coded_paths_runs_and_its_outputs_land_in_s3(up: UpProcess) -> None:
    sm, s3, logs = clients(up)
    sm.create_processing_job(**request(s3, "clean-1", CLEAN))
    sm.get_waiter("processing_job_completed_or_stopped").wait(ProcessingJobName="clean-1", WaiterConfig=FAST)
    d = sm.describe_processing_job(ProcessingJobName="clean-1")
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    assert d["StoppingCondition"] == {"MaxRuntimeInSeconds": 600}
    assert d["ProcessingStartTime"] <= d["ProcessingEndTime"]
    clean = s3.get_object(Bucket=BUCKET, Key="clean-1/output/train/part/clean.csv")["Body"].read()
    assert clean == b"1,2\n4,5\n"
    report = s3.get_object(Bucket=BUCKET, Key="clean-1/output/report/report.txt")["Body"].read().decode()
    assert report == "kept 2 of 3 ['--split', '0.2']"
    stream = logs.describe_log_streams(logGroupName="/aws/sagemaker/ProcessingJobs", logStreamNamePrefix="clean-1/")
    name = stream["logStreams"][0]["logStreamName"]
    events = logs.get_log_events(logGroupName="/aws/sagemaker/ProcessingJobs", logStreamName=name, startFromHead=True)
    assert any("cleaned 2 rows" in e["message"] for e in events["events"])
    assert [j["ProcessingJobName"] for j in sm.list_processing_jobs()["ProcessingJobSummaries"]] == ["clean-1"]


def test_a_failing_script_and_bad_paths(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    sm.create_processing_job(**request(s3, "broken-1", "raise RuntimeError('no rows to clean')\n"))
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("processing_job_completed_or_stopped").wait(ProcessingJobName="broken-1", WaiterConfig=FAST)
    d = sm.describe_processing_job(ProcessingJobName="broken-1")
    assert d["ProcessingJobStatus"] == "Failed"
    assert "RuntimeError: no rows to clean" in d["FailureReason"] and "exit code: 1" in d["FailureReason"]
    outside = request(s3, "outside-1", CLEAN)
    outside["ProcessingInputs"][0]["S3Input"]["LocalPath"] = "/etc/input"
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        sm.create_processing_job(**outside)
    assert "under /opt/ml/processing/" in bad.value.response["Error"]["Message"]


SPLIT = """
import json, os, socket
host = json.load(open("/opt/ml/config/resourceconfig.json"))["current_host"]
part = sorted(os.listdir("/opt/ml/processing/input"))
seen = {"host": host, "hostname": socket.gethostname(), "part": [p for p in part if p != "code"]}
seen["code_inode"] = os.stat("/opt/ml/processing/input/code").st_ino  # each instance writes into its own copy
open(f"/opt/ml/processing/train/{host}.json", "w").write(json.dumps(seen))
open(f"/opt/ml/processing/report/{host}.txt", "w").write("progress " + host)
print("instance", host, "done", flush=True)
if os.environ.get("FAIL_ON") == host:
    raise SystemExit(f"{host} gave up")
"""


def test_two_instances_share_a_sharded_input_and_continuous_outputs_survive_a_failure(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    req = request(s3, "split-1", SPLIT)
    for i in range(4):
        s3.put_object(Bucket=BUCKET, Key=f"split-1/raw/part-{i}.csv", Body=f"{i}\n".encode())
    req["ProcessingResources"]["ClusterConfig"]["InstanceCount"] = 2
    req["ProcessingInputs"][0]["S3Input"]["S3DataDistributionType"] = "ShardedByS3Key"
    del req["StoppingCondition"]
    sm.create_processing_job(**req)
    sm.get_waiter("processing_job_completed_or_stopped").wait(ProcessingJobName="split-1", WaiterConfig=FAST)
    d = sm.describe_processing_job(ProcessingJobName="split-1")
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")
    assert d["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400}  # none was given: AWS's default, said
    seen = {
        host: json.loads(s3.get_object(Bucket=BUCKET, Key=f"split-1/output/train/{host}.json")["Body"].read())
        for host in ("algo-1", "algo-2")
    }
    parts = ["part-0.csv", "part-1.csv", "part-2.csv", "part-3.csv", "raw.csv"]
    assert seen["algo-1"].pop("code_inode") != seen["algo-2"].pop("code_inode")
    assert seen["algo-1"] == {"host": "algo-1", "hostname": "algo-1", "part": parts[0::2]}
    assert seen["algo-2"] == {"host": "algo-2", "hostname": "algo-2", "part": parts[1::2]}

    failing = request(s3, "split-2", SPLIT)
    failing["Environment"] = {"FAIL_ON": "algo-1"}
    failing["ProcessingOutputConfig"]["Outputs"][1]["S3Output"]["S3UploadMode"] = "Continuous"
    sm.create_processing_job(**failing)
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("processing_job_completed_or_stopped").wait(ProcessingJobName="split-2", WaiterConfig=FAST)
    d = sm.describe_processing_job(ProcessingJobName="split-2")
    assert (d["ProcessingJobStatus"], d["FailureReason"]) == ("Failed", "AlgorithmError: algo-1 gave up, exit code: 1")
    # the Continuous output was uploaded although the job failed; the EndOfJob one was not
    progress = s3.get_object(Bucket=BUCKET, Key="split-2/output/report/algo-1.txt")["Body"].read()
    assert progress == b"progress algo-1"
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="split-2/output/train/")
    assert listed["KeyCount"] == 0
