"""What the autoscaling what-if (:mod:`servekit.services.autoscaling.simulate`) is told about a fleet and a policy: the
instance's capacity, price and start-up time, a latency-vs-load model, and the scaling policies to replay, as
plain values validated here (:class:`SimError`, one line, for anything that cannot be simulated).

The latency model is the measured p99-vs-load curve of a ``servekit recommend`` report where one is given
(:func:`fleet_from_recommendation`: R_max at the p99 SLO as the capacity, the type's price and setup time, its
load sweep as the curve), else the seed's simple queueing model, ``p99 = base / (1 - u)`` with u the per-instance
utilisation (capped at 0.95), both plus the wait of any queue the capacity could not absorb. Each estimate is
labelled with the model it came from.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MODES = ("formula", "real")
RHO_CAP = 0.95  # the simple model's utilisation ceiling (beyond it the queue's wait is what grows)


class SimError(ValueError):
    """Inputs the what-if cannot run with (min > max, capacity <= 0, ...); the message is one line."""


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """p99 in ms from the per-instance load: a measured curve ``(rps per instance, p99 ms)`` or the simple model."""

    points: tuple[tuple[float, float], ...] = ()
    base_ms: float = 10.0
    source: str = ""

    @property
    def label(self) -> str:
        if self.points:
            return f"measured p99-vs-load curve ({self.source or 'given'})"
        return f"simple model: p99 = {self.base_ms:g} ms / (1 - utilisation), utilisation capped at {RHO_CAP}"

    def p99_ms(self, per_instance_rps: float, capacity_rps: float) -> float:
        if not self.points:
            rho = min(per_instance_rps / capacity_rps, RHO_CAP)
            return self.base_ms / (1.0 - rho)
        pts = sorted(self.points)
        if per_instance_rps <= pts[0][0]:
            return pts[0][1]
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            if per_instance_rps <= x1:
                return y0 + (y1 - y0) * (per_instance_rps - x0) / ((x1 - x0) or 1.0)
        return pts[-1][1]  # beyond the measured range: the queue's wait is added by the caller


@dataclass(frozen=True, slots=True)
class Fleet:
    capacity_rps: float  # requests per second one instance serves within the SLO (R_max)
    price_per_hour: float
    instance_type: str | None = None
    startup_s: float = 0.0  # from asking for an instance to its serving (ModelSetupTime)
    slo_ms: float = 100.0  # the p99 the fleet should keep
    max_queue_s: float = 1.0  # requests wait up to this many seconds of capacity; the rest are shed (503)
    latency: LatencyModel = field(default_factory=LatencyModel)
    capacity_source: str = "given"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.capacity_rps) and self.capacity_rps > 0):
            raise SimError(f"the per-instance capacity must be greater than 0 rps, not {self.capacity_rps:g}")
        if not (math.isfinite(self.price_per_hour) and self.price_per_hour >= 0):
            raise SimError(f"the price per hour must not be negative, not {self.price_per_hour:g}")
        if self.startup_s < 0 or self.max_queue_s < 0:
            raise SimError("the start-up time and the queue's length must not be negative")
        if not self.slo_ms > 0:
            raise SimError(f"the SLO must be a positive number of ms, not {self.slo_ms:g}")


@dataclass(frozen=True, slots=True)
class StepSpec:
    """A step-scaling policy and the CloudWatch alarm that runs it: ``config`` is a StepScalingPolicyConfiguration,
    ``alarm`` the PutMetricAlarm fields of its alarm on the variant (MetricName ``InvocationsPerInstance`` or
    ``Invocations``, Statistic Sum; ComparisonOperator, Threshold, EvaluationPeriods, DatapointsToAlarm)."""

    name: str
    config: Mapping[str, Any]
    alarm: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ScheduledSpec:
    """A scheduled action: ``schedule`` as AAS writes it (at(...), rate(...), cron(...)), the Min/Max it sets."""

    name: str
    schedule: str
    min_capacity: int | None = None
    max_capacity: int | None = None
    timezone: str = "UTC"


@dataclass(frozen=True, slots=True)
class Policy:
    """One scenario: the scalable target's bounds and the policies on it, and how they are replayed.

    ``mode`` ``real`` runs the Autoscaler as ``servekit up`` does (ticks every ``tick_s``, alarms over complete
    ``period_s`` periods, 3 high / 15 low datapoints, cooldowns, start-up time); ``formula`` evaluates the same
    decision code once per step on that step's own load with one-datapoint alarms and no dead band, which is the
    seed's ``N = ceil(rps / (capacity x target))`` (see :mod:`servekit.services.autoscaling.simulate`)."""

    min_capacity: int
    max_capacity: int
    target_utilization: float | None = 0.7  # None: no target-tracking policy
    name: str = ""
    scale_out_cooldown_s: float = 300.0
    scale_in_cooldown_s: float = 300.0
    disable_scale_in: bool = False
    steps: tuple[StepSpec, ...] = ()
    scheduled: tuple[ScheduledSpec, ...] = ()
    mode: str = "real"
    period_s: int = 60  # the alarm period in real mode (formula mode uses the step)
    tick_s: int = 10  # how often the real scaler looks (servekit up: min(10, the metrics resolution))
    initial: int | None = None  # instances at the start (default: min)

    def __post_init__(self) -> None:
        if self.min_capacity < 1:
            raise SimError(f"--min must be at least 1, not {self.min_capacity}")
        if self.min_capacity > self.max_capacity:
            raise SimError(f"--min {self.min_capacity} is more than --max {self.max_capacity}")
        if self.target_utilization is not None and not (
            math.isfinite(self.target_utilization) and self.target_utilization > 0
        ):
            raise SimError(f"the target utilisation must be greater than 0, not {self.target_utilization:g}")
        if self.target_utilization is None and not self.steps and not self.scheduled:
            raise SimError("a scenario needs a policy: a target utilisation, a step policy or a scheduled action")
        if self.scale_out_cooldown_s < 0 or self.scale_in_cooldown_s < 0:
            raise SimError("cooldowns must not be negative")
        if self.mode not in MODES:
            raise SimError(f"the mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.period_s < 1 or self.tick_s < 1:
            raise SimError("the alarm period and the tick must be at least one second")
        if self.initial is not None and not self.min_capacity <= self.initial <= self.max_capacity:
            raise SimError(f"the initial count {self.initial} is outside [{self.min_capacity}, {self.max_capacity}]")

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = [f"target {self.target_utilization:g}" if self.target_utilization is not None else "no target"]
        parts += [f"step {s.name}" for s in self.steps]
        if self.scheduled:
            parts.append("scheduled " + ", ".join(s.name for s in self.scheduled))
        return f"{' + '.join(parts)} ({self.mode})"


def formula_count(rps: float, capacity_rps: float, target: float, lo: int, hi: int) -> int:
    """The seed's fleet size: ``ceil(rps / (capacity x target))`` clamped to [lo, hi]."""
    return min(max(math.ceil(rps / (capacity_rps * target)), lo), hi)


def fleet_from_recommendation(report: Mapping[str, Any], instance_type: str | None = None, **overrides: Any) -> Fleet:
    """A :class:`Fleet` from a ``servekit recommend`` report (recommendations.json): the chosen type's (default
    the top-ranked) R_max at the SLO as the capacity, its price, its measured setup time as the start-up time,
    the SLO, and the p99 of its load sweep (rate per instance, p99) as the latency curve."""
    types = {t.get("name"): t for t in report.get("types") or [] if isinstance(t, Mapping)}
    if not types:
        raise SimError("the recommend report lists no instance types")
    name = instance_type or next(iter(report.get("ranking") or []), None) or next(iter(types))
    figures = types.get(name)
    if figures is None:
        raise SimError(f"the recommend report has no instance type {name!r} (it has {', '.join(map(str, types))})")
    if not figures.get("r_max"):
        raise SimError(f"the recommend report measured no capacity within the SLO for {name}")
    slo = (report.get("target") or {}).get("slo") or {}
    pct = str(slo.get("percentile") or "p99")
    curve = []
    for phase in figures.get("sweep") or []:
        lat = phase.get("latency_ms") or {}
        if phase.get("loop") == "open" and lat.get(pct) is not None:
            curve.append((float(phase.get("throughput_rps") or phase["level"]), float(lat[pct])))
    values: dict[str, Any] = {
        "capacity_rps": float(figures["r_max"]),
        "price_per_hour": float(figures["price_per_hour"]),
        "instance_type": name,
        "startup_s": float(figures.get("setup_s") or 0.0),
        "slo_ms": float(slo.get("ms") or 100.0),
        "latency": LatencyModel(tuple(curve), source=f"servekit recommend, {name}, {pct}"),
        "capacity_source": f"servekit recommend: R_max of {name} at the {pct} SLO",
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Fleet(**values)
