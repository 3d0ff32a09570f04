"""Target-tracking autoscaling for endpoint variants as a pure decision.

:func:`decide` takes a target-tracking policy, the datapoints a
:class:`~servekit.services.cloudwatch.source.MetricSource` returned for :meth:`TargetTrackingPolicy.window`, the
variant's current instance count, its Min/MaxCapacity, when it last scaled out and in, and the time; it answers
the desired count with the cause in Application Auto Scaling's words. Nothing here reads a clock, a metric or
the state, and nothing here changes an endpoint: the caller applies a change through
``update_endpoint_weights_and_capacities``.

The rules (``shared/reference/anchors-hosting.md`` §4, "Target tracking"):

- The metric ``SageMakerVariantInvocationsPerInstance`` is ``InvocationsPerInstance`` (``AWS/SageMaker``,
  dimensions EndpointName/VariantName), the one-minute ``Sum``: invocations per minute per instance.
  ``period_s`` (default :data:`PERIOD_S`, 60) is the width of one alarm period; a shorter one compresses time for
  tests and demos (a metrics store at that resolution). ``TargetValue`` stays per *minute* whatever the period:
  :meth:`TargetTrackingPolicy.per_minute` scales each period's Sum by ``60 / period_s`` before :func:`decide`.
- The policy behaves as its two managed alarms: *AlarmHigh* fires when the newest ``high_periods`` (3)
  one-minute points are all above ``TargetValue``; *AlarmLow* fires when the newest ``low_periods`` (15) are all
  below ``low_ratio`` (0.9) * ``TargetValue``. Fewer real points than that in the window is missing data
  (INSUFFICIENT_DATA), which never scales; an idle variant publishes zeros, so it does scale in.
- The size is proportional: ``desired = ceil(current * metric / target)`` — the seed's ``N = ⌈Q·T/U⌉`` with
  ``Q·T`` measured as per-instance load — clamped to ``[min, max]``. Scale-out uses the newest point;
  scale-in uses the highest of the low window, so the metric stays under target after it.
- Cooldowns: a scale-out waits out ``ScaleOutCooldown`` since the last scale-out; a scale-in waits out both
  ``ScaleInCooldown`` since the last scale-in and ``ScaleOutCooldown`` since the last scale-out, so capacity
  just added is not removed at once. ``DisableScaleIn`` never removes capacity.
- The two alarms are also real CloudWatch alarms (:meth:`TargetTrackingPolicy.alarm_definitions`, kept by the
  scaler), so DescribeAlarms lists them as AWS does; their thresholds are per period (``TargetValue`` scaled by
  ``period_s / 60``) since they read the period's Sum. ``decide`` does not wait on them: it reads the same window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from servekit.services.cloudwatch.source import MetricQuery

INVOCATIONS_PER_INSTANCE = "SageMakerVariantInvocationsPerInstance"
DEFAULT_COOLDOWN_S = 300.0  # SageMaker's default for both cooldowns
PERIOD_S = 60
FLAPPING = "AutoScalingAnticipatedFlapping"


# An inference component's scalable target: ResourceId inference-component/<name>, scaled on its copies.
INVOCATIONS_PER_COPY = "SageMakerInferenceComponentInvocationsPerCopy"
COMPONENT_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
COMPONENT_PREFIX = "inference-component/"
COPIES = "DesiredCopyCount"  # the one "variant" of an inference component's resource (see parse_resource_id)


def component_of(resource_id: str) -> str | None:
    """The inference component named by ``inference-component/<name>`` (None for any other ResourceId)."""
    name = resource_id.removeprefix(COMPONENT_PREFIX)
    return name if resource_id.startswith(COMPONENT_PREFIX) and name and "/" not in name else None


def parse_resource_id(resource_id: str) -> tuple[str, str]:
    """``endpoint/<name>/variant/<variant>`` → ``(name, variant)``; an inference component's
    ``inference-component/<name>`` → ``(resource_id, "DesiredCopyCount")``: the scaler sees it as a resource with
    one variant whose instances are the component's copies (hosting answers for it under that name). ValueError
    for any other shape."""
    if component_of(resource_id) is not None:
        return resource_id, COPIES
    parts = resource_id.split("/")
    if len(parts) != 4 or parts[0] != "endpoint" or parts[2] != "variant" or not parts[1] or not parts[3]:
        raise ValueError(
            f"ResourceId {resource_id!r} is not of the form endpoint/<endpoint-name>/variant/<variant-name> or "
            "inference-component/<inference-component-name>"
        )
    return parts[1], parts[3]


@dataclass(frozen=True, slots=True)
class TargetTrackingPolicy:
    name: str
    resource_id: str  # endpoint/<name>/variant/<variant>
    target_value: float
    policy_id: str = "0"  # the uuid in the managed alarms' names
    metric_type: str = INVOCATIONS_PER_INSTANCE
    scale_out_cooldown_s: float = DEFAULT_COOLDOWN_S
    scale_in_cooldown_s: float = DEFAULT_COOLDOWN_S
    disable_scale_in: bool = False
    high_periods: int = 3
    low_periods: int = 15
    low_ratio: float = 0.9
    period_s: int = PERIOD_S  # one alarm period; shorter than 60 only to compress time
    # CustomizedMetricSpecification: (namespace, metric, dimensions, statistic), tracked as it is (no per-minute
    # scaling): e.g. /aws/sagemaker/Endpoints CPUUtilization Average with TargetValue 70
    custom: tuple[str, str, tuple[tuple[str, str], ...], str] | None = None

    def __post_init__(self) -> None:
        parse_resource_id(self.resource_id)
        if not self.target_value > 0:
            raise ValueError("TargetValue must be greater than 0.")
        if self.custom is None and self.metric_type not in (INVOCATIONS_PER_INSTANCE, INVOCATIONS_PER_COPY):
            raise ValueError(f"servekit's scaler tracks {INVOCATIONS_PER_INSTANCE}, not {self.metric_type}.")
        if self.high_periods < 1 or self.low_periods < 1:
            raise ValueError("the alarm windows need at least one period")
        if self.period_s < 1:
            raise ValueError("the period must be at least one second")

    @property
    def alarm_high(self) -> str:
        return f"TargetTracking-{self.resource_id}-AlarmHigh-{self.policy_id}"

    @property
    def alarm_low(self) -> str:
        return f"TargetTracking-{self.resource_id}-AlarmLow-{self.policy_id}"

    def alarm_definitions(self, policy_arn: str) -> dict[str, dict[str, Any]]:
        """PutMetricAlarm inputs of the policy's AlarmHigh and AlarmLow, as Application Auto Scaling creates them."""
        q = self.query()
        scale = 1.0 if self.custom is not None else self.period_s / 60.0
        common = {
            "Namespace": q.namespace,
            "MetricName": q.metric_name,
            "Dimensions": [{"Name": k, "Value": v} for k, v in q.dimensions],
            "Statistic": q.statistic,
            "Period": q.period_s,
            "AlarmActions": [policy_arn],
            "AlarmDescription": f"DO NOT EDIT OR DELETE. For TargetTrackingScaling policy {policy_arn}.",
            "TreatMissingData": "missing",
        }
        high = {**common, "AlarmName": self.alarm_high, "EvaluationPeriods": self.high_periods,
                "DatapointsToAlarm": self.high_periods, "ComparisonOperator": "GreaterThanThreshold",
                "Threshold": self.target_value * scale}  # fmt: skip
        low = {**common, "AlarmName": self.alarm_low, "EvaluationPeriods": self.low_periods,
               "DatapointsToAlarm": self.low_periods, "ComparisonOperator": "LessThanThreshold",
               "Threshold": self.low_ratio * self.target_value * scale}  # fmt: skip
        return {self.alarm_high: high, self.alarm_low: low}

    def query(self) -> MetricQuery:
        if self.custom is not None:
            namespace, metric, dims, statistic = self.custom
            return MetricQuery(namespace, metric, tuple(sorted(dims)), self.period_s, statistic)
        component = component_of(self.resource_id)
        if component is not None:  # SageMakerInferenceComponentInvocationsPerCopy
            per_copy = (("InferenceComponentName", component),)
            return MetricQuery("AWS/SageMaker", "InvocationsPerCopy", per_copy, self.period_s, "Sum")
        endpoint, variant = parse_resource_id(self.resource_id)
        dims = (("EndpointName", endpoint), ("VariantName", variant))
        return MetricQuery("AWS/SageMaker", "InvocationsPerInstance", dims, self.period_s, "Sum")

    def window(self, now: float) -> tuple[float, float]:
        """``[start, end)``: the complete periods both alarms read at ``now``."""
        end = math.floor(now / self.period_s) * self.period_s
        return end - max(self.high_periods, self.low_periods) * self.period_s, end

    def per_minute(self, datapoints: list[tuple[float, float]]) -> list[tuple[float, float]]:
        """Each period's Sum as a rate per minute, the unit of ``TargetValue`` (a customized metric as it is)."""
        if self.custom is not None:
            return datapoints
        scale = 60.0 / self.period_s
        return [(t, v * scale) for t, v in datapoints]


@dataclass(frozen=True, slots=True)
class Decision:
    desired: int
    scaled: bool  # desired differs from the current count
    cause: str  # why (AAS activity Cause), or why not
    description: str = ""  # AAS activity Description when scaled, e.g. "Setting desired instance count to 3."
    not_scaled_reason: str = ""  # an AAS NotScaledReasons code when an alarm fired but nothing changed


def _newest(points: list[tuple[float, float]], end: float, periods: int, period_s: int) -> list[float] | None:
    start = end - periods * period_s
    values = [v for t, v in sorted(points) if start <= t < end]
    return values if len(values) >= periods else None


def _keep(current: int, cause: str, reason: str = "") -> Decision:
    return Decision(current, False, cause, not_scaled_reason=reason)


def decide(
    policy: TargetTrackingPolicy,
    datapoints: list[tuple[float, float]],
    current: int,
    min_capacity: int,
    max_capacity: int,
    last_scale_out: float | None,
    last_scale_in: float | None,
    now: float,
) -> Decision:
    """The count the variant should have at ``now`` under ``policy`` (see the module's rules); ``datapoints`` are
    per-minute rates (:meth:`TargetTrackingPolicy.per_minute`)."""
    if min_capacity > max_capacity:
        raise ValueError("MinCapacity must not exceed MaxCapacity")
    _, end = policy.window(now)
    target = policy.target_value
    high = _newest(datapoints, end, policy.high_periods, policy.period_s)
    low = _newest(datapoints, end, policy.low_periods, policy.period_s)
    if high is not None and all(v > target for v in high):
        alarm, metric, out = policy.alarm_high, high[-1], True
    elif low is not None and all(v < policy.low_ratio * target for v in low):
        alarm, metric, out = policy.alarm_low, max(low), False
    elif high is None and low is None:
        return _keep(current, "insufficient data: no scaling")
    else:
        return _keep(current, f"metric is within the target range of policy {policy.name}")

    trigger = f"monitor alarm {alarm} in state ALARM triggered policy {policy.name}"
    wanted = min(max(math.ceil(current * metric / target), min_capacity), max_capacity)
    if out:
        if wanted <= current:
            return _keep(current, f"{trigger}; already at max capacity {max_capacity}", "AlreadyAtMaxCapacity")
        if last_scale_out is not None and now < last_scale_out + policy.scale_out_cooldown_s:
            left = last_scale_out + policy.scale_out_cooldown_s - now
            return _keep(current, f"{trigger}; scale-out cooldown ({left:.0f} s left)", FLAPPING)
    else:
        if policy.disable_scale_in:
            return _keep(current, f"{trigger}; scale-in is disabled for policy {policy.name}")
        if wanted >= current:
            return _keep(current, f"{trigger}; already at min capacity {min_capacity}", "AlreadyAtMinCapacity")
        waits = [
            (last_scale_in, policy.scale_in_cooldown_s, "scale-in"),
            (last_scale_out, policy.scale_out_cooldown_s, "scale-out"),
        ]
        for since, cooldown, which in waits:
            if since is not None and now < since + cooldown:
                left = since + cooldown - now
                return _keep(current, f"{trigger}; {which} cooldown ({left:.0f} s left)", FLAPPING)
    return Decision(wanted, True, trigger, description=f"Setting desired instance count to {wanted}.")
