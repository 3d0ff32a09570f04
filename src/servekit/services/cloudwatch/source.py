"""What alarms (and later autoscaling and rollouts) read metrics through: one query, answered with datapoints.

The metrics store implements :class:`MetricSource`; alarm evaluation and the autoscaler consume it and are
tested against fakes. Statistics are CloudWatch's: ``SampleCount``, ``Average``, ``Sum``, ``Minimum``,
``Maximum`` and extended ones written ``p50``, ``p90``, ``p99``, ``p99.9``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class MetricQuery:
    namespace: str  # e.g. "AWS/SageMaker"
    metric_name: str  # e.g. "Invocations", "ModelLatency"
    dimensions: tuple[tuple[str, str], ...]  # sorted (name, value) pairs, e.g. (("EndpointName", "ep"), ...)
    period_s: int  # the datapoint width, a multiple of 60
    statistic: str  # "Average" | "Sum" | "SampleCount" | "Minimum" | "Maximum" | "p99" ...


class MetricSource(Protocol):
    def datapoints(self, query: MetricQuery, start: float, end: float) -> list[tuple[float, float]]:
        """``(period start, value)`` for every period in [start, end) that has data, oldest first (epoch
        seconds). A period without data is absent, not zero: alarms decide what missing data means."""
        ...
