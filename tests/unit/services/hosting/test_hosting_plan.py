"""The hosting layer turns an endpoint config into instance command lines: DataCaptureConfig becomes each variant's
capture flags (SageMaker's <endpoint>/<variant> layout), the instance type's envelope its threads and memory."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.backends.local import InstanceHandle, InstanceSpec, LocalProcessBackend
from servekit.gateway.service import RoutingTable
from servekit.services.database import StateDB
from servekit.services.hosting.api import HostingService
from servekit.services.hosting.capture import capture_args
from servekit.services.hosting.envelopes import Envelope
from servekit.services.hosting.instance_types import Machine
from servekit.services.hosting.orchestrator import Orchestrator
from servekit.services.hosting.store_rows import VariantState

PRICES = {"ml.t2.medium": Envelope(2, 4 * 2**30, 0.056), "ml.local.big": Envelope(8, 64 * 2**30, 1.5)}


class Envelopes:
    def envelope(self, instance_type: str) -> Envelope | None:
        return PRICES.get(instance_type)


class NoBackend:
    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        raise AssertionError("no instance is started in these tests")

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None:
        pass

    def alive(self, handle: InstanceHandle) -> bool:
        return False

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        return ""

    async def close(self) -> None:
        pass


@pytest.fixture
def hosting(tmp_path: Path) -> Iterator[HostingService]:
    with StateDB.open(tmp_path / "home") as db:
        fleets = Orchestrator(
            db.hosting,
            NoBackend(),
            RoutingTable(),
            Envelopes(),
            lambda url: url,
            machine=Machine(cpus=4, memory_gib=16.0),
            cpus=[0, 1, 2, 3],
        )
        yield HostingService(db.hosting, fleets, Envelopes())


def make_config(hosting: HostingService, capture: dict[str, Any] | None, variants: list[tuple[str, str, int]]) -> None:
    asyncio.run(hosting.create_model({"ModelName": "m", "PrimaryContainer": {"ModelDataUrl": "/models/m"}}))
    params: dict[str, Any] = {
        "EndpointConfigName": "cfg",
        "ProductionVariants": [
            {"VariantName": v, "ModelName": "m", "InstanceType": t, "InitialInstanceCount": n} for v, t, n in variants
        ],
    }
    if capture is not None:
        params["DataCaptureConfig"] = capture
    asyncio.run(hosting.create_endpoint_config(params))


def capture(*modes: str, enable: bool = True, pct: int = 40) -> dict[str, Any]:
    return {
        "EnableCapture": enable,
        "InitialSamplingPercentage": pct,
        "DestinationS3Uri": "file:///data/capture",
        "CaptureOptions": [{"CaptureMode": m} for m in modes],
    }


@pytest.mark.parametrize(
    ("modes", "expected"),
    [
        (("Input",), "input"),
        (("Output",), "output"),
        (("Input", "Output"), "both"),
        (("InputAndOutput",), "both"),
        ((), "both"),
    ],
)
def test_capture_options_become_the_serve_capture_mode(modes: tuple[str, ...], expected: str) -> None:
    assert capture_args(capture(*modes), "ep", "A") == (
        "--capture_destination",
        "file:///data/capture",
        "--capture_sampling_percentage",
        "40",
        "--capture_mode",
        expected,
        "--capture_partition_prefix",
        "ep/A",
    )


def test_no_or_disabled_capture_adds_no_flags() -> None:
    assert capture_args(None, "ep", "A") == ()
    assert capture_args(capture("Input", enable=False), "ep", "A") == ()


def test_the_plan_carries_capture_flags_per_variant_and_the_envelope(hosting: HostingService) -> None:
    make_config(hosting, capture("Input", "Output", pct=100), [("A", "ml.t2.medium", 1), ("B", "ml.local.big", 2)])
    plan = hosting.fleets.plan("ep", "cfg")
    a, b = plan.variants
    assert a.extra_args[-2:] == ("--capture_partition_prefix", "ep/A")
    assert b.extra_args[-2:] == ("--capture_partition_prefix", "ep/B")
    assert "--capture_sampling_percentage" in a.extra_args and "100" in a.extra_args
    assert (a.vcpus, a.memory_bytes, b.vcpus, b.memory_bytes) == (2, 4 * 2**30, 8, 64 * 2**30)


def test_the_plan_carries_the_destination_the_plane_maps_a_capture_uri_to(tmp_path: Path) -> None:
    """servekit up hands in where instances write a DestinationS3Uri (its own buckets: a staging folder)."""
    staged = {"s3://own/capture": "file:///home/capture-staging/own/capture"}
    with StateDB.open(tmp_path / "home") as db:
        fleets = Orchestrator(
            db.hosting,
            NoBackend(),
            RoutingTable(),
            Envelopes(),
            lambda url: url,
            machine=Machine(cpus=4, memory_gib=16.0),
            cpus=[0, 1, 2, 3],
            capture_destination=lambda uri: staged.get(uri, uri),
        )
        hosting = HostingService(db.hosting, fleets, Envelopes())
        make_config(hosting, {**capture("Input"), "DestinationS3Uri": "s3://own/capture"}, [("A", "ml.t2.medium", 1)])
        args = hosting.fleets.plan("ep", "cfg").variants[0].extra_args
    assert args[args.index("--capture_destination") + 1] == "file:///home/capture-staging/own/capture"
    assert args[-2:] == ("--capture_partition_prefix", "ep/A")
    # without a mapping (servekit export's pods, a plane on Ray) instances capture to the URI as given
    assert capture_args({**capture("Input"), "DestinationS3Uri": "s3://own/capture"}, "ep", "A")[1] == (
        "s3://own/capture"
    )


def test_without_capture_the_plan_has_no_capture_flags(hosting: HostingService) -> None:
    make_config(hosting, None, [("A", "ml.t2.medium", 1)])
    assert hosting.fleets.plan("ep", "cfg").variants[0].extra_args == ()


def test_the_instance_command_runs_one_model_thread_per_vcpu_and_carries_the_extra_flags(tmp_path: Path) -> None:
    spec = InstanceSpec("ep-A-1", "m", "/models/m", vcpus=8, extra_args=capture_args(capture("Input"), "ep", "A"))
    cmd = LocalProcessBackend(tmp_path).command(spec, 4321)
    assert cmd[cmd.index("--num_inference_threads") + 1] == "8"
    assert cmd[cmd.index("--tensorflow_intra_op_parallelism") + 1] == "8"
    assert cmd[cmd.index("--rest_api_port") + 1] == "4321"
    assert cmd[cmd.index("--capture_partition_prefix") + 1] == "ep/A"


def test_cost_per_hour_is_price_times_instances_over_variants(hosting: HostingService) -> None:
    make_config(hosting, None, [("A", "ml.t2.medium", 3), ("B", "ml.local.big", 2)])
    variants = [VariantState("A", 1.0, 1.0, 0, 3), VariantState("B", 1.0, 1.0, 0, 2)]
    row = hosting.repo.create_endpoint("ep", "arn:ep", "cfg", "Creating", variants)
    assert hosting.fleets.cost_per_hour(row) == pytest.approx(3 * 0.056 + 2 * 1.5)
    described = asyncio.run(hosting.describe_endpoint({"EndpointName": "ep"}))
    assert described["ServekitCostPerHour"] == pytest.approx(3.168)
    failed = hosting.repo.transition("ep", "Failed", expected="Creating", reason="test")
    assert hosting.fleets.cost_per_hour(failed) == 0.0


def test_oversubscription_is_a_warning_in_describe_never_a_clamp(hosting: HostingService) -> None:
    make_config(hosting, None, [("A", "ml.local.big", 2)])  # 16 vCPUs and 128 GiB on a 4-CPU, 16 GiB machine
    hosting.repo.create_endpoint("ep", "arn:ep", "cfg", "Creating", [VariantState("A", 1.0, 1.0, 0, 2)])
    plan = hosting.fleets.plan("ep", "cfg")
    assert (plan.variants[0].vcpus, plan.variants[0].count) == (8, 2)  # as asked
    warnings = asyncio.run(hosting.describe_endpoint({"EndpointName": "ep"}))["ServekitWarnings"]
    assert any("ask for 16 vCPUs; this machine has 4" in w for w in warnings), warnings
    assert any("128 GiB" in w for w in warnings), warnings


def test_a_plan_that_fits_has_no_warnings(hosting: HostingService) -> None:
    make_config(hosting, None, [("A", "ml.t2.medium", 1)])
    hosting.repo.create_endpoint("ep", "arn:ep", "cfg", "Creating", [VariantState("A", 1.0, 1.0, 0, 1)])
    hosting.fleets.plan("ep", "cfg")
    assert "ServekitWarnings" not in asyncio.run(hosting.describe_endpoint({"EndpointName": "ep"}))


def test_the_control_planes_metrics_carry_each_endpoints_cost(hosting: HostingService, tmp_path: Path) -> None:
    from servekit.aws import Api, Credentials
    from servekit.edge.plane import ControlPlane
    from servekit.gateway.service import Gateway

    make_config(hosting, None, [("A", "ml.local.big", 2)])
    hosting.repo.create_endpoint("ep", "arn:ep", "cfg", "InService", [VariantState("A", 1.0, 1.0, 2, 2)])
    plane = ControlPlane(Api(Credentials.load_or_create(tmp_path / "keys")), hosting, Gateway(RoutingTable()))
    assert 'servekit_endpoint_cost_per_hour{endpoint="ep"} 3.0' in plane.metrics().decode()
    hosting.repo.delete_endpoint("ep")
    assert "servekit_endpoint_cost_per_hour{" not in plane.metrics().decode()
