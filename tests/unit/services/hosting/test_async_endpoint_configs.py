"""CreateEndpointConfig refuses an AsyncInferenceConfig servekit cannot run, saying what is expected: one without
S3OutputPath (answers would have nowhere to go) and one on a serverless variant (SageMaker runs asynchronous
inference on instances only)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.aws.errors import ApiError
from servekit.gateway.service import RoutingTable
from servekit.services.database import StateDB
from servekit.services.hosting.api import HostingService
from servekit.services.hosting.envelopes import Envelope
from servekit.services.hosting.instance_types import Machine
from servekit.services.hosting.orchestrator import Orchestrator

TYPES = {"ml.m5.large": Envelope(2, 8 * 2**30, 0.115)}
INSTANCES = {"VariantName": "A", "ModelName": "m", "InstanceType": "ml.m5.large", "InitialInstanceCount": 1}
SERVERLESS = {"VariantName": "A", "ModelName": "m", "ServerlessConfig": {"MemorySizeInMB": 2048, "MaxConcurrency": 2}}


class Envelopes:
    def envelope(self, instance_type: str) -> Envelope | None:
        return TYPES.get(instance_type)


@pytest.fixture
def hosting(tmp_path: Path) -> Iterator[HostingService]:
    with StateDB.open(tmp_path / "home") as db:
        no_backend: Any = None  # nothing is started here
        fleets = Orchestrator(
            db.hosting,
            no_backend,
            RoutingTable(),
            Envelopes(),
            lambda url: url,
            machine=Machine(cpus=2, memory_gib=8.0),
        )
        service = HostingService(db.hosting, fleets, Envelopes())
        asyncio.run(service.create_model({"ModelName": "m", "PrimaryContainer": {"ModelDataUrl": "/models/m"}}))
        yield service


def create(hosting: HostingService, variant: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(
        hosting.create_endpoint_config(
            {"EndpointConfigName": "c", "ProductionVariants": [dict(variant)], "AsyncInferenceConfig": config}
        )
    )


def test_an_async_config_needs_an_output_path_and_instances(hosting: HostingService) -> None:
    with pytest.raises(ApiError) as no_path:
        create(hosting, INSTANCES, {"OutputConfig": {"S3FailurePath": "s3://b/fail"}})
    assert no_path.value.code == "ValidationException"
    assert "S3OutputPath is required" in no_path.value.message
    with pytest.raises(ApiError) as serverless:
        create(hosting, SERVERLESS, {"OutputConfig": {"S3OutputPath": "s3://b/out"}})
    assert "instance variants only" in serverless.value.message
    assert create(hosting, INSTANCES, {"OutputConfig": {"S3OutputPath": "s3://b/out"}})["EndpointConfigArn"]
