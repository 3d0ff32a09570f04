"""RegisterScalableTarget and PutScheduledAction take MinCapacity 0 for a variant of an asynchronous endpoint (AWS's
documented scale to zero for asynchronous inference) and refuse it, with SageMaker's floor, for a real-time one."""

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
from servekit.services.database import StateDB

DIM = "sagemaker:variant:DesiredInstanceCount"


@pytest.fixture
def client(tmp_path: Path, boto_client: Callable[..., Any], api_keys: Credentials) -> Iterator[Any]:
    db = StateDB.open(tmp_path / "home-db")
    handlers = AutoscalingApi(
        db.autoscaling, Account(), clock=lambda: 1_700_000_000.0, asynchronous=lambda endpoint: endpoint == "queue"
    ).handlers()

    def dispatch(call: Call) -> Mapping[str, Any]:
        async def run() -> dict[str, Any]:
            return await handlers[call.operation](call.params)

        return asyncio.run(run())

    yield boto_client("application-autoscaling", api_keys.admin, dispatch=dispatch)
    db.close()


def key(endpoint: str) -> dict[str, str]:
    return {"ServiceNamespace": "sagemaker", "ResourceId": f"endpoint/{endpoint}/variant/A", "ScalableDimension": DIM}


def test_zero_is_taken_for_an_asynchronous_variant_only(client: Any) -> None:
    client.register_scalable_target(MinCapacity=0, MaxCapacity=2, **key("queue"))
    [target] = client.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert target["MinCapacity"] == 0
    with pytest.raises(ClientError) as refused:
        client.register_scalable_target(MinCapacity=0, MaxCapacity=2, **key("realtime"))
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert error["Message"].startswith("MinCapacity must be at least 1 for a SageMaker endpoint variant")
    assert "AsyncInferenceConfig" in error["Message"]  # says what would allow 0


def test_scheduled_actions_follow_the_same_floor(client: Any) -> None:
    client.register_scalable_target(MinCapacity=1, MaxCapacity=2, **key("queue"))
    client.register_scalable_target(MinCapacity=1, MaxCapacity=2, **key("realtime"))
    night = {"Schedule": "cron(0 22 * * ? *)", "ScalableTargetAction": {"MinCapacity": 0, "MaxCapacity": 1}}
    client.put_scheduled_action(ScheduledActionName="night", **night, **key("queue"))
    with pytest.raises(ClientError, match="MinCapacity must be at least 1"):
        client.put_scheduled_action(ScheduledActionName="night", **night, **key("realtime"))
