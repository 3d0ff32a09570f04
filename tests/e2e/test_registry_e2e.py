"""The model registry end to end with boto3 against a real ``servekit up``: groups, versioned packages, listing with
filters and pages, approval with its history, CreateModel from a package ARN, and deploy on approval updating a
real endpoint whose InvokeEndpoint then answers with the approved version."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.services.registry.deploy import rule_tags
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 180}


def raw_describe(sm: Any, ref: str) -> dict[str, Any]:
    """DescribeModelPackage's whole JSON body: servekit's own fields (ServekitApprovalHistory…) beside SageMaker's,
    which botocore's parser leaves out."""
    seen: list[bytes] = []

    def keep(http_response: Any, **_: Any) -> None:
        seen.append(http_response.content)

    sm.meta.events.register("after-call.sagemaker.DescribeModelPackage", keep)
    try:
        sm.describe_model_package(ModelPackageName=ref)
    finally:
        sm.meta.events.unregister("after-call.sagemaker.DescribeModelPackage", keep)
    out: dict[str, Any] = json.loads(seen[-1])
    return out


def package(sm: Any, group: str, path: Path, status: str = "PendingManualApproval") -> str:
    arn: str = sm.create_model_package(
        ModelPackageGroupName=group,
        InferenceSpecification={
            "Containers": [{"Image": "servekit", "ModelDataUrl": str(path)}],
            "SupportedContentTypes": ["application/json"],
            "SupportedResponseMIMETypes": ["application/json"],
        },
        ModelApprovalStatus=status,
        ModelMetrics={"ModelQuality": {"Statistics": {"ContentType": "application/json", "S3Uri": f"{path}/m.json"}}},
        MetadataProperties={"GeneratedBy": "arn:aws:sagemaker:us-east-1:000000000000:pipeline/p/execution/abc"},
        CustomerMetadataProperties={"source": path.name},
    )["ModelPackageArn"]
    return arn


def poll(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 120) -> Any:
    """Call ``what`` every 0.2 s until ``until`` holds (polling another process's progress)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"condition not met within {timeout_s} s; last: {last}")


def error(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> tuple[str, str]:
    e = exc.value.response["Error"]
    return e["Code"], e["Message"]


def test_registry_groups_packages_approval_and_create_model(up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    sm.create_model_package_group(ModelPackageGroupName="churn", ModelPackageGroupDescription="churn classifier")
    v1 = package(sm, "churn", scaling_model(tmp_path, "c1", 1.0))
    v2 = package(sm, "churn", scaling_model(tmp_path, "c2", 2.0))
    assert [v1.rsplit("/", 1)[1], v2.rsplit("/", 1)[1]] == ["1", "2"]

    # list: group filter, status filter, pages of one, newest first
    pages = sm.get_paginator("list_model_packages").paginate(
        ModelPackageGroupName="churn", SortOrder="Descending", PaginationConfig={"PageSize": 1}
    )
    assert [s["ModelPackageVersion"] for p in pages for s in p["ModelPackageSummaryList"]] == [2, 1]

    # approve v1 with a reason: history says from, to and why
    sm.update_model_package(ModelPackageArn=v1, ModelApprovalStatus="Approved", ApprovalDescription="AUC 0.91")
    approved = sm.list_model_packages(ModelPackageGroupName="churn", ModelApprovalStatus="Approved")
    assert [s["ModelPackageArn"] for s in approved["ModelPackageSummaryList"]] == [v1]
    described = raw_describe(sm, v1)
    assert described["ModelApprovalStatus"] == "Approved" and described["ApprovalDescription"] == "AUC 0.91"
    assert described["CustomerMetadataProperties"] == {"source": "c1"}
    history = [(h.get("From"), h["To"], h["Reason"]) for h in described["ServekitApprovalHistory"]]
    assert history == [(None, "PendingManualApproval", "created"), ("PendingManualApproval", "Approved", "AUC 0.91")]
    # who: the access key id that signed the approval (the plane records the caller of every call)
    assert described["ServekitApprovalHistory"][-1]["By"] == sm._request_signer._credentials.access_key

    # CreateModel from the approved ARN works and DescribeModel names the package; from the pending one it fails
    sm.create_model(ModelName="churn-model", PrimaryContainer={"ModelPackageName": v1})
    container = sm.describe_model(ModelName="churn-model")["PrimaryContainer"]
    assert container["ModelPackageName"] == v1 and container["ModelDataUrl"] == str(tmp_path / "c1")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.create_model(ModelName="pending-model", Containers=[{"ModelPackageName": v2}])
    code, message = error(exc)
    assert code == "ValidationException"
    assert "is PendingManualApproval: only an Approved model package version can be deployed" in message

    # reject keeps the package; a group holding packages cannot be deleted
    sm.update_model_package(ModelPackageArn=v2, ModelApprovalStatus="Rejected", ApprovalDescription="worse")
    assert sm.describe_model_package(ModelPackageName=v2)["ModelApprovalStatus"] == "Rejected"
    with pytest.raises(sm.exceptions.ConflictException):
        sm.delete_model_package_group(ModelPackageGroupName="churn")

    # bad input: unknown group, a status that is not one, an illegal change
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        package(sm, "no-such-group", tmp_path / "c1")
    assert error(exc) == ("ValidationException", "ModelPackageGroup no-such-group does not exist.")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.update_model_package(ModelPackageArn=v2, ModelApprovalStatus="Approve")
    code, message = error(exc)
    assert code == "ValidationException" and "Approved, Rejected, PendingManualApproval" in message
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.update_model_package(ModelPackageArn=v1, ModelApprovalStatus="PendingManualApproval")
    assert error(exc)[0] == "ValidationException" and "can be changed to Rejected" in error(exc)[1]


def test_approval_deploys_the_new_version_to_a_live_endpoint(up: UpProcess, tmp_path: Path) -> None:
    sm, rt = up.sm(), up.rt()
    sm.create_model_package_group(ModelPackageGroupName="ranker", Tags=rule_tags("live", deployment="all wait=0"))
    v1 = package(sm, "ranker", scaling_model(tmp_path, "r1", 1.0), status="Approved")
    # the endpoint does not exist yet: v1's deployment is recorded as failed, the approval stands
    failed = raw_describe(sm, v1)["ServekitDeployments"]
    assert failed[0]["Outcome"] == "Failed" and "Could not find endpoint" in failed[0]["Message"]

    sm.create_model(ModelName="ranker-first", PrimaryContainer={"ModelPackageName": v1})
    sm.create_endpoint_config(
        EndpointConfigName="live-1",
        ProductionVariants=[{"VariantName": "AllTraffic", "ModelName": "ranker-first", "InstanceType": "ml.t2.medium"}],
    )
    sm.create_endpoint(EndpointName="live", EndpointConfigName="live-1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="live", WaiterConfig=FAST)

    def answer() -> float:
        r = rt.invoke_endpoint(EndpointName="live", Body=b"[1.0]", ContentType="application/json")
        return float(json.loads(r["Body"].read())["out"][0])

    assert answer() == 1.0

    v2 = package(sm, "ranker", scaling_model(tmp_path, "r2", 3.0))
    sm.update_model_package(ModelPackageArn=v2, ModelApprovalStatus="Approved", ApprovalDescription="ship it")
    deployed = raw_describe(sm, v2)["ServekitDeployments"]
    assert deployed[0]["Outcome"] == "UpdateEndpointStarted", deployed
    new_config = deployed[0]["EndpointConfigName"]
    assert new_config == "live-ranker-v2"
    poll(
        lambda: sm.describe_endpoint(EndpointName="live"),
        lambda d: d["EndpointStatus"] == "InService" and d["EndpointConfigName"] == new_config,
    )
    assert {answer() for _ in range(5)} == {3.0}
    # lineage: the endpoint's config names a model made from the package
    variant = sm.describe_endpoint_config(EndpointConfigName=new_config)["ProductionVariants"][0]
    assert sm.describe_model(ModelName=variant["ModelName"])["PrimaryContainer"]["ModelPackageName"] == v2
    # v1 (superseded) is still there and still Approved
    assert sm.describe_model_package(ModelPackageName=v1)["ModelApprovalStatus"] == "Approved"
