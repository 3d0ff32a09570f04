"""SageMaker's Search (issue 45: the SDK's model card code finds a training job by its artefact): records read
through the plane's List*/Describe* and cut to botocore's SearchRecord shape, filters of every operator, nested
filters, sub-expressions with Or, sorting and paging."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from servekit.aws.errors import ApiError
from servekit.services.search.api import SearchApi, matches

JOBS = {
    f"job-{i}": {
        "TrainingJobName": f"job-{i}",
        "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:000000000000:training-job/job-{i}",
        "TrainingJobStatus": "Completed" if i != 2 else "Failed",
        "ModelArtifacts": {"S3ModelArtifacts": f"s3://b/out/job-{i}/model.tar.gz"},
        "HyperParameters": {"k": str(i * 10)},
        "InputDataConfig": [{"ChannelName": "train"}, {"ChannelName": "test" if i == 1 else "validation"}],
        "CreationTime": datetime(2026, 12, i, tzinfo=UTC),
        "LastModifiedTime": datetime(2026, 12, i, tzinfo=UTC),
        "ProfilingStatus": "Disabled",  # Describe answers it; a SearchRecord's TrainingJob has no such member
    }
    for i in (1, 2, 3)
}


async def list_jobs(p: dict[str, Any]) -> dict[str, Any]:
    names = sorted(JOBS)
    start = int(p.get("NextToken") or 0)  # two per page: the search follows NextToken
    out: dict[str, Any] = {"TrainingJobSummaries": [{"TrainingJobName": n} for n in names[start : start + 2]]}
    if start + 2 < len(names):
        out["NextToken"] = str(start + 2)
    return out


async def describe_job(p: dict[str, Any]) -> dict[str, Any]:
    return JOBS[p["TrainingJobName"]]


def search(**request: Any) -> dict[str, Any]:
    api = SearchApi(
        {"ListTrainingJobs": list_jobs, "DescribeTrainingJob": describe_job},
        lambda arn: [{"Key": "team", "Value": "a" if arn.endswith("job-3") else "b"}],
    )
    return asyncio.run(api.search({"Resource": "TrainingJob", **request}))


def names(answer: dict[str, Any]) -> list[str]:
    return [r["TrainingJob"]["TrainingJobName"] for r in answer["Results"]]


def test_a_training_job_is_found_by_its_artefact_as_the_sdk_searches() -> None:
    by_artefact = {
        "Name": "ModelArtifacts.S3ModelArtifacts",
        "Operator": "Equals",
        "Value": "s3://b/out/job-2/model.tar.gz",
    }
    answer = search(SearchExpression={"Filters": [by_artefact]})
    assert names(answer) == ["job-2"]
    record = answer["Results"][0]["TrainingJob"]
    assert "ProfilingStatus" not in record and record["Tags"] == [{"Key": "team", "Value": "b"}]


@pytest.mark.parametrize(
    ("flt", "found"),
    [
        ({"Name": "TrainingJobStatus", "Operator": "NotEquals", "Value": "Failed"}, ["job-3", "job-1"]),
        ({"Name": "HyperParameters.k", "Operator": "GreaterThan", "Value": "15"}, ["job-3", "job-2"]),
        ({"Name": "HyperParameters.k", "Operator": "LessThanOrEqualTo", "Value": "20"}, ["job-2", "job-1"]),
        (
            {"Name": "CreationTime", "Operator": "GreaterThanOrEqualTo", "Value": "2026-12-02T00:00:00Z"},
            ["job-3", "job-2"],
        ),
        ({"Name": "TrainingJobName", "Operator": "Contains", "Value": "-3"}, ["job-3"]),
        ({"Name": "TrainingJobName", "Operator": "In", "Value": "job-1,job-3"}, ["job-3", "job-1"]),
        ({"Name": "Tags.team", "Operator": "Equals", "Value": "a"}, ["job-3"]),
        ({"Name": "FailureReason", "Operator": "Exists"}, []),
        ({"Name": "FailureReason", "Operator": "NotExists"}, ["job-3", "job-2", "job-1"]),
    ],
)
def test_filters_of_every_operator(flt: dict[str, str], found: list[str]) -> None:
    assert names(search(SearchExpression={"Filters": [flt]})) == found  # newest first by default


def test_nested_filters_sub_expressions_sorting_and_paging() -> None:
    nested = {
        "NestedPropertyName": "InputDataConfig",
        "Filters": [{"Name": "InputDataConfig.ChannelName", "Operator": "Equals", "Value": "test"}],
    }
    assert names(search(SearchExpression={"NestedFilters": [nested]})) == ["job-1"]
    either = {
        "Operator": "Or",
        "SubExpressions": [
            {"Filters": [{"Name": "TrainingJobName", "Value": "job-1"}]},
            {"Filters": [{"Name": "TrainingJobStatus", "Value": "Failed"}]},
        ],
    }
    assert names(search(SearchExpression=either, SortBy="TrainingJobName", SortOrder="Ascending")) == ["job-1", "job-2"]
    first = search(MaxResults=2, SortBy="HyperParameters.k", SortOrder="Descending")
    rest = search(MaxResults=2, SortBy="HyperParameters.k", SortOrder="Descending", NextToken=first["NextToken"])
    assert names(first) + names(rest) == ["job-3", "job-2", "job-1"] and "NextToken" not in rest
    assert matches({"a": 1}, {}) is True


def test_a_type_servekit_does_not_search_is_named() -> None:
    api = SearchApi({"ListTrainingJobs": list_jobs, "DescribeTrainingJob": describe_job}, lambda arn: [])
    with pytest.raises(ApiError, match=r"servekit searches .*FeatureGroup is not one of them"):
        asyncio.run(api.search({"Resource": "FeatureGroup"}))
