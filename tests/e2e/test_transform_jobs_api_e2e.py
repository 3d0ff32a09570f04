"""Batch transform jobs through the control plane's API with boto3 against a real ``servekit up``:
CreateTransformJob on a model made with CreateModel runs ``servekit transform run`` as a subprocess (outputs as
the CLI writes them), the boto3 waiter sees it Completed, a bad request is refused with the run's own reason,
StopTransformJob stops a running job (Stopped, resumable), and a job the CLI ran in the same home is listed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}


def poll(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 120) -> Any:
    """Call ``what`` every 0.2 s until ``until`` holds (another process's progress)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"still {last!r} after {timeout_s}s")


def wait_ended(sm: Any, up: UpProcess, name: str, attempts: int = 100) -> None:
    """The waiter for an ended job; if it gives up, the failure says where the job's run process was (what a
    flaky stop in CI left no trace of: its status, the run's log and its threads' kernel wait channels)."""
    try:
        sm.get_waiter("transform_job_completed_or_stopped").wait(
            TransformJobName=name, WaiterConfig={"Delay": 1, "MaxAttempts": attempts}
        )
    except botocore.exceptions.WaiterError:
        described = sm.describe_transform_job(TransformJobName=name)
        log = up.home / "transform" / "api" / f"{name}.log"
        pid = subprocess.run(["pgrep", "-f", f"transform/api/{name}.json"], capture_output=True, text=True).stdout
        threads = {}
        for p in pid.split():
            for task in Path(f"/proc/{p}/task").glob("*"):
                threads[f"{p}/{task.name}"] = (task / "wchan").read_text() if (task / "wchan").exists() else "?"
        raise AssertionError(
            f"{name} is {described['TransformJobStatus']}; run processes {pid.split()} threads {threads}; "
            f"log: {log.read_text()[-2000:] if log.exists() else '(none)'}"
        ) from None


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("transform-api") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def slow_model(root: Path) -> Path:
    """Each record takes 0.2 s: a job of many records is still running when the test stops it (the workload)."""
    version = root / "slow" / "1"
    (version / "code").mkdir(parents=True)
    (version / "code" / "inference.py").write_text(
        textwrap.dedent(
            """
            import json, time

            def model_fn(model_dir):
                return 1

            def transform_fn(model, data, content_type, accept):
                time.sleep(0.2)
                return json.dumps({"out": json.loads(data)}), "application/json"
            """
        )
    )
    return root / "slow"


def job(name: str, model: str, src: Path, out: Path) -> dict[str, Any]:
    return {
        "TransformJobName": name,
        "ModelName": model,
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": str(src)}},
            "ContentType": "application/json",
            "SplitType": "Line",
        },
        "TransformOutput": {"S3OutputPath": str(out), "AssembleWith": "Line"},
        "TransformResources": {"InstanceType": "ml.m5.large", "InstanceCount": 1},
        "BatchStrategy": "SingleRecord",
    }


def test_create_runs_the_job_and_the_waiter_sees_it_completed(up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    sm.create_model(
        ModelName="double",
        PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path / "models", "double", 2.0))},
    )
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("[1.0]\n[2.0]\n[3.0]\n")
    (tmp_path / "in" / "b.jsonl").write_text("[4.0]\n")
    arn = sm.create_transform_job(**job("double-1", "double", tmp_path / "in", tmp_path / "out"))["TransformJobArn"]
    assert arn.endswith(":transform-job/double-1")
    sm.get_waiter("transform_job_completed_or_stopped").wait(TransformJobName="double-1", WaiterConfig=FAST)
    described = sm.describe_transform_job(TransformJobName="double-1")
    assert described["TransformJobStatus"] == "Completed"
    assert described["ModelName"] == "double"  # the plane's model, not the directory the run loaded
    assert described["TransformStartTime"] <= described["TransformEndTime"]
    lines = (tmp_path / "out" / "a.jsonl.out").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"out": [2.0]}, {"out": [4.0]}, {"out": [6.0]}]
    listed = sm.list_transform_jobs(NameContains="double")["TransformJobSummaries"]
    assert [(j["TransformJobName"], j["TransformJobStatus"]) for j in listed] == [("double-1", "Completed")]

    with pytest.raises(botocore.exceptions.ClientError) as again:
        sm.create_transform_job(**job("double-1", "double", tmp_path / "in", tmp_path / "out"))
    assert "already exists" in again.value.response["Error"]["Message"]
    bad = job("double-2", "double", tmp_path / "in", tmp_path / "out2")
    bad["MaxPayloadInMB"] = 0  # no limit works only without a SplitType: the run refuses it and says why
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        sm.create_transform_job(**bad)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "MaxPayloadInMB 0" in refused.value.response["Error"]["Message"]


def test_stop_ends_a_running_job_stopped_and_the_cli_jobs_are_listed_too(up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    sm.create_model(
        ModelName="slow", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(slow_model(tmp_path / "m"))}
    )
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "many.jsonl").write_text("[1.0]\n" * 600)
    sm.create_transform_job(**job("slow-1", "slow", tmp_path / "in", tmp_path / "out"))
    poll(
        lambda: sm.describe_transform_job(TransformJobName="slow-1")["TransformJobStatus"],
        lambda s: s == "InProgress",
    )
    sm.stop_transform_job(TransformJobName="slow-1")
    wait_ended(sm, up, "slow-1")
    assert sm.describe_transform_job(TransformJobName="slow-1")["TransformJobStatus"] == "Stopped"
    with pytest.raises(botocore.exceptions.ClientError) as stopped:
        sm.stop_transform_job(TransformJobName="slow-1")
    assert "only an InProgress job stops" in stopped.value.response["Error"]["Message"]

    # a job run by the CLI in the same home is the API's too
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "x.jsonl").write_text("[5.0]\n")
    cli = [sys.executable, "-m", "servekit.cli.main", "transform", "run", "--name", "by-cli", "--quiet"]
    cli += ["--model", str(scaling_model(tmp_path / "models", "triple", 3.0) / "1"), "--input", str(tmp_path / "small")]
    cli += ["--output-path", str(tmp_path / "cli-out"), "--split-type", "Line", "--home", str(up.home)]
    subprocess.run(cli, check=True, capture_output=True)
    described = sm.describe_transform_job(TransformJobName="by-cli")
    assert described["TransformJobStatus"] == "Completed"
    assert described["ModelName"].endswith("triple/1")


def test_a_job_on_the_planes_own_bucket_reads_and_writes_it(up: UpProcess, tmp_path: Path) -> None:
    """Input and output on the plane's own S3 (issue 46, item 5: it failed with "no filesystem for scheme 's3'"
    where s3fs was not installed, as after make demo's install)."""
    sm, s3 = up.sm(), up.client("s3")
    bucket = "sagemaker-us-east-1-000000000000"
    sm.create_model(
        ModelName="triple",
        PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path / "models", "t", 3.0))},
    )
    s3.put_object(Bucket=bucket, Key="batch/in/rows.jsonl", Body=b"[1.0]\n[2.0]\n")
    request = job("triple-s3", "triple", tmp_path, tmp_path)
    request["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"] = f"s3://{bucket}/batch/in"
    request["TransformOutput"]["S3OutputPath"] = f"s3://{bucket}/batch/out"
    sm.create_transform_job(**request)
    wait_ended(sm, up, "triple-s3")
    described = sm.describe_transform_job(TransformJobName="triple-s3")
    assert described["TransformJobStatus"] == "Completed", described.get("FailureReason")
    assert described["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://{bucket}/batch/in"
    body = s3.get_object(Bucket=bucket, Key="batch/out/rows.jsonl.out")["Body"].read().decode()
    assert [json.loads(line) for line in body.splitlines()] == [{"out": [3.0]}, {"out": [6.0]}]
