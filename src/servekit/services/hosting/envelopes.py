"""Instance types as the hosting service sees them: a resource envelope (vCPUs, memory, $/hour) per type name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from servekit.services.hosting.instance_types import InstanceTypes


@dataclass(frozen=True, slots=True)
class Envelope:
    vcpus: int
    memory_bytes: int | None
    price_per_hour: float
    gpus: int = 0  # GPUs each instance gets to itself


class Envelopes(Protocol):
    def envelope(self, instance_type: str) -> Envelope | None:
        """The resources an instance type gives an instance; None for a type this control plane does not know."""
        ...


class TableEnvelopes:
    """Instance types (the bundled table plus an ``--instance-types`` file) as envelopes."""

    def __init__(self, table: InstanceTypes) -> None:
        self._table = table

    def envelope(self, instance_type: str) -> Envelope | None:
        t = self._table.get(instance_type)
        if t is None:
            return None
        return Envelope(int(t.vcpus), int(t.memory_gib * 2**30), float(t.price_per_hour), int(t.gpus))
