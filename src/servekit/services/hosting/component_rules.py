"""The rules of inference components, kept pure: their lifecycle, what a request may ask, and where copies go.

An inference component (SageMaker's ``CreateInferenceComponent``) is one model hosted on an IC-based endpoint: a
variant with an ``InstanceType`` and no ``ModelName``. Each of its ``CopyCount`` copies reserves
``NumberOfCpuCoresRequired`` cores and ``MinMemoryRequiredInMb`` of one of the variant's instances and runs in an
instance process of its own. :func:`place` decides which instance each new copy goes to (or refuses it, with the
sizes); :func:`instances_in_use` says how many instances a variant needs for the copies it holds. Nothing here
reads a clock or starts anything: :mod:`servekit.services.hosting.components` applies these decisions.

==============  ============  =====================================================================================
from            to            when
==============  ============  =====================================================================================
(none)          Creating      CreateInferenceComponent (its copies placed, their processes starting)
Creating        InService     every copy's process is healthy
Creating        Failed        a copy fits no instance, or its model cannot be served (FailureReason says which)
Creating        Deleting      DeleteInferenceComponent while creating
InService       Updating      UpdateInferenceComponent / ...RuntimeConfig (a new copy count, a new specification)
InService       Failed        after a restart, its copies cannot be brought back (no room, its endpoint gone)
InService       Deleting      DeleteInferenceComponent
Updating        InService     the copies asked for run, or the change failed and the old copies still serve
                              (FailureReason says why, as SageMaker keeps a component in service)
Updating        Failed        the new specification's copies cannot run and none of the old are left
Updating        Deleting      DeleteInferenceComponent during an update
Failed          Updating      an update (a smaller copy count, a smaller model) is the way out
Failed          Deleting      DeleteInferenceComponent
Deleting        (gone)        every copy stopped; the row is deleted
==============  ============  =====================================================================================
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servekit.errors import IllegalTransition


class ComponentStatus(enum.StrEnum):
    """SageMaker's ``InferenceComponentStatus``."""

    CREATING = "Creating"
    IN_SERVICE = "InService"
    UPDATING = "Updating"
    FAILED = "Failed"
    DELETING = "Deleting"


_C = ComponentStatus
COMPONENT_TRANSITIONS: Mapping[ComponentStatus, frozenset[ComponentStatus]] = {
    _C.CREATING: frozenset({_C.IN_SERVICE, _C.FAILED, _C.DELETING}),
    _C.IN_SERVICE: frozenset({_C.UPDATING, _C.FAILED, _C.DELETING}),
    _C.UPDATING: frozenset({_C.IN_SERVICE, _C.FAILED, _C.DELETING}),
    _C.FAILED: frozenset({_C.UPDATING, _C.DELETING}),
    _C.DELETING: frozenset(),
}


def check_component_transition(current: ComponentStatus, to: ComponentStatus) -> None:
    """Raise :class:`IllegalTransition` unless the table above has the edge ``current -> to``."""
    if to not in COMPONENT_TRANSITIONS[current]:
        raise IllegalTransition(f"an inference component cannot go from {current} to {to}")


def may_move(current: ComponentStatus, to: ComponentStatus) -> bool:
    return to in COMPONENT_TRANSITIONS[current]


# ---- requirements and requests -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CopyNeed:
    """What one copy of a component reserves on an instance, and the envelope its process runs in."""

    cores: float  # NumberOfCpuCoresRequired
    memory_mb: int  # MinMemoryRequiredInMb: what placement reserves
    max_memory_mb: int | None = None  # MaxMemoryRequiredInMb: the process's memory envelope when given

    @property
    def envelope_mb(self) -> int:
        return self.max_memory_mb or self.memory_mb

    @property
    def process_vcpus(self) -> int:
        """CPUs the copy's process is given (whole CPUs: a fraction of a core rounds up to one)."""
        return max(1, math.ceil(self.cores - 1e-9))


@dataclass(frozen=True, slots=True)
class InstanceSize:
    """One instance of the variant's instance type, as placement sees it."""

    instance_type: str
    vcpus: float
    memory_mb: int


def need_of(spec: Mapping[str, Any]) -> CopyNeed:
    """A checked ``Specification``'s copy requirements (see :func:`check_specification`)."""
    req = spec["ComputeResourceRequirements"]
    return CopyNeed(
        float(req.get("NumberOfCpuCoresRequired") or 1.0),
        int(req["MinMemoryRequiredInMb"]),
        int(req["MaxMemoryRequiredInMb"]) if req.get("MaxMemoryRequiredInMb") is not None else None,
    )


def check_specification(spec: Mapping[str, Any] | None) -> str | None:
    """Why a ``Specification`` cannot be hosted here (None: it can). botocore has checked the types and minimums."""
    if spec is None:
        return "Specification is required: name the model (ModelName) and its ComputeResourceRequirements."
    if spec.get("BaseInferenceComponentName"):
        return "BaseInferenceComponentName (adapter components) is not supported by servekit; give a ModelName."
    if spec.get("Container") or spec.get("StartupParameters"):
        return "Specification.Container and StartupParameters are not supported by servekit; give a ModelName."
    if not spec.get("ModelName"):
        return "Specification.ModelName is required: the model whose copies the component runs."
    req = spec.get("ComputeResourceRequirements")
    if not req:
        return (
            "Specification.ComputeResourceRequirements is required on an endpoint with an instance type: give "
            "NumberOfCpuCoresRequired and MinMemoryRequiredInMb."
        )
    if req.get("NumberOfAcceleratorDevicesRequired"):
        return "NumberOfAcceleratorDevicesRequired cannot be met: servekit's instances have no accelerator devices."
    low, high = req.get("MinMemoryRequiredInMb"), req.get("MaxMemoryRequiredInMb")
    if high is not None and low is not None and int(high) < int(low):
        return f"MaxMemoryRequiredInMb ({high}) must be at least MinMemoryRequiredInMb ({low})."
    return None


def never_fits(need: CopyNeed, size: InstanceSize) -> str | None:
    """Why one copy can never fit an instance of the type, with the sizes (None: an empty instance holds it)."""
    if need.cores > size.vcpus + 1e-9 or need.memory_mb > size.memory_mb:
        return (
            f"A copy needs {need.cores:g} CPU core(s) and {need.memory_mb} MB of memory; an instance of "
            f"{size.instance_type} has {size.vcpus:g} vCPU(s) and {size.memory_mb} MB."
        )
    return None


# ---- placement ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlacedCopy:
    component: str
    need: CopyNeed
    instance: int  # index among the variant's instances


@dataclass(frozen=True, slots=True)
class Placement:
    """:func:`place`'s answer: the instance of each new copy, in order; or why the copies do not fit."""

    instances: tuple[int, ...] = ()
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class InstanceBounds:
    """How many instances an IC-based variant may run: a fixed count, or managed instance scaling's range."""

    minimum: int
    maximum: int


def place(
    size: InstanceSize,
    placed: Sequence[PlacedCopy],
    component: str,
    need: CopyNeed,
    copies: int,
    bounds: InstanceBounds,
) -> Placement:
    """Where ``copies`` new copies of ``component`` go, beside the copies already ``placed``, on the variant's
    instances (between ``bounds``' minimum and maximum). Each goes to a running instance with room for it (cores and
    memory), preferring the one holding the fewest copies of this component (copies spread over instances, as
    SageMaker spreads them for availability), then the one with the most memory free, then the lowest index; with
    no room anywhere, to a new instance while the variant may have more; else all are refused, with the sizes."""
    problem = never_fits(need, size)
    if problem is not None:
        return Placement(refused=problem)
    loads = list(placed)
    chosen: list[int] = []
    for k in range(copies):
        running = max(bounds.minimum, _count(loads))
        free = _free(size, loads, running)
        fitting = [
            i for i, (cores, memory) in enumerate(free) if cores + 1e-9 >= need.cores and memory >= need.memory_mb
        ]
        if not fitting and running < bounds.maximum:
            free.append((size.vcpus, size.memory_mb))  # a new instance (managed instance scaling)
            fitting = [running]
        if not fitting:
            most_cores = max((c for c, _ in free), default=0.0)
            most_memory = max((m for _, m in free), default=0)
            return Placement(
                refused=(
                    f"Copy {k + 1} of {copies} of {component} needs {need.cores:g} CPU core(s) and {need.memory_mb} MB "
                    f"of memory; the {bounds.maximum} instance(s) of {size.instance_type} ({size.vcpus:g} vCPUs, "
                    f"{size.memory_mb} MB each) have at most {most_cores:g} core(s) and {most_memory} MB free."
                )
            )
        mine = [sum(1 for p in loads if p.component == component and p.instance == i) for i in range(len(free))]
        best = min(fitting, key=lambda i: (mine[i], -free[i][1], i))
        chosen.append(best)
        loads.append(PlacedCopy(component, need, best))
    return Placement(instances=tuple(chosen))


def _count(loads: Sequence[PlacedCopy]) -> int:
    return max((p.instance for p in loads), default=-1) + 1


def _free(size: InstanceSize, loads: Sequence[PlacedCopy], instances: int) -> list[tuple[float, int]]:
    free = [(size.vcpus, size.memory_mb) for _ in range(instances)]
    for p in loads:
        cores, memory = free[p.instance]
        free[p.instance] = (cores - p.need.cores, memory - p.need.memory_mb)
    return free


def compact(placed: Sequence[PlacedCopy]) -> list[PlacedCopy]:
    """The copies with the instances that hold none left out and the rest renumbered in order (an instance a
    scale-in emptied is given back)."""
    used = sorted({p.instance for p in placed})
    index = {old: new for new, old in enumerate(used)}
    return [PlacedCopy(p.component, p.need, index[p.instance]) for p in placed]


def instances_in_use(placed: Sequence[PlacedCopy], min_instances: int) -> int:
    """The instances a variant runs: those its copies are on, and never fewer than its minimum (0 with managed
    instance scaling's MinInstanceCount 0 and no copy: the variant runs no instance)."""
    return max(min_instances, len({p.instance for p in placed}))


def instance_bounds(variant: Mapping[str, Any]) -> InstanceBounds:
    """``ManagedInstanceScaling`` (Status ENABLED) bounds the count by its Min/MaxInstanceCount; otherwise the
    variant has exactly ``InitialInstanceCount`` instances."""
    initial = int(variant.get("InitialInstanceCount") or 1)
    scaling = variant.get("ManagedInstanceScaling") or {}
    if scaling.get("Status", "ENABLED") == "ENABLED" and scaling:
        low = int(scaling.get("MinInstanceCount", min(1, initial)))
        return InstanceBounds(low, max(low, int(scaling.get("MaxInstanceCount", max(initial, low)))))
    return InstanceBounds(initial, initial)


def check_ic_variant(variant: Mapping[str, Any]) -> str | None:
    """Why an IC-based variant (InstanceType, no ModelName) is refused (None: accepted)."""
    scaling = variant.get("ManagedInstanceScaling") or {}
    if scaling and scaling.get("Status", "ENABLED") == "ENABLED":
        low, high = scaling.get("MinInstanceCount"), scaling.get("MaxInstanceCount")
        if high is None:
            return f"ManagedInstanceScaling of variant {variant['VariantName']} needs MaxInstanceCount."
        if low is not None and int(low) > int(high):
            return (
                f"ManagedInstanceScaling of variant {variant['VariantName']}: MinInstanceCount ({low}) is more than "
                f"MaxInstanceCount ({high})."
            )
    routing = (variant.get("RoutingConfig") or {}).get("RoutingStrategy")
    if routing not in (None, "LEAST_OUTSTANDING_REQUESTS", "RANDOM"):
        return f"RoutingConfig.RoutingStrategy {routing!r} is not supported: LEAST_OUTSTANDING_REQUESTS or RANDOM."
    return None


def is_ic_variant(variant: Mapping[str, Any]) -> bool:
    """SageMaker's IC-based endpoint: a variant with an instance type and no model of its own."""
    return not variant.get("ModelName") and bool(variant.get("InstanceType"))
