"""The model registry's operations through real botocore clients (in process, signed, validated against botocore's
shapes), on a real SQLite state database. Deploy on approval is checked here against a recording stand-in of the
hosting API (which operations, with what); tests/e2e/test_registry_e2e.py runs it on a real endpoint."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.aws import AccessKey, Api, Call, Credentials
from servekit.aws.errors import validation_exception
from servekit.aws.front import CALLER
from servekit.services.database import StateDB
from servekit.services.registry.api import RegistryService
from servekit.services.registry.deploy import DEPLOYMENT_TAG, ENDPOINT_TAG, rule_tags
from servekit.testing.aws import in_process_client

ARN = "arn:aws:sagemaker:us-east-1:000000000000"


class RecordingHosting:
    """Just enough of the hosting API for a deployment: one endpoint "ep" on config "cfg" (variant "AllTraffic"),
    models and configs by name; every call recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.models: dict[str, dict[str, Any]] = {}
        self.configs: dict[str, dict[str, Any]] = {
            "cfg": {
                "EndpointConfigName": "cfg",
                "ProductionVariants": [
                    {"VariantName": "AllTraffic", "ModelName": "m0", "InstanceType": "ml.t2.medium"}
                ],
                "DataCaptureConfig": {"DestinationS3Uri": "/tmp/capture", "InitialSamplingPercentage": 5},
            }
        }
        self.resolve: Callable[[str], dict[str, Any]] | None = None

    def handlers(self) -> dict[str, Any]:
        async def describe_endpoint(p: dict[str, Any]) -> dict[str, Any]:
            if p["EndpointName"] != "ep":
                raise validation_exception(f'Could not find endpoint "{p["EndpointName"]}".')
            return {"EndpointName": "ep", "EndpointConfigName": "cfg"}

        async def describe_config(p: dict[str, Any]) -> dict[str, Any]:
            if p["EndpointConfigName"] not in self.configs:
                raise validation_exception(f'Could not find endpoint configuration "{p["EndpointConfigName"]}".')
            return self.configs[p["EndpointConfigName"]]

        async def describe_model(p: dict[str, Any]) -> dict[str, Any]:
            if p["ModelName"] not in self.models:
                raise validation_exception(f'Could not find model "{p["ModelName"]}".')
            return self.models[p["ModelName"]]

        async def create_model(p: dict[str, Any]) -> dict[str, Any]:
            assert self.resolve is not None
            container = {**p["PrimaryContainer"], **self.resolve(p["PrimaryContainer"]["ModelPackageName"])}
            self.models[p["ModelName"]] = {**p, "PrimaryContainer": container}
            return {}

        async def create_config(p: dict[str, Any]) -> dict[str, Any]:
            self.configs[p["EndpointConfigName"]] = p
            return {}

        async def update_endpoint(p: dict[str, Any]) -> dict[str, Any]:
            return {}

        ops = {
            "DescribeEndpoint": describe_endpoint,
            "DescribeEndpointConfig": describe_config,
            "DescribeModel": describe_model,
            "CreateModel": create_model,
            "CreateEndpointConfig": create_config,
            "UpdateEndpoint": update_endpoint,
        }

        def recorded(name: str, fn: Any) -> Any:
            async def call(p: dict[str, Any]) -> dict[str, Any]:
                self.calls.append((name, p))
                result: dict[str, Any] = await fn(p)
                return result

            return call

        return {name: recorded(name, fn) for name, fn in ops.items()}


class Plane:
    def __init__(self, home: Path) -> None:
        self.db = StateDB.open(home)
        self.keys = Credentials.load_or_create(home)
        self.hosting = RecordingHosting()
        self.service = RegistryService(self.db.registry, self.hosting.handlers())
        self.hosting.resolve = self.service.container_for
        self._handlers = self.service.handlers()

    def dispatch(self, call: Call) -> Mapping[str, Any] | None:
        # what the plane's dispatch does for the registry: the caller's key id is known while the handler runs
        async def run() -> Mapping[str, Any]:
            CALLER.set(call.key.access_key_id if call.key else None)
            return await self._handlers[call.operation](call.params)

        return asyncio.run(run())

    def client(self, key: AccessKey | None = None, strict: bool = True) -> Any:
        return in_process_client(
            Api(self.keys, strict_output=strict), "sagemaker", key or self.keys.admin, self.dispatch
        )


@pytest.fixture
def plane(tmp_path: Path) -> Any:
    p = Plane(tmp_path / "home")
    yield p
    p.db.close()


def spec(path: str = "/models/churn") -> dict[str, Any]:
    return {"Containers": [{"Image": "servekit", "ModelDataUrl": path}]}


def describe(plane: Plane, ref: str) -> dict[str, Any]:
    """DescribeModelPackage through a plane that lets servekit's own fields (ServekitApprovalHistory…) through."""
    out: dict[str, Any] = plane.client(strict=False).describe_model_package(ModelPackageName=ref)
    return out


def error(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> tuple[str, str]:
    e = exc.value.response["Error"]
    return e["Code"], e["Message"]


# ---- groups --------------------------------------------------------------------------------------------------------
def test_groups_create_describe_list_and_delete(plane: Plane) -> None:
    sm = plane.client()
    arn = sm.create_model_package_group(ModelPackageGroupName="Churn", ModelPackageGroupDescription="churn models")
    assert arn["ModelPackageGroupArn"] == f"{ARN}:model-package-group/churn"
    d = sm.describe_model_package_group(ModelPackageGroupName="churn")  # names ignore case, as in ARNs
    assert (d["ModelPackageGroupName"], d["ModelPackageGroupStatus"]) == ("Churn", "Completed")
    assert d["CreatedBy"]["IamIdentity"]["PrincipalId"] == plane.keys.admin.access_key_id
    assert (
        sm.describe_model_package_group(ModelPackageGroupName=arn["ModelPackageGroupArn"])["ModelPackageGroupName"]
        == "Churn"
    )
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.create_model_package_group(ModelPackageGroupName="CHURN")
    assert error(exc)[0] == "ValidationException" and "already exists" in error(exc)[1]
    for name in ("fraud", "ranker"):
        sm.create_model_package_group(ModelPackageGroupName=name)
    page = sm.list_model_package_groups(MaxResults=2, SortBy="Name", SortOrder="Ascending")
    assert [g["ModelPackageGroupName"] for g in page["ModelPackageGroupSummaryList"]] == ["Churn", "fraud"]
    rest = sm.list_model_package_groups(MaxResults=2, SortBy="Name", SortOrder="Ascending", NextToken=page["NextToken"])
    assert [g["ModelPackageGroupName"] for g in rest["ModelPackageGroupSummaryList"]] == ["ranker"]
    assert "NextToken" not in rest
    sm.delete_model_package_group(ModelPackageGroupName="ranker")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.describe_model_package_group(ModelPackageGroupName="ranker")
    assert error(exc) == ("ValidationException", "ModelPackageGroup ranker does not exist.")


def test_a_group_with_packages_cannot_be_deleted(plane: Plane) -> None:
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="churn")
    arn = sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec())["ModelPackageArn"]
    with pytest.raises(sm.exceptions.ConflictException) as exc:
        sm.delete_model_package_group(ModelPackageGroupName="churn")
    assert "contains model packages" in error(exc)[1]
    sm.delete_model_package(ModelPackageName=arn)
    sm.delete_model_package_group(ModelPackageGroupName="churn")


# ---- packages ------------------------------------------------------------------------------------------------------
def test_versions_count_up_per_group_with_the_fields_a_pipeline_sends(plane: Plane) -> None:
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="churn")
    sm.create_model_package_group(ModelPackageGroupName="fraud")
    run = f"{ARN}:pipeline/train/execution/abc123def456"
    first = sm.create_model_package(
        ModelPackageGroupName="churn",
        InferenceSpecification={
            "Containers": [{"Image": "servekit", "ModelDataUrl": "/models/churn/1", "Environment": {"A": "1"}}],
            "SupportedContentTypes": ["application/json"],
            "SupportedResponseMIMETypes": ["application/json"],
        },
        ModelApprovalStatus="PendingManualApproval",
        ModelMetrics={"ModelQuality": {"Statistics": {"ContentType": "application/json", "S3Uri": "s3://b/m.json"}}},
        MetadataProperties={"ProjectId": "churn", "GeneratedBy": run},
        CustomerMetadataProperties={"accuracy": "0.93"},
        ModelPackageDescription="first",
    )["ModelPackageArn"]
    second = sm.create_model_package(
        ModelPackageGroupName=f"{ARN}:model-package-group/churn", InferenceSpecification=spec()
    )
    other = sm.create_model_package(ModelPackageGroupName="fraud", InferenceSpecification=spec())
    assert first == f"{ARN}:model-package/churn/1"
    assert second["ModelPackageArn"] == f"{ARN}:model-package/churn/2"
    assert other["ModelPackageArn"] == f"{ARN}:model-package/fraud/1"
    d = describe(plane, first)
    assert (d["ModelPackageGroupName"], d["ModelPackageVersion"], d["ModelPackageName"]) == ("churn", 1, "churn")
    assert d["ModelApprovalStatus"] == "PendingManualApproval"
    assert d["MetadataProperties"] == {"ProjectId": "churn", "GeneratedBy": run}
    assert d["CustomerMetadataProperties"] == {"accuracy": "0.93"}
    assert d["ModelMetrics"]["ModelQuality"]["Statistics"]["S3Uri"] == "s3://b/m.json"
    assert d["InferenceSpecification"]["Containers"][0]["Environment"] == {"A": "1"}
    assert d["ModelPackageStatus"] == "Completed" and d["ModelPackageDescription"] == "first"
    assert describe(plane, "churn/2")["ModelPackageVersion"] == 2


def test_unversioned_packages_are_described_by_name(plane: Plane) -> None:
    sm = plane.client()
    arn = sm.create_model_package(ModelPackageName="baseline", InferenceSpecification=spec())["ModelPackageArn"]
    assert arn == f"{ARN}:model-package/baseline"
    d = describe(plane, "baseline")
    assert d["ModelPackageArn"] == arn and "ModelApprovalStatus" not in d and "ModelPackageVersion" not in d
    listed = sm.list_model_packages()["ModelPackageSummaryList"]  # the default type is Unversioned, as on AWS
    assert [s["ModelPackageArn"] for s in listed] == [arn]


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"ModelPackageGroupName": "nope", "InferenceSpecification": spec()}, "ModelPackageGroup nope does not exist."),
        ({"ModelPackageGroupName": "churn", "ModelPackageName": "x", "InferenceSpecification": spec()}, "Both"),
        ({"InferenceSpecification": spec()}, "Specify ModelPackageGroupName"),
        ({"ModelPackageGroupName": "churn"}, "InferenceSpecification with at least one container"),
        (
            {"ModelPackageName": "x", "ModelApprovalStatus": "Approved", "InferenceSpecification": spec()},
            "versioned model packages only",
        ),
        (
            {"ModelPackageGroupName": "churn", "ModelApprovalStatus": "approved", "InferenceSpecification": spec()},
            "Member must satisfy enum value set: [Approved, Rejected, PendingManualApproval]",
        ),
    ],
)
def test_bad_create_model_package_requests_are_validation_errors(
    plane: Plane, kwargs: dict[str, Any], says: str
) -> None:
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="churn")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.create_model_package(**kwargs)
    code, message = error(exc)
    assert code == "ValidationException"
    assert says in message


def test_list_filters_by_group_and_status_sorts_and_pages(plane: Plane) -> None:
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="churn")
    sm.create_model_package_group(ModelPackageGroupName="fraud")
    statuses = ["Approved", "PendingManualApproval", "Approved", "Rejected", "Approved"]
    for s in statuses:
        sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec(), ModelApprovalStatus=s)
    sm.create_model_package(
        ModelPackageGroupName="fraud", InferenceSpecification=spec(), ModelApprovalStatus="Approved"
    )

    def versions(**kw: Any) -> list[int]:
        out, token = [], None
        while True:
            page = sm.list_model_packages(
                ModelPackageGroupName="churn", MaxResults=2, **kw, **({"NextToken": token} if token else {})
            )
            out += [s["ModelPackageVersion"] for s in page["ModelPackageSummaryList"]]
            token = page.get("NextToken")
            if token is None:
                return out

    assert versions() == [1, 2, 3, 4, 5]  # CreationTime, Ascending by default
    assert versions(SortOrder="Descending") == [5, 4, 3, 2, 1]
    assert versions(ModelApprovalStatus="Approved") == [1, 3, 5]
    assert versions(ModelApprovalStatus="Rejected") == [4]
    summary = sm.list_model_packages(ModelPackageGroupName="churn", MaxResults=1)["ModelPackageSummaryList"][0]
    assert summary["ModelPackageGroupName"] == "churn" and summary["ModelApprovalStatus"] == "Approved"
    both = sm.list_model_packages(ModelPackageType="Both", ModelApprovalStatus="Approved")["ModelPackageSummaryList"]
    assert len(both) == 4
    token = sm.list_model_packages(ModelPackageGroupName="churn", MaxResults=1)["NextToken"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:  # a token of another listing
        sm.list_model_packages(ModelPackageGroupName="fraud", MaxResults=1, NextToken=token)
    assert error(exc)[0] == "ValidationException"


def test_client_token_makes_a_retried_create_the_same_version(plane: Plane) -> None:
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="churn")
    a = sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec(), ClientToken="run-1")
    b = sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec(), ClientToken="run-1")
    c = sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec(), ClientToken="run-2")
    assert a["ModelPackageArn"] == b["ModelPackageArn"] != c["ModelPackageArn"]


# ---- approval ------------------------------------------------------------------------------------------------------
def test_approval_is_a_lifecycle_with_history_of_who_when_and_why(plane: Plane) -> None:
    sm = plane.client()
    reviewer = plane.keys.add_key("admin", "reviewer")
    sm.create_model_package_group(ModelPackageGroupName="churn")
    arn = sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec())["ModelPackageArn"]
    assert describe(plane, arn)["ModelApprovalStatus"] == "PendingManualApproval"
    plane.client(reviewer).update_model_package(
        ModelPackageArn=arn, ModelApprovalStatus="Approved", ApprovalDescription="AUC 0.91 on holdout"
    )
    d = describe(plane, arn)
    assert (d["ModelApprovalStatus"], d["ApprovalDescription"]) == ("Approved", "AUC 0.91 on holdout")
    assert d["LastModifiedBy"]["IamIdentity"]["PrincipalId"] == reviewer.access_key_id
    with pytest.raises(botocore.exceptions.ClientError) as exc:  # a decision is never undone into "undecided"
        sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="PendingManualApproval")
    assert error(exc) == (
        "ValidationException",
        "A model package that is Approved can be changed to Rejected, not to PendingManualApproval.",
    )
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Rejected", ApprovalDescription="drifted")
    described = plane.service.history(arn)
    admin = plane.keys.admin.access_key_id
    assert [(h.get("From"), h["To"], h["By"], h["Reason"]) for h in described] == [
        (None, "PendingManualApproval", admin, "created"),
        ("PendingManualApproval", "Approved", reviewer.access_key_id, "AUC 0.91 on holdout"),
        ("Approved", "Rejected", admin, "drifted"),
    ]
    assert all(a["Time"] <= b["Time"] for a, b in itertools.pairwise(described))
    # rejected is kept: still described and listed
    assert describe(plane, arn)["ModelApprovalStatus"] == "Rejected"
    listed = sm.list_model_packages(ModelPackageGroupName="churn", ModelApprovalStatus="Rejected")
    assert [s["ModelPackageArn"] for s in listed["ModelPackageSummaryList"]] == [arn]


def test_update_changes_customer_metadata_and_refuses_unknown_packages(plane: Plane) -> None:
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="churn")
    arn = sm.create_model_package(
        ModelPackageGroupName="churn", InferenceSpecification=spec(), CustomerMetadataProperties={"a": "1", "b": "2"}
    )["ModelPackageArn"]
    sm.update_model_package(
        ModelPackageArn=arn, CustomerMetadataProperties={"c": "3"}, CustomerMetadataPropertiesToRemove=["a"]
    )
    assert describe(plane, arn)["CustomerMetadataProperties"] == {"b": "2", "c": "3"}
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.update_model_package(ModelPackageArn=f"{ARN}:model-package/churn/9", ModelApprovalStatus="Approved")
    assert error(exc)[0] == "ValidationException" and "does not exist" in error(exc)[1]


def test_create_model_resolves_only_approved_versions(plane: Plane) -> None:
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="churn")
    arn = sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec("/models/c/1"))[
        "ModelPackageArn"
    ]
    with pytest.raises(Exception) as refused:
        plane.service.container_for(arn)
    assert "is PendingManualApproval: only an Approved model package version can be deployed" in str(refused.value)
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved")
    assert plane.service.container_for(arn) == {
        "Image": "servekit",
        "ModelDataUrl": "/models/c/1",
        "ModelPackageName": arn,
    }
    assert plane.service.container_for("churn/1")["ModelPackageName"] == arn


# ---- deploy on approval --------------------------------------------------------------------------------------------
def test_deploy_rule_tags_are_checked_and_kept_on_the_group(plane: Plane) -> None:
    sm = plane.client()
    group = sm.create_model_package_group(
        ModelPackageGroupName="churn", Tags=rule_tags("ep", deployment="canary=10 wait=60")
    )["ModelPackageGroupArn"]
    assert {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=group)["Tags"]}[ENDPOINT_TAG] == "ep"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.add_tags(ResourceArn=group, Tags=[{"Key": DEPLOYMENT_TAG, "Value": "canary=80"}])
    assert error(exc)[0] == "ValidationException" and "Invalid deploy-on-approval rule" in error(exc)[1]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.add_tags(ResourceArn=f"{ARN}:endpoint/ep", Tags=[{"Key": "a", "Value": "b"}])
    assert "model package groups only" in error(exc)[1]
    rule = plane.client(strict=False).describe_model_package_group(ModelPackageGroupName="churn")
    assert "ServekitDeployOnApproval" not in rule  # botocore keeps modeled members only
    sm.delete_tags(ResourceArn=group, TagKeys=[ENDPOINT_TAG, DEPLOYMENT_TAG])
    assert sm.list_tags(ResourceArn=group)["Tags"] == []


def test_approval_deploys_through_the_hosting_api_by_the_groups_rule(plane: Plane) -> None:
    sm = plane.client()
    sm.create_model_package_group(
        ModelPackageGroupName="churn", Tags=rule_tags("ep", deployment="steps=5/50/100 wait=30 alarm=p99")
    )
    arn = sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec("/m/1"))["ModelPackageArn"]
    assert plane.hosting.calls == []  # pending: nothing deployed
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved", ApprovalDescription="ok")
    ops = [name for name, _ in plane.hosting.calls]
    assert ops == [
        "DescribeEndpoint",
        "DescribeEndpointConfig",
        "DescribeModel",
        "CreateModel",
        "DescribeEndpointConfig",
        "CreateEndpointConfig",
        "UpdateEndpoint",
    ]
    calls = dict(plane.hosting.calls)
    assert calls["CreateModel"] == {"ModelName": "churn-v1", "PrimaryContainer": {"ModelPackageName": arn}}
    config = calls["CreateEndpointConfig"]
    assert config["EndpointConfigName"] == "ep-churn-v1"
    assert config["ProductionVariants"][0]["ModelName"] == "churn-v1"
    assert config["DataCaptureConfig"]["InitialSamplingPercentage"] == 5  # copied from the live config
    assert config["Tags"] == [{"Key": "servekit:TrafficSteps", "Value": "5 50 100"}]
    assert calls["UpdateEndpoint"] == {
        "EndpointName": "ep",
        "EndpointConfigName": "ep-churn-v1",
        "RetainAllVariantProperties": True,
        "DeploymentConfig": {
            "BlueGreenUpdatePolicy": {
                "TrafficRoutingConfiguration": {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 30}
            },
            "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "p99"}]},
        },
    }
    assert plane.hosting.models["churn-v1"]["PrimaryContainer"]["ModelDataUrl"] == "/m/1"
    deployments = plane.db.registry.events(arn, "deployment")
    assert [e.detail["Outcome"] for e in deployments] == ["UpdateEndpointStarted"]
    # rejected, then approved again: the model made from this package is reused; a new config is made
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Rejected")
    plane.hosting.calls.clear()
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved")
    assert "CreateModel" not in [n for n, _ in plane.hosting.calls]
    assert dict(plane.hosting.calls)["UpdateEndpoint"]["EndpointConfigName"] == "ep-churn-v1-2"


def test_a_deployment_that_cannot_start_is_recorded_and_the_approval_stands(plane: Plane) -> None:
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="churn", Tags=rule_tags("missing-endpoint"))
    arn = sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec())["ModelPackageArn"]
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved")
    assert describe(plane, arn)["ModelApprovalStatus"] == "Approved"
    (event,) = plane.db.registry.events(arn, "deployment")
    assert event.detail["Outcome"] == "Failed"
    assert event.detail["Message"] == 'ValidationException: Could not find endpoint "missing-endpoint".'


def test_describe_answers_history_and_deployments_in_servekit_fields(plane: Plane) -> None:
    sm = plane.client(strict=False)
    sm.create_model_package_group(ModelPackageGroupName="churn", Tags=rule_tags("ep"))
    arn = sm.create_model_package(ModelPackageGroupName="churn", InferenceSpecification=spec())["ModelPackageArn"]
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved", ApprovalDescription="go")
    sm.describe_model_package(ModelPackageName=arn)
    raw = json.loads(sm.last_response.body)
    assert [h["To"] for h in raw["ServekitApprovalHistory"]] == ["PendingManualApproval", "Approved"]
    assert raw["ServekitDeployments"][0]["EndpointName"] == "ep"
    sm.describe_model_package_group(ModelPackageGroupName="churn")
    group = json.loads(sm.last_response.body)
    assert group["ServekitDeployOnApproval"]["EndpointName"] == "ep"


def test_a_package_registered_by_its_source_uri_is_listed_approved_and_updated(plane: Plane) -> None:
    """What the SDK's integration suite does (test_session, test_model_package): a group that does not exist lists
    no packages; a version made with only a SourceUri; its lifecycle, card and extra inference specifications
    updated and described back."""
    sm = plane.client()
    assert sm.list_model_packages(ModelPackageGroupName="nothing-yet")["ModelPackageSummaryList"] == []
    sm.create_model_package_group(ModelPackageGroupName="by-uri")
    arn = sm.create_model_package(ModelPackageGroupName="by-uri", SourceUri="dummy source uri")["ModelPackageArn"]
    sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus="Approved")
    listed = sm.list_model_packages(ModelPackageGroupName="by-uri", ModelApprovalStatus="Approved")
    assert [p["ModelPackageArn"] for p in listed["ModelPackageSummaryList"]] == [arn]
    extra = {"Name": "gpu", "Containers": [{"Image": "servekit", "ModelDataUrl": "/models/churn"}]}
    sm.update_model_package(
        ModelPackageArn=arn,
        SourceUri="s3://bucket/model.tar.gz",
        ModelLifeCycle={"Stage": "Staging", "StageStatus": "In-Progress"},
        ModelCard={"ModelCardContent": "{}", "ModelCardStatus": "Draft"},
        AdditionalInferenceSpecificationsToAdd=[extra],
    )
    d = describe(plane, arn)
    assert d["SourceUri"] == "s3://bucket/model.tar.gz" and d["ModelLifeCycle"]["Stage"] == "Staging"
    assert d["ModelCard"]["ModelCardStatus"] == "Draft" and d["AdditionalInferenceSpecifications"] == [extra]
    with pytest.raises(botocore.exceptions.ClientError) as twice:
        sm.update_model_package(ModelPackageArn=arn, AdditionalInferenceSpecificationsToAdd=[extra])
    assert "unique names" in error(twice)[1]
    with pytest.raises(botocore.exceptions.ClientError) as neither:
        sm.create_model_package(ModelPackageGroupName="by-uri")
    assert "InferenceSpecification" in error(neither)[1]


def test_a_source_uri_naming_a_package_or_a_model_fills_the_inference_specification(plane: Plane) -> None:
    """As AWS does (the SDK's register(source_uri=...) leaves InferenceSpecification out then): from the package
    the ARN names, or from the model's primary container; an image-only container is a package's too."""
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="g")
    first = sm.create_model_package(ModelPackageGroupName="g", InferenceSpecification=spec("/models/a"))
    clone = sm.create_model_package(ModelPackageGroupName="g", SourceUri=first["ModelPackageArn"])
    assert describe(plane, clone["ModelPackageArn"])["InferenceSpecification"]["Containers"][0]["ModelDataUrl"] == (
        "/models/a"
    )
    plane.hosting.models["m1"] = {"ModelName": "m1", "PrimaryContainer": {"Image": "img", "ModelDataUrl": "/models/m1"}}
    from_model = sm.create_model_package(
        ModelPackageGroupName="g", SourceUri="arn:aws:sagemaker:us-east-1:000000000000:model/m1"
    )
    d = describe(plane, from_model["ModelPackageArn"])
    assert d["InferenceSpecification"]["Containers"] == [{"Image": "img", "ModelDataUrl": "/models/m1"}]
    assert d["SourceUri"] == "arn:aws:sagemaker:us-east-1:000000000000:model/m1"
    image_only = sm.create_model_package(
        ModelPackageGroupName="g", InferenceSpecification={"Containers": [{"Image": "xgboost:1"}]}
    )
    assert describe(plane, image_only["ModelPackageArn"])["InferenceSpecification"]["Containers"] == [
        {"Image": "xgboost:1"}
    ]


def test_a_model_card_update_keeps_what_it_does_not_name(plane: Plane) -> None:
    sm = plane.client()
    sm.create_model_package_group(ModelPackageGroupName="cards")
    arn = sm.create_model_package(
        ModelPackageGroupName="cards",
        InferenceSpecification=spec(),
        ModelCard={"ModelCardContent": '{"a": 1}', "ModelCardStatus": "Draft"},
    )["ModelPackageArn"]
    sm.update_model_package(ModelPackageArn=arn, ModelCard={"ModelCardContent": '{"a": 2}'})
    assert describe(plane, arn)["ModelCard"] == {"ModelCardContent": '{"a": 2}', "ModelCardStatus": "Draft"}
    sm.update_model_package(ModelPackageArn=arn, ModelCard={"ModelCardStatus": "PendingReview"})
    assert describe(plane, arn)["ModelCard"] == {"ModelCardContent": '{"a": 2}', "ModelCardStatus": "PendingReview"}
