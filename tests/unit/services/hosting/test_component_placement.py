"""Inference components' rules (hosting.component_rules), pure: where copies go on a variant's instances (spread,
packed within the room, a new instance under managed scaling, refused with the sizes), the instances a variant
runs, the component lifecycle's legal moves and what a request's Specification may ask."""

from __future__ import annotations

import pytest

from servekit.errors import IllegalTransition
from servekit.services.hosting.component_rules import (
    ComponentStatus,
    CopyNeed,
    InstanceBounds,
    InstanceSize,
    PlacedCopy,
    check_component_transition,
    check_ic_variant,
    check_specification,
    compact,
    instance_bounds,
    instances_in_use,
    is_ic_variant,
    need_of,
    place,
)

XLARGE = InstanceSize("ml.m5.xlarge", 4, 16384)
ONE = CopyNeed(1, 1024)


def test_copies_spread_over_the_instances_the_variant_runs() -> None:
    decided = place(XLARGE, [], "a", ONE, 4, InstanceBounds(2, 2))
    assert decided.refused is None
    assert decided.instances == (0, 1, 0, 1)  # one per instance before a second on any


def test_another_component_goes_where_most_memory_is_free() -> None:
    placed = [PlacedCopy("a", CopyNeed(1, 8192), 0)]
    decided = place(XLARGE, placed, "b", ONE, 1, InstanceBounds(2, 2))
    assert decided.instances == (1,)


def test_copies_fill_an_instance_by_cores_then_are_refused_with_the_sizes() -> None:
    placed = [PlacedCopy("a", ONE, 0), PlacedCopy("b", ONE, 0), PlacedCopy("a", ONE, 0)]
    assert place(XLARGE, placed, "c", ONE, 1, InstanceBounds(1, 1)).instances == (0,)
    refused = place(XLARGE, placed, "c", CopyNeed(2, 1024), 1, InstanceBounds(1, 1)).refused
    assert refused is not None
    assert "needs 2 CPU core(s) and 1024 MB" in refused and "at most 1 core(s) and 13312 MB free" in refused


def test_memory_refuses_too() -> None:
    placed = [PlacedCopy("a", CopyNeed(1, 15000), 0)]
    refused = place(XLARGE, placed, "b", CopyNeed(1, 2048), 1, InstanceBounds(1, 1)).refused
    assert refused is not None and "1384 MB free" in refused


def test_a_copy_larger_than_the_instance_type_can_never_fit() -> None:
    refused = place(XLARGE, [], "big", CopyNeed(8, 1024), 1, InstanceBounds(0, 10)).refused
    assert refused == (
        "A copy needs 8 CPU core(s) and 1024 MB of memory; an instance of ml.m5.xlarge has 4 vCPU(s) and 16384 MB."
    )


def test_managed_scaling_opens_instances_only_when_the_running_ones_are_full() -> None:
    bounds = InstanceBounds(0, 2)
    first = place(XLARGE, [], "a", CopyNeed(3, 1024), 2, bounds)
    assert first.instances == (0, 1)  # 3 cores each: one per instance
    placed = [PlacedCopy("a", CopyNeed(3, 1024), i) for i in first.instances]
    assert place(XLARGE, placed, "b", ONE, 2, bounds).instances == (0, 1)
    assert place(XLARGE, placed, "b", CopyNeed(2, 1024), 1, bounds).refused is not None  # the maximum is reached


def test_instances_in_use_and_scale_to_zero() -> None:
    placed = [PlacedCopy("a", ONE, 0), PlacedCopy("b", ONE, 2)]
    assert instances_in_use(placed, 0) == 2
    assert instances_in_use([], 0) == 0  # MinInstanceCount 0 and no copy: no instance
    assert instances_in_use([], 1) == 1
    assert [p.instance for p in compact(placed)] == [0, 1]


def test_instance_bounds_of_a_variant() -> None:
    assert instance_bounds({"InitialInstanceCount": 2}) == InstanceBounds(2, 2)
    managed = {"InitialInstanceCount": 1, "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0,
                                                                     "MaxInstanceCount": 3}}  # fmt: skip
    assert instance_bounds(managed) == InstanceBounds(0, 3)
    disabled = {"InitialInstanceCount": 1, "ManagedInstanceScaling": {"Status": "DISABLED", "MaxInstanceCount": 3}}
    assert instance_bounds(disabled) == InstanceBounds(1, 1)


def test_ic_variants_and_their_refusals() -> None:
    assert is_ic_variant({"VariantName": "v", "InstanceType": "ml.m5.large"})
    assert not is_ic_variant({"VariantName": "v", "InstanceType": "ml.m5.large", "ModelName": "m"})
    bad = {"VariantName": "v", "ManagedInstanceScaling": {"MinInstanceCount": 3, "MaxInstanceCount": 1}}
    assert "MinInstanceCount (3) is more than MaxInstanceCount (1)" in str(check_ic_variant(bad))
    assert check_ic_variant({"VariantName": "v", "RoutingConfig": {"RoutingStrategy": "RANDOM"}}) is None


def test_lifecycle_legal_moves() -> None:
    c = ComponentStatus
    check_component_transition(c.CREATING, c.IN_SERVICE)
    check_component_transition(c.UPDATING, c.IN_SERVICE)
    check_component_transition(c.FAILED, c.DELETING)
    for current, to in ((c.DELETING, c.IN_SERVICE), (c.CREATING, c.UPDATING), (c.FAILED, c.IN_SERVICE)):
        with pytest.raises(IllegalTransition):
            check_component_transition(current, to)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, "Specification is required"),
        ({"ComputeResourceRequirements": {"MinMemoryRequiredInMb": 512}}, "ModelName is required"),
        ({"ModelName": "m"}, "ComputeResourceRequirements is required"),
        ({"ModelName": "m", "Container": {"Image": "x"}}, "Container and StartupParameters are not supported"),
        (
            {"ModelName": "m", "ComputeResourceRequirements": {"MinMemoryRequiredInMb": 512,
                                                               "NumberOfAcceleratorDevicesRequired": 1}},
            "no accelerator devices",
        ),
        (
            {"ModelName": "m", "ComputeResourceRequirements": {"MinMemoryRequiredInMb": 2048,
                                                               "MaxMemoryRequiredInMb": 1024}},
            "MaxMemoryRequiredInMb (1024) must be at least MinMemoryRequiredInMb (2048)",
        ),
    ],
)  # fmt: skip
def test_specifications_refused(spec: dict[str, object] | None, expected: str) -> None:
    assert expected in str(check_specification(spec))


def test_a_good_specification_and_its_copy_envelope() -> None:
    spec = {"ModelName": "m", "ComputeResourceRequirements": {"NumberOfCpuCoresRequired": 0.5,
                                                              "MinMemoryRequiredInMb": 512,
                                                              "MaxMemoryRequiredInMb": 1024}}  # fmt: skip
    assert check_specification(spec) is None
    need = need_of(spec)
    assert (need.cores, need.memory_mb, need.envelope_mb, need.process_vcpus) == (0.5, 512, 1024, 1)
