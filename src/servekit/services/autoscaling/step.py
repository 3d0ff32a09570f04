"""Step scaling for endpoint variants as a pure decision: Application Auto Scaling's
``StepScalingPolicyConfiguration``, validated as AAS validates it, and the count one alarm run asks for.

A step policy does nothing by itself: a CloudWatch alarm whose ``AlarmActions`` lists the policy's ARN runs it
when it enters ALARM, and again at each evaluation while it stays there. Each run takes the alarm's metric value
(its evaluated datapoints aggregated by ``MetricAggregationType``), its offset from the alarm's threshold, and
applies the one step adjustment whose interval holds that offset (``shared/reference/anchors-hosting.md`` §4,
"Step scaling"):

- Bounds are offsets from the threshold. Above it (offset ≥ 0) the lower bound is inclusive and the upper
  exclusive; below it, the lower bound is exclusive and the upper inclusive. A null lower bound is -inf, a null
  upper bound +inf.
- ``ChangeInCapacity`` adds the adjustment; ``PercentChangeInCapacity`` adds that percent of the current count,
  rounded toward zero, at least ``MinAdjustmentMagnitude`` in size; ``ExactCapacity`` sets the count. The result
  is clamped to [Min, Max].
- ``Cooldown``: while it runs after this policy scaled, a scale-out counts the capacity the previous run already
  asked for (the new count is computed from the count before that run, and applied only when larger than what
  that run asked for), and a scale-in waits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ADJUSTMENT_TYPES = ("ChangeInCapacity", "PercentChangeInCapacity", "ExactCapacity")
AGGREGATIONS = ("Average", "Minimum", "Maximum")
DEFAULT_COOLDOWN_S = 300.0


class StepConfigError(ValueError):
    """An invalid StepScalingPolicyConfiguration (the API answers ValidationException with the message)."""


@dataclass(frozen=True, slots=True)
class StepAdjustment:
    lower: float | None  # MetricIntervalLowerBound (None: -inf)
    upper: float | None  # MetricIntervalUpperBound (None: +inf)
    adjustment: int  # ScalingAdjustment

    def holds(self, offset: float) -> bool:
        lo = -math.inf if self.lower is None else self.lower
        hi = math.inf if self.upper is None else self.upper
        if offset >= 0:  # above the threshold: [lower, upper)
            return lo <= offset < hi
        return lo < offset <= hi  # below it: (lower, upper]


@dataclass(frozen=True, slots=True)
class StepPolicy:
    name: str
    adjustment_type: str
    steps: tuple[StepAdjustment, ...]
    min_adjustment_magnitude: int | None = None
    cooldown_s: float = DEFAULT_COOLDOWN_S
    aggregation: str = "Average"

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> StepPolicy:
        """Validate a ``StepScalingPolicyConfiguration`` as AAS does; :class:`StepConfigError` otherwise."""
        kind = config.get("AdjustmentType")
        if kind not in ADJUSTMENT_TYPES:
            raise StepConfigError(f"AdjustmentType must be one of {', '.join(ADJUSTMENT_TYPES)}, not {kind!r}.")
        aggregation = config.get("MetricAggregationType") or "Average"
        if aggregation not in AGGREGATIONS:
            raise StepConfigError(f"MetricAggregationType must be one of {', '.join(AGGREGATIONS)}.")
        magnitude = config.get("MinAdjustmentMagnitude")
        if magnitude is not None:
            if kind != "PercentChangeInCapacity":
                raise StepConfigError("MinAdjustmentMagnitude is only supported with PercentChangeInCapacity.")
            if magnitude < 1:
                raise StepConfigError("MinAdjustmentMagnitude must be at least 1.")
        cooldown = config.get("Cooldown", DEFAULT_COOLDOWN_S)
        if cooldown < 0:
            raise StepConfigError("Cooldown must not be negative.")
        raw = config.get("StepAdjustments") or []
        if not raw:
            raise StepConfigError("StepAdjustments must contain at least one step adjustment.")
        steps = tuple(
            StepAdjustment(
                s.get("MetricIntervalLowerBound"), s.get("MetricIntervalUpperBound"), int(s["ScalingAdjustment"])
            )
            for s in raw
        )
        check_steps(steps)
        if kind == "ExactCapacity" and any(s.adjustment < 0 for s in steps):
            raise StepConfigError("ScalingAdjustment cannot be negative with AdjustmentType ExactCapacity.")
        return cls(name, kind, steps, magnitude, float(cooldown), aggregation)

    def metric_value(self, datapoints: Sequence[float]) -> float | None:
        if not datapoints:
            return None
        if self.aggregation == "Minimum":
            return min(datapoints)
        if self.aggregation == "Maximum":
            return max(datapoints)
        return sum(datapoints) / len(datapoints)

    def step_for(self, offset: float) -> StepAdjustment | None:
        return next((s for s in self.steps if s.holds(offset)), None)


def check_steps(steps: Sequence[StepAdjustment]) -> None:
    """AAS's rules for step intervals: no gaps, no overlaps, one open end each way at most, and an open end on
    each side of the threshold that a bounded step reaches past."""
    for s in steps:
        if s.lower is None and s.upper is None:
            raise StepConfigError("The upper and lower bound cannot both be null in the same step adjustment.")
        if s.lower is not None and s.upper is not None and not s.lower < s.upper:
            raise StepConfigError(
                f"The lower bound ({s.lower}) must be less than the upper bound ({s.upper}) of a step adjustment."
            )
    if sum(s.lower is None for s in steps) > 1:
        raise StepConfigError("Only one step adjustment can have a null lower bound.")
    if sum(s.upper is None for s in steps) > 1:
        raise StepConfigError("Only one step adjustment can have a null upper bound.")
    if any(s.lower is not None and s.lower < 0 for s in steps) and not any(s.lower is None for s in steps):
        raise StepConfigError(
            "A step adjustment has a negative lower bound, so one step adjustment must have a null lower bound."
        )
    if any(s.upper is not None and s.upper > 0 for s in steps) and not any(s.upper is None for s in steps):
        raise StepConfigError(
            "A step adjustment has a positive upper bound, so one step adjustment must have a null upper bound."
        )
    ordered = sorted(steps, key=lambda s: -math.inf if s.lower is None else s.lower)
    for a, b in itertools.pairwise(ordered):
        if a.upper is None or b.lower is None or a.upper > b.lower:
            raise StepConfigError(f"Step adjustments overlap: {_interval(a)} and {_interval(b)}.")
        if a.upper < b.lower:
            raise StepConfigError(f"There is a gap between step adjustments {_interval(a)} and {_interval(b)}.")


def _interval(s: StepAdjustment) -> str:
    return f"[{'-inf' if s.lower is None else s.lower}, {'+inf' if s.upper is None else s.upper}]"


@dataclass(frozen=True, slots=True)
class StepDecision:
    desired: int | None  # None: this run changes nothing
    why: str


def step_desired(policy: StepPolicy, offset: float, current: int, min_capacity: int, max_capacity: int) -> StepDecision:
    """The count one run asks for at ``offset`` (metric value minus threshold) from ``current``, clamped."""
    step = policy.step_for(offset)
    if step is None:
        return StepDecision(None, f"no step adjustment of policy {policy.name} covers the metric's offset {offset:g}")
    if policy.adjustment_type == "ExactCapacity":
        wanted = step.adjustment
    elif policy.adjustment_type == "ChangeInCapacity":
        wanted = current + step.adjustment
    else:
        change = math.trunc(current * step.adjustment / 100.0)  # toward zero
        magnitude = policy.min_adjustment_magnitude
        if magnitude is not None and step.adjustment != 0 and abs(change) < magnitude:
            change = magnitude if step.adjustment > 0 else -magnitude
        wanted = current + change
    return StepDecision(min(max(wanted, min_capacity), max_capacity), f"step {_interval(step)} of {policy.name}")


def step_run(
    policy: StepPolicy,
    offset: float,
    current: int,
    min_capacity: int,
    max_capacity: int,
    last_run: float | None,
    last_base: int | None,
    last_desired: int | None,
    now: float,
) -> StepDecision:
    """One alarm run of ``policy`` with its cooldown: ``last_run`` is when it last scaled, from ``last_base`` to
    ``last_desired``. Within the cooldown a scale-out is computed from ``last_base`` (the capacity the last run
    added counts) and applies only beyond ``last_desired``; a scale-in waits."""
    cooling = last_run is not None and now < last_run + policy.cooldown_s
    if not cooling or last_base is None or last_desired is None:
        d = step_desired(policy, offset, current, min_capacity, max_capacity)
        if d.desired == current:
            return StepDecision(None, f"{d.why}: already at {current}")
        return d
    d = step_desired(policy, offset, last_base, min_capacity, max_capacity)
    assert last_run is not None
    left = last_run + policy.cooldown_s - now
    if d.desired is None:
        return d
    if d.desired > max(last_desired, current):
        return d
    return StepDecision(None, f"{d.why}: cooldown of policy {policy.name} ({left:.0f} s left)")
