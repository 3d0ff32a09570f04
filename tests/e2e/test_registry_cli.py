"""``servekit registry ...`` as real processes against a real ``servekit up``: groups, packages, approve/reject with a
reason, history, and a deploy rule set, shown and cleared (checked through boto3 with the home's keys)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.e2e.test_hosting_cli import one_line_error, servekit

from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e


def ok(up: UpProcess, *args: str) -> str:
    result = servekit(up, "registry", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_registry_cli_groups_packages_approval_history_and_rules(up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    assert (
        ok(up, "create-group", "churn", "--description", "churn models").strip().endswith(":model-package-group/churn")
    )
    for factor in (1.0, 2.0):
        sm.create_model_package(
            ModelPackageGroupName="churn",
            InferenceSpecification={
                "Containers": [
                    {"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path, f"m{factor}", factor))}
                ]
            },
        )
    assert "churn models" in ok(up, "groups")
    listed = json.loads(ok(up, "packages", "--group", "churn", "--json"))["ModelPackageSummaryList"]
    assert [(p["ModelPackageVersion"], p["ModelApprovalStatus"]) for p in listed] == [
        (1, "PendingManualApproval"),
        (2, "PendingManualApproval"),
    ]

    out = ok(up, "approve", "churn/1", "--reason", "beats v0 on holdout")
    assert out.startswith("arn:aws:sagemaker:us-east-1:000000000000:model-package/churn/1: Approved")
    ok(up, "reject", "churn/2", "--reason", "worse recall")
    history = json.loads(ok(up, "history", "churn/1", "--json"))["ApprovalHistory"]
    assert [(h.get("From"), h["To"], h["Reason"]) for h in history] == [
        (None, "PendingManualApproval", "created"),
        ("PendingManualApproval", "Approved", "beats v0 on holdout"),
    ]
    described = json.loads(ok(up, "describe", "churn/2", "--json"))
    assert described["ModelApprovalStatus"] == "Rejected" and described["ApprovalDescription"] == "worse recall"

    # deploy rules: set (checked before anything is sent), show, replace, clear
    bad = servekit(up, "registry", "set-rule", "churn", "--endpoint", "ep", "--deployment", "canary=90")
    assert bad.returncode == 2 and "canary" in bad.stderr.lower(), bad.stderr
    out = ok(
        up,
        "set-rule",
        "churn",
        "--endpoint",
        "ep",
        "--variant",
        "AllTraffic",
        "--deployment",
        "canary=10 wait=60",
    )
    assert "update endpoint ep" in out
    rule = json.loads(ok(up, "show-rule", "churn", "--json"))["DeployOnApproval"]
    routing = rule["DeploymentConfig"]["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"]
    assert (rule["EndpointName"], rule["VariantName"], routing["Type"], routing["WaitIntervalInSeconds"]) == (
        "ep",
        "AllTraffic",
        "CANARY",
        60,
    )
    ok(up, "set-rule", "churn", "--endpoint", "ep2")  # a new rule drops the old variant and deployment
    group_arn = sm.describe_model_package_group(ModelPackageGroupName="churn")["ModelPackageGroupArn"]
    tags = {t["Key"]: t["Value"] for t in sm.list_tags(ResourceArn=group_arn)["Tags"]}
    assert tags == {"servekit:DeployOnApproval:Endpoint": "ep2"}
    assert "no deploy-on-approval rule" in ok(up, "clear-rule", "churn")
    assert sm.list_tags(ResourceArn=group_arn)["Tags"] == []
    one_line_error(servekit(up, "registry", "approve", "churn/9", "--reason", "x"), "servekit: ValidationException: ")
