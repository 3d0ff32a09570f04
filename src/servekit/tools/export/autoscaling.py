"""Target-tracking policies as Kubernetes autoscaling: HPA metrics (autoscaling/v2) and KServe's scale metric.

- ``SageMakerVariantInvocationsPerInstance`` (invocations per minute per instance): a ``Pods`` metric
  ``servekit_invocations_per_minute`` with ``AverageValue`` = TargetValue, served by a custom-metrics adapter from
  ``servekit_requests_total`` (docs/kubernetes.md has the rule);
- customized ``CPUUtilization`` of ``/aws/sagemaker/Endpoints`` (summed over cores: 0 to vCPUs x 100): ``Resource``
  cpu with ``Utilization`` = TargetValue / vCPUs (Kubernetes counts a share of the request, which is the envelope's
  vCPUs);
- customized ``MemoryUtilization`` (a share of the instance's memory): ``Resource`` memory, ``Utilization`` =
  TargetValue (the request is the envelope's memory);
- any other customized metric: an ``External`` metric of that name, its dimensions as labels, ``Value`` =
  TargetValue (target tracking holds the metric's value), with a warning that the cluster needs an adapter.

ScaleInCooldown becomes the scale-down stabilization window (HPA's own damping of scale-in, at most an hour),
DisableScaleIn a disabled scale-down; ScaleOutCooldown has no HPA counterpart (HPA scales out at once) and is kept
as an annotation. Several policies become several metrics of one HPA: both take the largest proposal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servekit.tools.export.endpoint import ENDPOINT_METRICS_NAMESPACE, INVOCATIONS_PER_INSTANCE, TargetTracking, Variant
from servekit.tools.export.names import label_value
from servekit.tools.export.pod import quantity

INVOCATIONS_METRIC = "servekit_invocations_per_minute"
MAX_STABILIZATION_S = 3600  # autoscaling/v2's limit


@dataclass(frozen=True, slots=True)
class HpaParts:
    metrics: list[dict[str, Any]]
    behavior: dict[str, Any] | None
    annotations: dict[str, str]
    warnings: list[str]


def _utilization(resource: str, percent: float) -> dict[str, Any]:
    return {
        "type": "Resource",
        "resource": {"name": resource, "target": {"type": "Utilization", "averageUtilization": max(1, round(percent))}},
    }


def hpa_metric(policy: TargetTracking, variant: Variant) -> tuple[dict[str, Any], str | None]:
    """The HPA metric of one policy, and a warning when it needs more than the cluster's built-ins."""
    if policy.predefined == INVOCATIONS_PER_INSTANCE:
        metric = {
            "type": "Pods",
            "pods": {
                "metric": {"name": INVOCATIONS_METRIC},
                "target": {"type": "AverageValue", "averageValue": quantity(policy.target_value)},
            },
        }
        return metric, None
    if policy.predefined is not None:
        return {}, f"policy {policy.name}: predefined metric {policy.predefined} has no Kubernetes counterpart"
    if policy.metric_namespace == ENDPOINT_METRICS_NAMESPACE and policy.metric_name == "CPUUtilization":
        return _utilization("cpu", policy.target_value / variant.envelope.vcpus), None
    if policy.metric_namespace == ENDPOINT_METRICS_NAMESPACE and policy.metric_name == "MemoryUtilization":
        return _utilization("memory", policy.target_value), None
    name = str(policy.metric_name)
    selector = {label_value(k): label_value(v) for k, v in policy.dimensions}
    external: dict[str, Any] = {"name": label_value(name)}
    if selector:
        external["selector"] = {"matchLabels": selector}
    metric = {
        "type": "External",
        "external": {"metric": external, "target": {"type": "Value", "value": quantity(policy.target_value)}},
    }
    return metric, (
        f"policy {policy.name}: {policy.metric_namespace} {name} becomes an External metric: the cluster needs an "
        "external metrics adapter that serves it"
    )


def hpa_parts(variant: Variant) -> HpaParts:
    """Metrics, behaviour and annotations of the variant's HPA (no metrics: no HPA is written)."""
    scaling = variant.scaling
    assert scaling is not None
    warnings = [
        f"variant {variant.name}: policy {p} is not mirrored (only target tracking is)" for p in scaling.unsupported
    ]
    metrics = []
    for policy in scaling.policies:
        metric, warning = hpa_metric(policy, variant)
        if warning:
            warnings.append(f"variant {variant.name}: {warning}")
        if metric:
            metrics.append(metric)
    behavior: dict[str, Any] = {}
    annotations: dict[str, str] = {}
    if any(p.disable_scale_in for p in scaling.policies):  # one policy that never scales in holds the fleet
        behavior["scaleDown"] = {"selectPolicy": "Disabled"}
    else:
        cooldowns = [p.scale_in_cooldown_s for p in scaling.policies if p.scale_in_cooldown_s is not None]
        if cooldowns:
            window = max(cooldowns)
            if window > MAX_STABILIZATION_S:
                warnings.append(
                    f"variant {variant.name}: ScaleInCooldown {window}s is cut to HPA's longest window, "
                    f"{MAX_STABILIZATION_S}s"
                )
            behavior["scaleDown"] = {"stabilizationWindowSeconds": min(window, MAX_STABILIZATION_S)}
    outs = [p.scale_out_cooldown_s for p in scaling.policies if p.scale_out_cooldown_s is not None]
    if outs:
        annotations["servekit/scale-out-cooldown-seconds"] = str(max(outs))
    return HpaParts(metrics, behavior or None, annotations, warnings)


# KServe's scaleMetric / scaleTarget (one metric per predictor, an integer target)
def kserve_scale(variant: Variant) -> tuple[dict[str, Any], list[str]]:
    """``scaleMetric``/``scaleTarget`` of the variant's first target-tracking policy, and what was lost."""
    scaling = variant.scaling
    if scaling is None or not scaling.policies:
        return {}, []
    policy, *rest = scaling.policies
    warnings = [f"variant {variant.name}: KServe takes one scale metric; policy {p.name} is left out" for p in rest]
    if policy.predefined == INVOCATIONS_PER_INSTANCE:
        rps = policy.target_value / 60.0
        target = max(1, round(rps))
        if target != rps:
            warnings.append(
                f"variant {variant.name}: {policy.target_value:g} invocations per minute is {rps:g} requests per "
                f"second; KServe's rps target is a whole number: {target}"
            )
        return {"scaleMetric": "rps", "scaleTarget": target}, warnings
    if policy.metric_namespace == ENDPOINT_METRICS_NAMESPACE and policy.metric_name == "CPUUtilization":
        return {
            "scaleMetric": "cpu",
            "scaleTarget": max(1, round(policy.target_value / variant.envelope.vcpus)),
        }, warnings
    if policy.metric_namespace == ENDPOINT_METRICS_NAMESPACE and policy.metric_name == "MemoryUtilization":
        return {"scaleMetric": "memory", "scaleTarget": max(1, round(policy.target_value))}, warnings
    warnings.append(f"variant {variant.name}: policy {policy.name}'s metric has no KServe scale metric; left out")
    return {}, warnings
