"""Application Auto Scaling of inference components (issue 29): ResourceId ``inference-component/<name>`` with
ScalableDimension ``sagemaker:inference-component:DesiredCopyCount`` (the other dimension refused), MinCapacity 0
taken, an unknown component refused, target tracking on SageMakerInferenceComponentInvocationsPerCopy reading
InvocationsPerCopy by InferenceComponentName."""

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
from servekit.services.autoscaling.target_tracking import TargetTrackingPolicy, component_of, parse_resource_id
from servekit.services.database import StateDB

TARGET = {
    "ServiceNamespace": "sagemaker",
    "ResourceId": "inference-component/alpha",
    "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount",
}


@pytest.fixture
def client(tmp_path: Path, boto_client: Callable[..., Any], api_keys: Credentials) -> Iterator[Any]:
    db = StateDB.open(tmp_path / "home-db")
    exists = {"inference-component/alpha"}
    handlers = AutoscalingApi(
        db.autoscaling, Account(), clock=lambda: 1_700_000_000.0, variant_exists=lambda e, v: e in exists
    ).handlers()

    def dispatch(call: Call) -> Mapping[str, Any]:
        async def run() -> dict[str, Any]:
            return await handlers[call.operation](call.params)

        return asyncio.run(run())

    yield boto_client("application-autoscaling", api_keys.admin, dispatch=dispatch)
    db.close()


def test_resource_ids() -> None:
    assert component_of("inference-component/alpha") == "alpha"
    assert component_of("endpoint/e/variant/v") is None and component_of("inference-component/") is None
    assert parse_resource_id("inference-component/alpha") == ("inference-component/alpha", "DesiredCopyCount")
    with pytest.raises(ValueError, match="inference-component/<inference-component-name>"):
        parse_resource_id("inference-component/a/b")


def test_a_component_registers_with_its_own_dimension_and_min_zero(client: Any) -> None:
    client.register_scalable_target(MinCapacity=0, MaxCapacity=3, **TARGET)
    [target] = client.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert (target["MinCapacity"], target["ScalableDimension"]) == (0, TARGET["ScalableDimension"])
    with pytest.raises(ClientError) as wrong:
        client.register_scalable_target(
            MinCapacity=1, MaxCapacity=3, **{**TARGET, "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}
        )
    assert "it takes sagemaker:inference-component:DesiredCopyCount" in wrong.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as unknown:
        client.register_scalable_target(
            MinCapacity=1, MaxCapacity=3, **{**TARGET, "ResourceId": "inference-component/x"}
        )
    assert "no inference component" in unknown.value.response["Error"]["Message"]


def test_target_tracking_per_copy(client: Any) -> None:
    client.register_scalable_target(MinCapacity=1, MaxCapacity=3, **TARGET)
    config = {"TargetValue": 5.0, "PredefinedMetricSpecification": {"PredefinedMetricType": "X"}}
    for metric, ok in (("SageMakerVariantInvocationsPerInstance", False),
                       ("SageMakerInferenceComponentInvocationsPerCopy", True)):  # fmt: skip
        config["PredefinedMetricSpecification"] = {"PredefinedMetricType": metric}
        call = lambda: client.put_scaling_policy(  # noqa: E731
            PolicyName="p", PolicyType="TargetTrackingScaling", TargetTrackingScalingPolicyConfiguration=config,
            **TARGET,
        )  # fmt: skip
        if ok:
            call()
        else:
            with pytest.raises(ClientError):
                call()
    policy = TargetTrackingPolicy(
        "p", "inference-component/alpha", 5.0, metric_type="SageMakerInferenceComponentInvocationsPerCopy"
    )
    query = policy.query()
    assert (query.metric_name, query.dimensions) == ("InvocationsPerCopy", (("InferenceComponentName", "alpha"),))
