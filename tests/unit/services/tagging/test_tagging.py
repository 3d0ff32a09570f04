"""Tags of SageMaker's resources (issue 45: the SDK's ``attach()`` reads a training job's tags): each Create*'s
``Tags`` kept by the ARN its answer names, AddTags merging by key, DeleteTags, paging, an ARN of nothing refused, a
model package group's tags left to the registry."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.aws.errors import ApiError, validation_exception
from servekit.services.database import StateDB
from servekit.services.tagging.api import TaggingApi

ARN = "arn:aws:sagemaker:us-east-1:000000000000:training-job/"


class Jobs:
    """Stand-ins for the training service's two operations the tags touch."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    async def create(self, p: dict[str, Any]) -> dict[str, Any]:
        self.names.add(p["TrainingJobName"].lower())
        return {"TrainingJobArn": ARN + p["TrainingJobName"].lower()}

    async def describe(self, p: dict[str, Any]) -> dict[str, Any]:
        if p["TrainingJobName"] not in self.names:
            raise validation_exception(f"Requested resource not found: {p['TrainingJobName']}")
        return {"TrainingJobName": p["TrainingJobName"]}


class Registry:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def list_tags(self, p: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(p["ResourceArn"])
        return {"Tags": [{"Key": "sagemaker:deploy", "Value": "rule"}]}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    with StateDB.open(tmp_path) as opened:
        yield opened


def _ops(db: StateDB, jobs: Jobs, registry: Registry) -> dict[str, Any]:
    ops: dict[str, Any] = {
        "CreateTrainingJob": jobs.create,
        "DescribeTrainingJob": jobs.describe,
        "ListTags": registry.list_tags,
    }
    tagging = TaggingApi(db.tags, dict(ops))
    return {**ops, **tagging.recording(ops), **tagging.handlers()}


def test_create_keeps_its_tags_and_add_delete_change_them(db: StateDB) -> None:
    ops = _ops(db, Jobs(), Registry())
    run = asyncio.run
    run(ops["CreateTrainingJob"]({"TrainingJobName": "Job-1", "Tags": [{"Key": "team", "Value": "a"}]}))
    assert run(ops["ListTags"]({"ResourceArn": ARN + "job-1"}))["Tags"] == [{"Key": "team", "Value": "a"}]
    # the ARN in another case names the same resource; AddTags replaces a key's value and appends new keys
    run(
        ops["AddTags"](
            {"ResourceArn": ARN + "JOB-1", "Tags": [{"Key": "team", "Value": "b"}, {"Key": "x", "Value": ""}]}
        )
    )
    assert run(ops["ListTags"]({"ResourceArn": ARN + "job-1"}))["Tags"] == [
        {"Key": "team", "Value": "b"},
        {"Key": "x", "Value": ""},
    ]
    run(ops["DeleteTags"]({"ResourceArn": ARN + "job-1", "TagKeys": ["team"]}))
    assert run(ops["ListTags"]({"ResourceArn": ARN + "job-1"}))["Tags"] == [{"Key": "x", "Value": ""}]
    # created again under the same name: the new request's tags, not the old resource's
    run(ops["CreateTrainingJob"]({"TrainingJobName": "job-1"}))
    assert run(ops["ListTags"]({"ResourceArn": ARN + "job-1"}))["Tags"] == []


def test_listing_pages_and_the_limit_is_fifty(db: StateDB) -> None:
    ops = _ops(db, Jobs(), Registry())
    run = asyncio.run
    run(ops["CreateTrainingJob"]({"TrainingJobName": "j", "Tags": [{"Key": f"k{i}", "Value": "v"} for i in range(5)]}))
    first = run(ops["ListTags"]({"ResourceArn": ARN + "j", "MaxResults": 3}))
    rest = run(ops["ListTags"]({"ResourceArn": ARN + "j", "MaxResults": 3, "NextToken": first["NextToken"]}))
    assert [t["Key"] for t in first["Tags"] + rest["Tags"]] == [f"k{i}" for i in range(5)] and "NextToken" not in rest
    with pytest.raises(ApiError, match="at most 50 tags"):
        run(ops["AddTags"]({"ResourceArn": ARN + "j", "Tags": [{"Key": f"n{i}", "Value": "v"} for i in range(46)]}))
    assert len(run(ops["ListTags"]({"ResourceArn": ARN + "j"}))["Tags"]) == 5  # nothing of the refused call kept


def test_an_arn_no_create_recorded_is_looked_up(db: StateDB) -> None:
    jobs = Jobs()
    ops = _ops(db, jobs, Registry())
    jobs.names.add("made-by-a-tuner")  # a resource a service made itself, not through CreateTrainingJob
    assert asyncio.run(ops["ListTags"]({"ResourceArn": ARN + "made-by-a-tuner"})) == {"Tags": []}
    with pytest.raises(ApiError, match="does not exist") as refused:
        asyncio.run(ops["AddTags"]({"ResourceArn": ARN + "nothing", "Tags": [{"Key": "k", "Value": "v"}]}))
    assert refused.value.code == "ValidationException"
    assert db.tags.get(ARN + "nothing") is None


def test_a_model_package_groups_tags_stay_the_registrys(db: StateDB) -> None:
    registry = Registry()
    ops = _ops(db, Jobs(), registry)
    group = "arn:aws:sagemaker:us-east-1:000000000000:model-package-group/g"
    assert asyncio.run(ops["ListTags"]({"ResourceArn": group}))["Tags"][0]["Key"] == "sagemaker:deploy"
    assert registry.calls == [group]
