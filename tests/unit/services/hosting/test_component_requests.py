"""The inference component operations' refusals and immediate decisions, on a real state database and no process:
what a request may not ask (with SageMaker's ValidationException and a message saying what is expected), a copy that
can never fit the instance type, one that finds the variant's instances full (Failed at once, with the sizes), the
lifecycle's refusals, and routing refusals of InvokeEndpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from servekit.aws.errors import ApiError
from servekit.gateway.service import GatewayError, RoutingTable
from servekit.services.database import StateDB
from servekit.services.hosting.components import InferenceComponents
from servekit.services.hosting.envelopes import TableEnvelopes
from servekit.services.hosting.instance_types import load_instance_types
from servekit.services.hosting.store_rows import ContainerSpec, VariantState

IC_VARIANT = {"VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge", "InitialInstanceCount": 1}


class NoFleets:
    """Stands in for the orchestrator: background work (starting processes) is kept, run only by a test that asks,
    and no controller may be made (that would start processes)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.works: list[Coroutine[Any, Any, None]] = []

    def background(self, work: Coroutine[Any, Any, None]) -> None:
        self.started.append(work.__qualname__)
        self.works.append(work)

    def standalone_controller(self, *args: Any) -> Any:
        raise AssertionError("no process may start in this test")

    def close(self) -> None:
        for work in self.works:
            work.close()


@pytest.fixture
def ic(tmp_path: Path) -> Iterator[tuple[InferenceComponents, NoFleets, RoutingTable]]:
    with StateDB.open(tmp_path / "home") as db:
        hosting = db.hosting
        hosting.create_model("m", "arn:m", ContainerSpec(model_data_url="/models/m"), {})
        hosting.create_endpoint_config("ic", "arn:c", [IC_VARIANT])
        hosting.create_endpoint_config("plain", "arn:p", [{**IC_VARIANT, "ModelName": "m"}])
        state = [VariantState("AllTraffic", 1.0, 1.0, 1, 1)]
        hosting.create_endpoint("ic", "arn:e", "ic", "InService", state)
        hosting.create_endpoint("plain", "arn:p", "plain", "InService", state)
        hosting.create_endpoint("new", "arn:n", "ic", "Creating", state)
        fleets, table = NoFleets(), RoutingTable()
        envelopes = TableEnvelopes(load_instance_types())
        yield InferenceComponents(db.inference_components, hosting, cast(Any, fleets), envelopes, table), fleets, table
        fleets.close()


def spec(cores: float = 1, memory: int = 1024, **extra: Any) -> dict[str, Any]:
    need = {"NumberOfCpuCoresRequired": cores, "MinMemoryRequiredInMb": memory}
    return {"ModelName": "m", "ComputeResourceRequirements": need, **extra}


def create(ic: InferenceComponents, name: str = "a", endpoint: str = "ic", **p: Any) -> dict[str, Any]:
    params = {"InferenceComponentName": name, "EndpointName": endpoint, "Specification": spec(),
              "RuntimeConfig": {"CopyCount": 1}, **p}  # fmt: skip
    return asyncio.run(ic.create(params))


def refused(call: Any) -> str:
    with pytest.raises(ApiError) as exc:
        call()
    assert exc.value.code == "ValidationException" and exc.value.status == 400
    return exc.value.message


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"Specification": None}, "Specification is required"),
        ({"RuntimeConfig": None}, "RuntimeConfig.CopyCount is required"),
        ({"Specifications": [{"ComponentName": "x"}]}, "Specifications (several containers) is not supported"),
        ({"Specification": spec(Container={"Image": "i"})}, "Container and StartupParameters are not supported"),
        ({"Specification": {**spec(), "ModelName": "nope"}}, 'Could not find model "arn:aws:sagemaker:'),
        ({"EndpointName": "missing"}, 'Could not find endpoint "arn:aws:sagemaker:'),
        ({"EndpointName": "new"}, "is Creating: inference components are added to an InService one"),
        ({"EndpointName": "plain"}, "IC-based variant (an InstanceType and no ModelName)"),
        ({"VariantName": "Other"}, "has no IC-based variant Other (an InstanceType and no ModelName)"),
    ],
)
def test_requests_refused_with_what_is_expected(
    ic: tuple[InferenceComponents, NoFleets, RoutingTable], params: dict[str, Any], expected: str
) -> None:
    components, fleets, _ = ic
    assert expected in refused(lambda: create(components, **params))
    assert fleets.started == [] and components.repo.all() == []


def test_a_copy_larger_than_the_instance_type_is_refused_with_the_sizes(
    ic: tuple[InferenceComponents, NoFleets, RoutingTable],
) -> None:
    components, _, _ = ic
    message = refused(lambda: create(components, Specification=spec(cores=8)))
    assert "A copy needs 8 CPU core(s) and 1024 MB of memory; an instance of ml.m5.xlarge has 4 vCPU(s)" in message


def test_full_instances_fail_the_component_at_once_and_free_room_is_reused(
    ic: tuple[InferenceComponents, NoFleets, RoutingTable],
) -> None:
    components, fleets, _ = ic
    create(components, "a", RuntimeConfig={"CopyCount": 3})  # 3 of the instance's 4 cores
    assert fleets.started == ["InferenceComponents._start"]
    create(components, "b", Specification=spec(cores=2))
    b = asyncio.run(components.describe({"InferenceComponentName": "b"}))
    assert b["InferenceComponentStatus"] == "Failed" and b["RuntimeConfig"]["CurrentCopyCount"] == 0
    assert "needs 2 CPU core(s) and 1024 MB" in b["FailureReason"] and "at most 1 core(s)" in b["FailureReason"]
    create(components, "c")  # the last core
    assert components.variant_summaries("ic")[0]["CurrentInstanceCount"] == 1
    assert "already existing" in refused(lambda: create(components, "A"))  # names ignore case


def test_lifecycle_refusals_and_listing(ic: tuple[InferenceComponents, NoFleets, RoutingTable]) -> None:
    components, _, _ = ic
    create(components, "a")
    update = {"InferenceComponentName": "a", "RuntimeConfig": {"CopyCount": 2}}
    assert "while it is Creating" in refused(lambda: asyncio.run(components.update(update)))
    assert "needs a Specification or a RuntimeConfig" in refused(
        lambda: asyncio.run(components.update({"InferenceComponentName": "a"}))
    )
    missing = {"InferenceComponentName": "zz"}
    assert 'Could not find inference component "arn:aws:sagemaker:' in refused(
        lambda: asyncio.run(components.describe(missing))
    )
    listed = asyncio.run(components.list_components({"EndpointNameEquals": "ic"}))
    assert [c["InferenceComponentName"] for c in listed["InferenceComponents"]] == ["a"]
    assert asyncio.run(components.list_components({"EndpointNameEquals": "plain"}))["InferenceComponents"] == []
    assert "NextToken" in refused(lambda: asyncio.run(components.list_components({"NextToken": "garbage"})))


def test_invocation_routing(ic: tuple[InferenceComponents, NoFleets, RoutingTable]) -> None:
    components, _, table = ic
    table.set_endpoint("ic", [])  # an IC-based endpoint publishes no fleet of its own
    create(components, "a")
    with pytest.raises(GatewayError) as unnamed:
        components.route("ic", None)
    assert unnamed.value.code == "ValidationError" and "name the one to invoke with InferenceComponentName" in str(
        unnamed.value
    )
    with pytest.raises(GatewayError) as unknown:
        components.route("ic", "nope")
    assert unknown.value.message == "Inference component nope not found for endpoint ic."
    assert components.route("plain", None) == "plain"  # other endpoints are left alone


def test_a_component_deleted_before_its_copies_start_starts_none(
    ic: tuple[InferenceComponents, NoFleets, RoutingTable],
) -> None:
    components, fleets, _ = ic
    create(components, "a", RuntimeConfig={"CopyCount": 4})  # the whole instance
    asyncio.run(components.delete({"InferenceComponentName": "a"}))
    start, tear_down = fleets.works
    fleets.works = []
    asyncio.run(start)  # the create's start runs after the delete: it finds the component Deleting
    asyncio.run(tear_down)
    assert components.repo.all() == []
    create(components, "b", RuntimeConfig={"CopyCount": 4})  # its room was given back
    b = asyncio.run(components.describe({"InferenceComponentName": "b"}))
    assert b["InferenceComponentStatus"] == "Creating"
