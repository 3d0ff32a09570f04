"""CloudWatch Logs on a real ``servekit up`` with boto3's own ``logs`` client: a batch transform job's output in
``/aws/sagemaker/TransformJobs`` (read as the SageMaker SDK reads it), an endpoint instance's output in
``/aws/sagemaker/Endpoints/<endpoint>``, users' own groups and events, and ``servekit logs`` printing a stream."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}


def poll(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 60) -> Any:
    """Call ``what`` every 0.2 s until ``until`` holds (another process's progress: the plane ships as it reads)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"still {last!r} after {timeout_s}s")


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("logs") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def boto(up: UpProcess, service: str) -> Any:
    key = Credentials.load(up.home).admin
    return boto3.client(
        service,
        endpoint_url=up.url,
        region_name="us-east-1",
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=key.secret_access_key,
    )


def talking_model(root: Path, marker: str) -> Path:
    """A model whose code prints ``marker`` when it loads and a line per request (to stdout and stderr)."""
    version = root / "talking" / "1"
    (version / "code").mkdir(parents=True)
    (version / "code" / "inference.py").write_text(
        textwrap.dedent(
            f"""
            import json, sys

            def model_fn(model_dir):
                print("{marker} loaded", flush=True)
                return 2.0

            def transform_fn(model, data, content_type, accept):
                print("{marker} record", json.loads(data), file=sys.stderr, flush=True)
                return json.dumps({{"out": [x * model for x in json.loads(data)]}}), "application/json"
            """
        )
    )
    return root / "talking"


def sdk_read(logs: Any, group: str, job: str) -> list[str]:
    """What the SageMaker SDK's logs_for_job prints: the job's streams by name, each read from its head until
    GetLogEvents answers the same forward token twice."""
    request = {"logGroupName": group, "logStreamNamePrefix": job + "/", "orderBy": "LogStreamName", "limit": 1}
    try:
        streams = logs.describe_log_streams(**request)
    except logs.exceptions.ResourceNotFoundException:
        return []  # no group yet (nothing shipped so far): the SDK also reads it as no streams
    asked = 1
    while "nextToken" in streams:  # the SDK asks again, without the token and with limit 50, while one is answered
        asked += 1
        assert asked < 5, "DescribeLogStreams keeps answering a nextToken"
        streams = logs.describe_log_streams(**{**request, "limit": 50})
    printed: list[str] = []
    for stream in streams["logStreams"]:
        token = None
        while True:
            kwargs: dict[str, Any] = {"nextToken": token} if token else {"startFromHead": True}
            got = logs.get_log_events(logGroupName=group, logStreamName=stream["logStreamName"], **kwargs)
            printed += [e["message"] for e in got["events"]]
            if got["nextForwardToken"] == token:
                break
            token = got["nextForwardToken"]
    return printed


@pytest.mark.timeout(240)
def test_a_transform_jobs_output_is_in_the_transform_jobs_group(up: UpProcess, tmp_path: Path) -> None:
    sm, logs = boto(up, "sagemaker"), boto(up, "logs")
    model = talking_model(tmp_path / "models", "tj-marker")
    sm.create_model(ModelName="talking", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(model)})
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("[1.0]\n[2.0]\n")
    sm.create_transform_job(
        TransformJobName="talk-1",
        ModelName="talking",
        TransformInput={
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": str(tmp_path / "in")}},
            "ContentType": "application/json",
            "SplitType": "Line",
        },
        TransformOutput={"S3OutputPath": str(tmp_path / "out"), "AssembleWith": "Line"},
        TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1},
        BatchStrategy="SingleRecord",
    )
    sm.get_waiter("transform_job_completed_or_stopped").wait(TransformJobName="talk-1", WaiterConfig=FAST)
    assert sm.describe_transform_job(TransformJobName="talk-1")["TransformJobStatus"] == "Completed"
    printed = poll(
        lambda: sdk_read(logs, "/aws/sagemaker/TransformJobs", "talk-1"),
        lambda lines: sum("tj-marker record" in line for line in lines) == 2,
    )
    assert any("tj-marker loaded" in line for line in printed)
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TransformJobs", logStreamNamePrefix="talk-1/")
    stream, data_log = sorted(streams["logStreams"], key=lambda s: s["logStreamName"])
    assert stream["logStreamName"].startswith("talk-1/i-") and stream["lastEventTimestamp"] > 0
    assert data_log["logStreamName"] == f"{stream['logStreamName']}/data-log"  # the batch agent's own lines
    found = logs.filter_log_events(logGroupName="/aws/sagemaker/TransformJobs", filterPattern='"tj-marker record"')
    assert len(found["events"]) == 2 and found["events"][0]["logStreamName"] == stream["logStreamName"]
    # The batch agent's last line is shipped as the plane reads it, which may be after the job is Completed (so in
    # SageMaker too: a job's logs trail its status); it must arrive.
    poll(
        lambda: logs.get_log_events(
            logGroupName="/aws/sagemaker/TransformJobs", logStreamName=data_log["logStreamName"], startFromHead=True
        )["events"],
        lambda events: any("[sagemaker logs]: a.jsonl: Done, 2 record(s), 0 error(s)" in e["message"] for e in events),
    )


@pytest.mark.timeout(240)
def test_an_endpoint_instances_output_is_in_the_endpoints_group(up: UpProcess, tmp_path: Path) -> None:
    sm, logs = boto(up, "sagemaker"), boto(up, "logs")
    model = talking_model(tmp_path / "models", "ep-marker")
    sm.create_model(ModelName="talking-ep", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(model)})
    sm.create_endpoint_config(EndpointConfigName="talk-c", ProductionVariants=[{
        "VariantName": "AllTraffic", "ModelName": "talking-ep", "InitialInstanceCount": 1,
        "InstanceType": "ml.t2.medium", "InitialVariantWeight": 1.0,
    }])  # fmt: skip
    sm.create_endpoint(EndpointName="talk", EndpointConfigName="talk-c")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="talk", WaiterConfig=FAST)
    group = "/aws/sagemaker/Endpoints/talk"
    found = poll(
        lambda: (
            logs.filter_log_events(logGroupName=group, filterPattern='"ep-marker loaded"')["events"]
            if logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]
            else []
        ),
        lambda events: len(events) == 1,
    )
    assert found[0]["logStreamName"].startswith("AllTraffic/")
    streams = logs.describe_log_streams(logGroupName=group, orderBy="LastEventTime", descending=True)["logStreams"]
    assert [s["logStreamName"] for s in streams] == [found[0]["logStreamName"]]

    # servekit logs GROUP STREAM prints the stream
    cli = [sys.executable, "-m", "servekit.cli.main", "logs", group, found[0]["logStreamName"]]
    out = subprocess.run([*cli, "--url", up.url, "--home", str(up.home)], capture_output=True, text=True, check=True)
    assert "ep-marker loaded" in out.stdout


def test_users_own_groups_streams_and_events(up: UpProcess) -> None:
    logs = boto(up, "logs")
    logs.create_log_group(logGroupName="my-app")
    logs.create_log_stream(logGroupName="my-app", logStreamName="web-1")
    now = int(time.time() * 1000)
    logs.put_log_events(
        logGroupName="my-app",
        logStreamName="web-1",
        logEvents=[{"timestamp": now, "message": "GET / 200"}, {"timestamp": now + 1, "message": "GET /x 404"}],
    )
    got = logs.get_log_events(logGroupName="my-app", logStreamName="web-1", startFromHead=True)
    assert [e["message"] for e in got["events"]] == ["GET / 200", "GET /x 404"]
    assert [e["message"] for e in logs.filter_log_events(logGroupName="my-app", filterPattern="404")["events"]] == [
        "GET /x 404"
    ]
    with pytest.raises(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName="my-app")
    logs.put_retention_policy(logGroupName="my-app", retentionInDays=7)
    assert logs.describe_log_groups(logGroupNamePrefix="my-app")["logGroups"][0]["retentionInDays"] == 7
    logs.delete_log_group(logGroupName="my-app")
    with pytest.raises(logs.exceptions.ResourceNotFoundException):
        logs.describe_log_streams(logGroupName="my-app")


@pytest.mark.timeout(240)
def test_a_transform_job_run_from_the_cli_has_its_data_log_stream(up: UpProcess, tmp_path: Path) -> None:
    logs = boto(up, "logs")
    model = talking_model(tmp_path / "models", "cli-marker")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rows.jsonl").write_text("[1.0]\n[2.0]\n[3.0]\n")
    cli = [sys.executable, "-m", "servekit.cli.main", "transform", "run", "--name", "cli-1", "--quiet"]
    cli += ["--model", str(model / "1"), "--input", str(tmp_path / "in"), "--output-path", str(tmp_path / "out")]
    cli += ["--split-type", "Line", "--content-type", "application/json", "--home", str(up.home)]
    subprocess.run(cli, check=True, capture_output=True, timeout=120)

    def agent_lines() -> list[str]:
        try:
            streams = logs.describe_log_streams(
                logGroupName="/aws/sagemaker/TransformJobs", logStreamNamePrefix="cli-1/"
            )
        except logs.exceptions.ResourceNotFoundException:
            return []
        names = [s["logStreamName"] for s in streams["logStreams"] if s["logStreamName"].endswith("/data-log")]
        if not names:
            return []
        got = logs.get_log_events(
            logGroupName="/aws/sagemaker/TransformJobs", logStreamName=names[0], startFromHead=True
        )
        return [e["message"] for e in got["events"]]

    lines = poll(agent_lines, lambda found: any("rows.jsonl: Done, 3 record(s)" in line for line in found))
    assert any("job cli-1: 1 object(s)" in line for line in lines)
