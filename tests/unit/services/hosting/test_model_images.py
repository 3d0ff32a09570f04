"""CreateModel's Image (issue 30, item 13): which runtime serves it is recorded and logged, and a registry image
nothing maps is a ValidationException naming it and `servekit images add` (it was accepted silently)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.unit.services.hosting.test_framework_models import Envelopes, NoBackend

from servekit.aws.errors import ApiError
from servekit.gateway.service import RoutingTable
from servekit.services.database import StateDB
from servekit.services.hosting.api import HostingService
from servekit.services.hosting.images import UnknownImage, served_by
from servekit.services.hosting.instance_types import Machine
from servekit.services.hosting.orchestrator import Orchestrator

SKLEARN = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
OTHER = "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-own-server:3"


def test_the_rule() -> None:
    assert served_by("servekit", {}).startswith("servekit (")
    assert served_by("ghcr.io/acme/servekit:1.0", {}).startswith("servekit (")
    assert served_by("img:2", {}).startswith("servekit (")  # a plain name: servekit's own, as before
    assert "handler runtime" in served_by(SKLEARN, {"SAGEMAKER_PROGRAM": "train.py"})
    assert served_by(SKLEARN, {}).startswith("SageMaker framework image sagemaker-scikit-learn")
    assert served_by(OTHER, {}, lambda uri: uri == OTHER).startswith("mapped image")
    for unknown in (OTHER, "docker.io/library/nginx:1", "localhost:5000/model"):
        with pytest.raises(UnknownImage) as refused:
            served_by(unknown, {}, lambda uri: False)
        assert f"Image {unknown} is not an image servekit serves" in str(refused.value)
        assert f"servekit images add {unknown}" in str(refused.value)


@pytest.fixture
def hosting(tmp_path: Path) -> Iterator[HostingService]:
    with StateDB.open(tmp_path / "home") as db:
        fleets = Orchestrator(
            db.hosting, NoBackend(), RoutingTable(), Envelopes(), str,
            machine=Machine(cpus=4, memory_gib=16.0), cpus=[0, 1, 2, 3], framework_dir=tmp_path / "framework",
        )  # fmt: skip
        yield HostingService(db.hosting, fleets, Envelopes(), image_mapped=lambda uri: False)


def create(hosting: HostingService, name: str, image: str, model: Path) -> Any:
    c = {"Image": image, "ModelDataUrl": str(model)}
    return asyncio.run(hosting.create_model({"ModelName": name, "PrimaryContainer": c}))


def test_create_model_records_the_runtime_and_refuses_an_unmapped_registry_image(
    hosting: HostingService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="servekit.services.hosting.api"):
        create(hosting, "ok", "servekit", tmp_path)
    described = asyncio.run(hosting.describe_model({"ModelName": "ok"}))
    assert described["ServekitServedBy"] == "servekit (runtime chosen from the model's files)"
    assert "model ok: image servekit is served by servekit" in caplog.text
    with pytest.raises(ApiError) as refused:
        create(hosting, "nope", OTHER, tmp_path)
    assert refused.value.code == "ValidationException"
    assert f"servekit images add {OTHER}" in refused.value.message
    with pytest.raises(ApiError):
        asyncio.run(hosting.describe_model({"ModelName": "nope"}))  # nothing recorded
