"""ListTransformJobs / DescribeTransformJob through real botocore clients over the jobs ``servekit transform``
records (JobStore writing the same home's state), and how servekit's statuses read in SageMaker's words."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.aws import Api, Call, Credentials
from servekit.services.database import StateDB
from servekit.services.transform import JobStore, spec_from_request, spec_to_request
from servekit.services.transform.api import TransformJobsApi
from servekit.services.transform.status import JobStatus, ObjectStatus
from servekit.testing.aws import in_process_client

# above the largest process id Linux (2**22) and macOS (99998) give: no process has it
NO_SUCH_PID = 2**22 + 1


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class Plane:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.db = StateDB.open(home)
        self.keys = Credentials.load_or_create(home)
        self.api = TransformJobsApi(self.db.transform_jobs, self.db.hosting, lambda url: url, home)
        self._handlers = self.api.handlers()

    def dispatch(self, call: Call) -> Mapping[str, Any] | None:
        return asyncio.run(self._handlers[call.operation](call.params))

    def client(self, strict: bool = True) -> Any:
        return in_process_client(Api(self.keys, strict_output=strict), "sagemaker", self.keys.admin, self.dispatch)


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Plane]:
    p = Plane(tmp_path / "home")
    yield p
    p.db.close()


def request(name: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "TransformJobName": name,
        "ModelName": str(tmp_path / "model" / "1"),
        "TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": str(tmp_path / "in")}}, "SplitType": "Line"},
        "TransformOutput": {"S3OutputPath": str(tmp_path / "out")},
    }


def record(home: Path, tmp_path: Path, clock: Clock) -> None:
    """Four jobs as runs leave them: done with record errors, failed, running (this process), and abandoned."""
    with JobStore(home, clock=clock) as store:
        store.begin(spec_from_request(request("scores-a", tmp_path)), "local")
        store.set_total("scores-a", 2)
        store.record_objects(
            "scores-a",
            [("a.csv", ObjectStatus.DONE, 0, 10, 0, ""), ("b.csv", ObjectStatus.DONE, 0, 8, 2, "2 records failed")],
        )
        store.set_status("scores-a", JobStatus.COMPLETED_WITH_ERRORS)
        store.begin(spec_from_request(request("scores-b", tmp_path)), "local")
        store.set_total("scores-b", 3)
        store.record_objects("scores-b", [("c.csv", ObjectStatus.FAILED, 0, 0, 0, "not UTF-8")])
        store.set_status("scores-b", JobStatus.FAILED, "1 object(s) failed: c.csv: not UTF-8")
        store.begin(spec_from_request(request("live", tmp_path)), "local")  # owned by this (live) process
        store.set_total("live", 4)
        store.record_objects("live", [("d.csv", ObjectStatus.DONE, 0, 5, 0, "")])
        store.set_live("live", 7)
    # a job whose process died mid-run: its row as JobStore.begin writes it, owned by a process that is gone
    with StateDB.open(home) as db:
        db.transform_jobs.insert(
            "orphan",
            spec_to_request(spec_from_request(request("orphan", tmp_path))),
            JobStatus.IN_PROGRESS.value,
            created=clock(),
            owner_pid=NO_SUCH_PID,
            owner_host=socket.gethostname(),
            engine="local",
        )


def test_list_and_describe_read_the_jobs_servekit_transform_records(plane: Plane, tmp_path: Path) -> None:
    record(plane.home, tmp_path, Clock())
    sm = plane.client()
    listed = sm.list_transform_jobs(SortBy="Name", SortOrder="Ascending")["TransformJobSummaries"]
    assert [(j["TransformJobName"], j["TransformJobStatus"]) for j in listed] == [
        ("live", "InProgress"),
        ("orphan", "Failed"),
        ("scores-a", "Completed"),
        ("scores-b", "Failed"),
    ]
    assert listed[2]["TransformJobArn"] == "arn:aws:sagemaker:us-east-1:000000000000:transform-job/scores-a"
    assert "2 record(s) failed" in listed[2]["FailureReason"]
    assert "process" in listed[1]["FailureReason"] and "resume" in listed[1]["FailureReason"]
    assert [j["TransformJobName"] for j in sm.list_transform_jobs(StatusEquals="Failed")["TransformJobSummaries"]] == [
        "orphan",  # recorded last
        "scores-b",
    ]  # newest first by default
    assert [j["TransformJobName"] for j in sm.list_transform_jobs(NameContains="SCORES")["TransformJobSummaries"]] == [
        "scores-b",
        "scores-a",
    ]
    first = sm.list_transform_jobs(MaxResults=3, SortBy="Name", SortOrder="Ascending")
    rest = sm.list_transform_jobs(MaxResults=3, SortBy="Name", SortOrder="Ascending", NextToken=first["NextToken"])
    assert [j["TransformJobName"] for j in first["TransformJobSummaries"] + rest["TransformJobSummaries"]] == [
        j["TransformJobName"] for j in listed
    ]
    assert "NextToken" not in rest

    # Describe carries servekit's extension fields, which a strict output check refuses
    described = plane.client(strict=False).describe_transform_job(TransformJobName="scores-b")
    assert described["TransformJobStatus"] == "Failed"
    assert described["FailureReason"] == "1 object(s) failed: c.csv: not UTF-8"
    assert described["ModelName"] == str(tmp_path / "model" / "1")
    assert described["TransformInput"]["SplitType"] == "Line"
    assert described["TransformOutput"]["S3OutputPath"] == str(tmp_path / "out")
    assert described["TransformStartTime"] <= described["TransformEndTime"]


def test_describe_adds_servekits_progress_for_raw_json_readers(plane: Plane, tmp_path: Path) -> None:
    record(plane.home, tmp_path, Clock())
    sm = plane.client(strict=False)
    raw: list[bytes] = []
    sm.meta.events.register(
        "after-call.sagemaker.DescribeTransformJob", lambda http_response, **_: raw.append(http_response.content)
    )
    sm.describe_transform_job(TransformJobName="live")
    live = json.loads(raw[-1])
    assert live["TransformJobStatus"] == "InProgress" and live["ServekitStatus"] == "InProgress"
    assert live["ServekitProgress"] == {
        "ObjectsTotal": 4,
        "ObjectsDone": 1,
        "ObjectsFailed": 0,
        "Records": 12,  # 5 of the finished object and 7 of objects still running
        "RecordErrors": 0,
    }
    sm.describe_transform_job(TransformJobName="scores-a")
    done = json.loads(raw[-1])
    assert (done["TransformJobStatus"], done["ServekitStatus"]) == ("Completed", "CompletedWithErrors")
    assert done["ServekitProgress"]["RecordErrors"] == 2


def test_a_missing_job_and_a_bad_request_are_4xx_saying_what_is_expected(plane: Plane) -> None:
    sm = plane.client()
    with pytest.raises(botocore.exceptions.ClientError) as missing:
        sm.describe_transform_job(TransformJobName="nope")
    assert missing.value.response["Error"]["Code"] == "ValidationException"
    assert "nope" in missing.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as unknown_model:
        sm.create_transform_job(
            TransformJobName="x",
            ModelName="not-a-model",
            TransformInput={"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/in"}}},
            TransformOutput={"S3OutputPath": "s3://b/out"},
            TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1},
        )
    assert 'Could not find model "not-a-model"' in unknown_model.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as token:
        sm.list_transform_jobs(NextToken="abc")
    assert "NextToken" in token.value.response["Error"]["Message"]
