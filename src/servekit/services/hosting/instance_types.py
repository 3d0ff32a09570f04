"""Instance types: resource envelopes (vCPUs, memory, $/hour) that a variant's instances get on this machine.

The bundled table holds the common CPU ``ml.*`` types and the ``ml.g4dn``, ``ml.g5`` and ``ml.p3`` GPU families
that SageMaker real-time inference offers, with their vCPUs and memory (the same as the EC2 type of that size), the
GPU types' cards (count and memory each) and an on-demand price per hour in **us-east-1**. The prices
are SageMaker AI's published list prices for real-time inference as of **2024** (roughly 1.2 times the EC2 Linux
price of the same size), written down by hand, not fetched: they are list prices to be checked against
https://aws.amazon.com/sagemaker/pricing/ before anyone quotes them, and they say nothing about discounts, savings
plans or other regions. They exist so that a local endpoint can report what it would cost in the cloud.

A user's own types come from a YAML or TOML file (``servekit.config.instance_types``) and are merged over the
bundled table: a bundled name is replaced, a new name is added, and each type says where it came from
(:attr:`InstanceType.source`).

Asking for more than the machine has is allowed: :func:`oversubscription` returns warnings and never clamps.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from servekit.config.instance_types import InstanceTypeEntry, load_instance_types_file

PRICES_REGION = "us-east-1"
PRICES_AS_OF = "2024"
BUNDLED_SOURCE = f"bundled: SageMaker real-time inference list price, {PRICES_REGION}, {PRICES_AS_OF}"


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: float
    price_per_hour: float  # US dollars, on demand
    source: str  # where the figures come from: the bundled table or a user's file
    gpus: int = 0  # GPUs per instance; an instance gets that many cards of its own (CUDA_VISIBLE_DEVICES)
    gpu_memory_gib: float = 0.0  # memory of each of its GPUs


class UnknownInstanceType(KeyError):
    """An instance type that neither the bundled table nor the user's file defines."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        super().__init__(name)
        self.name = name
        self.message = f"unknown instance type {name!r}; known types: {', '.join(known)}"

    def __str__(self) -> str:
        return self.message


# name: (vCPUs, memory GiB, $/hour in us-east-1)
_BUNDLED: dict[str, tuple[int, float, float]] = {
    # burstable
    "ml.t2.medium": (2, 4, 0.056),
    "ml.t2.large": (2, 8, 0.111),
    "ml.t2.xlarge": (4, 16, 0.223),
    "ml.t2.2xlarge": (8, 32, 0.445),
    "ml.t3.medium": (2, 4, 0.05),
    "ml.t3.large": (2, 8, 0.1),
    "ml.t3.xlarge": (4, 16, 0.2),
    "ml.t3.2xlarge": (8, 32, 0.399),
    # general purpose (m4: the previous generation, still what the SDK's own tests name as their CPU type)
    "ml.m4.xlarge": (4, 16, 0.24),
    "ml.m4.2xlarge": (8, 32, 0.48),
    "ml.m4.4xlarge": (16, 64, 0.96),
    "ml.m4.10xlarge": (40, 160, 2.4),
    "ml.m4.16xlarge": (64, 256, 3.84),
    "ml.m5.large": (2, 8, 0.115),
    "ml.m5.xlarge": (4, 16, 0.23),
    "ml.m5.2xlarge": (8, 32, 0.461),
    "ml.m5.4xlarge": (16, 64, 0.922),
    "ml.m5.12xlarge": (48, 192, 2.765),
    "ml.m6i.large": (2, 8, 0.115),
    "ml.m6i.xlarge": (4, 16, 0.23),
    "ml.m6i.2xlarge": (8, 32, 0.461),
    "ml.m6i.4xlarge": (16, 64, 0.922),
    "ml.m6i.8xlarge": (32, 128, 1.843),
    # compute optimised
    "ml.c4.xlarge": (4, 7.5, 0.239),
    "ml.c4.2xlarge": (8, 15, 0.477),
    "ml.c4.4xlarge": (16, 30, 0.955),
    "ml.c4.8xlarge": (36, 60, 1.91),
    "ml.c5.large": (2, 4, 0.102),
    "ml.c5.xlarge": (4, 8, 0.204),
    "ml.c5.2xlarge": (8, 16, 0.408),
    "ml.c5.4xlarge": (16, 32, 0.816),
    "ml.c5.9xlarge": (36, 72, 1.836),
    "ml.c6i.large": (2, 4, 0.102),
    "ml.c6i.xlarge": (4, 8, 0.204),
    "ml.c6i.2xlarge": (8, 16, 0.408),
    "ml.c6i.4xlarge": (16, 32, 0.816),
    "ml.c6i.8xlarge": (32, 64, 1.632),
    # memory optimised
    "ml.r5.large": (2, 16, 0.151),
    "ml.r5.xlarge": (4, 32, 0.302),
    "ml.r5.2xlarge": (8, 64, 0.605),
    "ml.r5.4xlarge": (16, 128, 1.21),
}

# GPU types: name: (vCPUs, memory GiB, $/hour in us-east-1, GPUs, GiB per GPU). The cards are AWS's published
# ones: g4dn NVIDIA T4 (16 GiB), g5 NVIDIA A10G (24 GiB), p3 NVIDIA V100 (16 GiB); same hand-written caveat.
_BUNDLED_GPU: dict[str, tuple[int, float, float, int, float]] = {
    "ml.g4dn.xlarge": (4, 16, 0.7364, 1, 16),
    "ml.g4dn.2xlarge": (8, 32, 1.0528, 1, 16),
    "ml.g4dn.4xlarge": (16, 64, 1.6856, 1, 16),
    "ml.g4dn.8xlarge": (32, 128, 3.0464, 1, 16),
    "ml.g4dn.12xlarge": (48, 192, 5.4768, 4, 16),
    "ml.g4dn.16xlarge": (64, 256, 6.0928, 1, 16),
    "ml.g5.xlarge": (4, 16, 1.408, 1, 24),
    "ml.g5.2xlarge": (8, 32, 1.515, 1, 24),
    "ml.g5.4xlarge": (16, 64, 2.03, 1, 24),
    "ml.g5.8xlarge": (32, 128, 3.06, 1, 24),
    "ml.g5.12xlarge": (48, 192, 7.09, 4, 24),
    "ml.g5.16xlarge": (64, 256, 5.12, 1, 24),
    "ml.g5.24xlarge": (96, 384, 10.18, 4, 24),
    "ml.g5.48xlarge": (192, 768, 20.36, 8, 24),
    "ml.p3.2xlarge": (8, 61, 3.825, 1, 16),
    "ml.p3.8xlarge": (32, 244, 14.688, 4, 16),
    "ml.p3.16xlarge": (64, 488, 28.152, 8, 16),
}

BUNDLED: tuple[InstanceType, ...] = tuple(
    InstanceType(name, vcpus, float(memory), price, BUNDLED_SOURCE) for name, (vcpus, memory, price) in _BUNDLED.items()
) + tuple(
    InstanceType(name, vcpus, float(memory), price, BUNDLED_SOURCE, gpus, float(gpu_memory))
    for name, (vcpus, memory, price, gpus, gpu_memory) in _BUNDLED_GPU.items()
)


class InstanceTypes:
    """A table of instance types by name (read-only once built)."""

    def __init__(self, types: Iterable[InstanceType]) -> None:
        self._types = {t.name: t for t in types}

    def __getitem__(self, name: str) -> InstanceType:
        found = self._types.get(name)
        if found is None:
            raise UnknownInstanceType(name, self.names())
        return found

    def get(self, name: str) -> InstanceType | None:
        return self._types.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __iter__(self) -> Iterator[InstanceType]:
        return iter(sorted(self._types.values(), key=lambda t: t.name))

    def __len__(self) -> int:
        return len(self._types)

    def names(self) -> list[str]:
        return sorted(self._types)


def instance_types(local: Iterable[InstanceTypeEntry] = (), *, source: str = "local") -> InstanceTypes:
    """The bundled table with ``local`` entries merged over it (same name: the local entry wins)."""
    merged = {t.name: t for t in BUNDLED}
    for entry in local:
        merged[entry.name] = InstanceType(
            entry.name, entry.vcpus, entry.memory_gib, entry.price_per_hour, source, entry.gpus, entry.gpu_memory_gib
        )
    return InstanceTypes(merged.values())


def load_instance_types(path: str | os.PathLike[str] | None = None) -> InstanceTypes:
    """The bundled table, with the types of the YAML/TOML file ``path`` merged over it when one is given
    (``ConfigError`` naming the file and field when it is wrong)."""
    if path is None:
        return instance_types()
    return instance_types(load_instance_types_file(path), source=f"local: {path}")


def endpoint_cost_per_hour(variants: Iterable[tuple[str, int]], table: InstanceTypes) -> float:
    """What the endpoint's fleet would cost an hour: the sum of price times instance count over ``(instance type,
    count)`` pairs, one per variant. :class:`UnknownInstanceType` for a type the table lacks."""
    return round(sum(table[name].price_per_hour * count for name, count in variants), 6)


# ---- the machine -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Machine:
    cpus: int  # CPUs this process may run on
    memory_gib: float  # total physical memory


def parse_meminfo(text: str) -> float | None:
    """``MemTotal`` of ``/proc/meminfo`` text, in GiB (None when absent)."""
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key.strip() == "MemTotal":
            fields = rest.split()
            if fields and fields[0].isdigit():
                scale = 1024 if len(fields) < 2 or fields[1].lower() == "kb" else 1
                return int(fields[0]) * scale / 1024**3
    return None


def this_machine(meminfo: Path = Path("/proc/meminfo"), cpu_count: Callable[[], int | None] | None = None) -> Machine:
    """CPUs (the ones this process may use, else ``os.cpu_count``) and total memory (``/proc/meminfo``, else the
    page count ``sysconf`` reports)."""
    if cpu_count is not None:
        cpus = cpu_count() or 1
    elif hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0)) or 1
    else:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    memory: float | None = None
    try:
        memory = parse_meminfo(meminfo.read_text())
    except OSError:
        memory = None
    if memory is None:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
        except (ValueError, OSError, AttributeError):  # pragma: no cover - no sysconf names
            memory = 0.0
    return Machine(cpus, memory)


def oversubscription(demands: Iterable[tuple[InstanceType, int]], machine: Machine) -> list[str]:
    """Warnings (never a refusal, never a clamp) when instances ask for more than ``machine`` has: the vCPUs or
    memory of all of them together, and any single instance larger than the machine. ``demands`` are
    ``(instance type, instance count)`` pairs; pass every instance the machine will run, not one endpoint's only."""
    demands = [(t, n) for t, n in demands if n > 0]
    warnings: list[str] = []
    for itype in sorted({t for t, _ in demands}, key=lambda t: t.name):
        if itype.vcpus > machine.cpus:
            warnings.append(
                f"one {itype.name} instance asks for {itype.vcpus} vCPUs; this machine has {machine.cpus}: "
                "its model threads will share CPUs"
            )
        if machine.memory_gib and itype.memory_gib > machine.memory_gib:
            warnings.append(
                f"one {itype.name} instance may use up to {itype.memory_gib:g} GiB; this machine has "
                f"{machine.memory_gib:.1f} GiB"
            )
    total_cpus = sum(t.vcpus * n for t, n in demands)
    total_memory = sum(t.memory_gib * n for t, n in demands)
    detail = ", ".join(f"{n} x {t.name}" for t, n in demands)
    if total_cpus > machine.cpus:
        warnings.append(
            f"the instances ({detail}) ask for {total_cpus} vCPUs; this machine has {machine.cpus} "
            f"(oversubscribed {total_cpus / machine.cpus:.1f}x): they will share CPUs"
        )
    if machine.memory_gib and total_memory > machine.memory_gib:
        warnings.append(
            f"the instances ({detail}) may use up to {total_memory:g} GiB; this machine has "
            f"{machine.memory_gib:.1f} GiB (oversubscribed {total_memory / machine.memory_gib:.1f}x): an instance "
            "may fail with an out-of-memory reason"
        )
    return warnings
