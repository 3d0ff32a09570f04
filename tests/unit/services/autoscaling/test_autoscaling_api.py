"""Application Auto Scaling's operations through a botocore client, in process over the autoscaling state."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from servekit.aws import Credentials
from servekit.aws.front import Call
from servekit.aws.names import Account
from servekit.services.autoscaling.api import AutoscalingApi
from servekit.services.autoscaling.store import Autoscaling
from servekit.services.database import StateDB

RID = "endpoint/ep/variant/AllTraffic"
DIM = "sagemaker:variant:DesiredInstanceCount"
TT = {
    "TargetValue": 70.0,
    "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
    "ScaleInCooldown": 600,
}


@pytest.fixture
def aas(tmp_path: Path, boto_client: Callable[..., Any], api_keys: Credentials) -> Iterator[tuple[Any, Autoscaling]]:
    db = StateDB.open(tmp_path / "home-db")
    repo = db.autoscaling
    handlers = AutoscalingApi(repo, Account(), clock=lambda: 1_700_000_000.0).handlers()

    def dispatch(call: Call) -> Mapping[str, Any]:
        assert call.service == "application-autoscaling"

        async def run() -> dict[str, Any]:
            return await handlers[call.operation](call.params)

        return asyncio.run(run())

    yield boto_client("application-autoscaling", api_keys.admin, dispatch=dispatch), repo
    db.close()


def register(client: Any, **kw: Any) -> dict[str, Any]:
    params = {"ServiceNamespace": "sagemaker", "ResourceId": RID, "ScalableDimension": DIM}
    params.update(kw)
    result: dict[str, Any] = client.register_scalable_target(**params)
    return result


def test_register_describe_reregister_deregister(aas: tuple[Any, Autoscaling]) -> None:
    client, _ = aas
    arn = register(client, MinCapacity=1, MaxCapacity=4)["ScalableTargetARN"]
    assert arn.startswith("arn:aws:application-autoscaling:us-east-1:")
    assert register(client, MaxCapacity=6)["ScalableTargetARN"] == arn  # re-registering updates
    [target] = client.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert (target["ResourceId"], target["MinCapacity"], target["MaxCapacity"]) == (RID, 1, 6)
    assert client.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=["x"])["ScalableTargets"] == []
    client.deregister_scalable_target(ServiceNamespace="sagemaker", ResourceId=RID, ScalableDimension=DIM)
    assert client.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []
    with pytest.raises(ClientError) as err:
        client.deregister_scalable_target(ServiceNamespace="sagemaker", ResourceId=RID, ScalableDimension=DIM)
    assert err.value.response["Error"]["Code"] == "ObjectNotFoundException"


def test_register_validation(aas: tuple[Any, Autoscaling]) -> None:
    client, _ = aas
    cases: list[tuple[dict[str, Any], str]] = [
        ({"MinCapacity": 1}, "MaxCapacity are required"),
        ({"MinCapacity": 0, "MaxCapacity": 2}, "at least 1"),
        ({"MinCapacity": 3, "MaxCapacity": 2}, "cannot be greater"),
        ({"MinCapacity": 1, "MaxCapacity": 2, "ResourceId": "endpoint/ep"}, "endpoint/<endpoint-name>"),
        (
            {
                "MinCapacity": 1,
                "MaxCapacity": 2,
                "ScalableDimension": "sagemaker:variant:DesiredProvisionedConcurrency",
            },
            "Unsupported",
        ),
    ]
    for kw, message in cases:
        with pytest.raises(ClientError) as err:
            register(client, **kw)
        assert err.value.response["Error"]["Code"] == "ValidationException"
        assert message in err.value.response["Error"]["Message"]


def test_target_tracking_policy_lifecycle(aas: tuple[Any, Autoscaling]) -> None:
    client, _ = aas
    key = {"ServiceNamespace": "sagemaker", "ResourceId": RID, "ScalableDimension": DIM}
    with pytest.raises(ClientError) as err:  # no target yet
        client.put_scaling_policy(
            PolicyName="ipi", PolicyType="TargetTrackingScaling", TargetTrackingScalingPolicyConfiguration=TT, **key
        )
    assert err.value.response["Error"]["Code"] == "ObjectNotFoundException"
    register(client, MinCapacity=1, MaxCapacity=4)
    out = client.put_scaling_policy(
        PolicyName="ipi", PolicyType="TargetTrackingScaling", TargetTrackingScalingPolicyConfiguration=TT, **key
    )
    assert ":scalingPolicy:" in out["PolicyARN"] and out["PolicyARN"].endswith(
        f"resource/sagemaker/{RID}:policyName/ipi"
    )
    high, low = (a["AlarmName"] for a in out["Alarms"])
    assert high.startswith(f"TargetTracking-{RID}-AlarmHigh-") and low.startswith(f"TargetTracking-{RID}-AlarmLow-")
    again = client.put_scaling_policy(
        PolicyName="ipi", PolicyType="TargetTrackingScaling", TargetTrackingScalingPolicyConfiguration=TT, **key
    )
    assert again["PolicyARN"] == out["PolicyARN"]
    [policy] = client.describe_scaling_policies(ServiceNamespace="sagemaker", ResourceId=RID)["ScalingPolicies"]
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    assert (config["TargetValue"], config["ScaleInCooldown"], config["ScaleOutCooldown"]) == (70.0, 600, 300)
    assert config["DisableScaleIn"] is False
    client.delete_scaling_policy(PolicyName="ipi", **key)
    assert client.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"] == []
    with pytest.raises(ClientError) as err:
        client.delete_scaling_policy(PolicyName="ipi", **key)
    assert err.value.response["Error"]["Code"] == "ObjectNotFoundException"


def test_invalid_step_scaling_predictive_scaling_and_other_metrics_are_refused(aas: tuple[Any, Autoscaling]) -> None:
    client, _ = aas
    key = {"ServiceNamespace": "sagemaker", "ResourceId": RID, "ScalableDimension": DIM}
    register(client, MinCapacity=1, MaxCapacity=4)
    with pytest.raises(ClientError) as err:
        client.put_scaling_policy(
            PolicyName="s",
            PolicyType="StepScaling",
            StepScalingPolicyConfiguration={"AdjustmentType": "ChangeInCapacity"},
            **key,
        )
    assert err.value.response["Error"]["Code"] == "ValidationException"
    assert "at least one step adjustment" in err.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as err:
        client.put_scaling_policy(PolicyName="pr", PolicyType="PredictiveScaling", **key)
    assert "PredictiveScaling is not implemented" in err.value.response["Error"]["Message"]
    other = {
        **TT,
        "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantProvisionedConcurrencyUtilization"},
    }
    with pytest.raises(ClientError) as err:
        client.put_scaling_policy(
            PolicyName="p", PolicyType="TargetTrackingScaling", TargetTrackingScalingPolicyConfiguration=other, **key
        )
    assert "SageMakerVariantInvocationsPerInstance or a CustomizedMetricSpecification" in str(err.value)
    math = {"TargetValue": 70.0, "CustomizedMetricSpecification": {"Metrics": [{"Id": "m1", "Expression": "a+b"}]}}
    with pytest.raises(ClientError) as err:
        client.put_scaling_policy(
            PolicyName="m", PolicyType="TargetTrackingScaling", TargetTrackingScalingPolicyConfiguration=math, **key
        )
    assert "metric math" in err.value.response["Error"]["Message"]


def test_a_customized_metric_policy_is_kept(aas: tuple[Any, Autoscaling]) -> None:
    client, _ = aas
    key = {"ServiceNamespace": "sagemaker", "ResourceId": RID, "ScalableDimension": DIM}
    register(client, MinCapacity=1, MaxCapacity=4)
    cpu = {
        "TargetValue": 70.0,
        "CustomizedMetricSpecification": {
            "MetricName": "CPUUtilization",
            "Namespace": "/aws/sagemaker/Endpoints",
            "Dimensions": [{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "AllTraffic"}],
            "Statistic": "Average",
            "Unit": "Percent",
        },
    }
    client.put_scaling_policy(
        PolicyName="cpu", PolicyType="TargetTrackingScaling", TargetTrackingScalingPolicyConfiguration=cpu, **key
    )
    [policy] = client.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    spec = policy["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]
    assert (spec["MetricName"], spec["Statistic"]) == ("CPUUtilization", "Average")


def test_deregister_deletes_policies_and_activities_are_listed(aas: tuple[Any, Autoscaling]) -> None:
    client, repo = aas
    key = {"ServiceNamespace": "sagemaker", "ResourceId": RID, "ScalableDimension": DIM}
    register(client, MinCapacity=1, MaxCapacity=4)
    client.put_scaling_policy(
        PolicyName="ipi", PolicyType="TargetTrackingScaling", TargetTrackingScalingPolicyConfiguration=TT, **key
    )
    repo.add_activity(
        ("sagemaker", RID, DIM),
        "a1",
        {
            "ActivityId": "a1",
            "ServiceNamespace": "sagemaker",
            "ResourceId": RID,
            "ScalableDimension": DIM,
            "Description": "Setting desired instance count to 3.",
            "Cause": "monitor alarm X in state ALARM triggered policy ipi",
            "StartTime": 1_700_000_000.0,
            "EndTime": 1_700_000_060.0,
            "StatusCode": "Successful",
            "StatusMessage": "Successfully set desired instance count to 3. "
            "Change successfully fulfilled by sagemaker.",
        },
    )
    [activity] = client.describe_scaling_activities(ServiceNamespace="sagemaker", ResourceId=RID)["ScalingActivities"]
    assert activity["Description"] == "Setting desired instance count to 3." and activity["StatusCode"] == "Successful"
    assert activity["EndTime"].timestamp() == 1_700_000_060.0
    client.deregister_scalable_target(**key)
    assert client.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"] == []
    assert len(client.describe_scaling_activities(ServiceNamespace="sagemaker")["ScalingActivities"]) == 1
