"""What an export needs to know about one endpoint, read from the public API's answers (validated here, at the edge).

The CLI calls ``servekit up``'s DescribeEndpoint, DescribeEndpointConfig, DescribeModel and Application Auto
Scaling's DescribeScalableTargets / DescribeScalingPolicies, and hands the answers (plain dicts, the API's own
shapes) to :func:`endpoint_spec` with the instance types' envelopes. Everything after that is a pure function of
the frozen :class:`EndpointSpec`: no API, no control-plane internals, no environment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Application Auto Scaling's keys of an endpoint variant's instance count (the only dimension servekit scales)
SERVICE_NAMESPACE = "sagemaker"
SCALABLE_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
INVOCATIONS_PER_INSTANCE = "SageMakerVariantInvocationsPerInstance"
ENDPOINT_METRICS_NAMESPACE = "/aws/sagemaker/Endpoints"


# (DataCaptureConfig or None, endpoint name, variant name) -> servekit serve flags
CaptureFlags = Callable[[Mapping[str, Any] | None, str, str], tuple[str, ...]]


class ExportError(ValueError):
    """The endpoint cannot be exported as asked; the message says what was expected."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """An instance type's resources: what one pod requests and is limited to."""

    vcpus: int
    memory_gib: float
    gpus: int = 0  # a GPU instance type's: the pod asks for that many nvidia.com/gpu

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ExportError(f"an envelope's GPU count must be >= 0, got {self.gpus}")
        if self.vcpus < 1 or not self.memory_gib > 0:
            raise ExportError(f"an envelope needs at least 1 vCPU and some memory, got {self.vcpus}, {self.memory_gib}")


@dataclass(frozen=True, slots=True)
class TargetTracking:
    """One target-tracking policy on a variant's instance count."""

    name: str
    target_value: float
    # the metric: a predefined type (SageMakerVariantInvocationsPerInstance) or a customized CloudWatch metric
    predefined: str | None = None
    metric_name: str | None = None
    metric_namespace: str | None = None
    statistic: str | None = None
    dimensions: tuple[tuple[str, str], ...] = ()
    scale_in_cooldown_s: int | None = None
    scale_out_cooldown_s: int | None = None
    disable_scale_in: bool = False


@dataclass(frozen=True, slots=True)
class Scaling:
    """A variant's scalable target and the policies on it that an export can mirror."""

    min_capacity: int
    max_capacity: int
    policies: tuple[TargetTracking, ...] = ()
    # policies of other types (step scaling): reported, never silently dropped
    unsupported: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    model_name: str
    model_data_url: str
    instance_type: str
    envelope: Envelope
    instance_count: int
    weight: float
    environment: tuple[tuple[str, str], ...] = ()
    multi_model: bool = False
    scaling: Scaling | None = None
    capture_args: tuple[str, ...] = ()  # the servekit serve capture flags its instances get from DataCaptureConfig


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    name: str
    config_name: str
    variants: tuple[Variant, ...]
    capture_destination: str | None = None  # DataCaptureConfig.DestinationS3Uri when capture is on


def endpoint_spec(
    endpoint: Mapping[str, Any],
    config: Mapping[str, Any],
    models: Mapping[str, Mapping[str, Any]],
    envelopes: Mapping[str, Envelope],
    scalable_targets: Sequence[Mapping[str, Any]] = (),
    scaling_policies: Sequence[Mapping[str, Any]] = (),
    capture_flags: CaptureFlags | None = None,
) -> EndpointSpec:
    """The endpoint as the API describes it: ``endpoint`` (DescribeEndpoint), ``config`` (DescribeEndpointConfig
    of its current config), ``models`` (DescribeModel by model name), ``envelopes`` by instance type, and the
    endpoint's scalable targets and scaling policies (DescribeScalableTargets / DescribeScalingPolicies).
    ``capture_flags(DataCaptureConfig, endpoint, variant)`` gives the ``servekit serve`` capture flags of one
    variant's instances: the caller passes the control plane's own reading, so a pod captures as a local instance
    does (this package imports no control-plane code)."""
    name = _str(endpoint, "EndpointName", "DescribeEndpoint")
    config_name = _str(config, "EndpointConfigName", "DescribeEndpointConfig")
    live = {str(v.get("VariantName")): v for v in endpoint.get("ProductionVariants") or []}
    rows = list(config.get("ProductionVariants") or [])
    capture = config.get("DataCaptureConfig")
    if not rows:
        raise ExportError(f"endpoint config {config_name} has no ProductionVariants")
    variants = []
    for row in rows:
        variant = _str(row, "VariantName", f"endpoint config {config_name}")
        if not row.get("ModelName") and row.get("InstanceType"):
            raise ExportError(
                f"variant {variant} is IC-based (its inference components bring the models): servekit export does "
                "not export inference components"
            )
        model_name = _str(row, "ModelName", f"variant {variant}")
        model = models.get(model_name)
        if model is None:
            raise ExportError(f"variant {variant}: DescribeModel of {model_name} is missing")
        container = model.get("PrimaryContainer") or (model.get("Containers") or [None])[0]
        if not isinstance(container, Mapping) or not container.get("ModelDataUrl"):
            raise ExportError(f"model {model_name}: its container names no ModelDataUrl")
        instance_type = _str(row, "InstanceType", f"variant {variant}")
        envelope = envelopes.get(instance_type)
        if envelope is None:
            raise ExportError(
                f"variant {variant}: instance type {instance_type} is not in the instance types table; pass the "
                "file servekit up was started with (--instance-types)"
            )
        now = live.get(variant, {})
        # the desired state, as the control plane holds it: what the manifests declare
        count = now.get("DesiredInstanceCount", now.get("CurrentInstanceCount", row.get("InitialInstanceCount", 1)))
        weight = now.get("DesiredWeight", now.get("CurrentWeight", row.get("InitialVariantWeight", 1.0)))
        environment = container.get("Environment") or {}
        variants.append(
            Variant(
                name=variant,
                model_name=model_name,
                model_data_url=str(container["ModelDataUrl"]),
                instance_type=instance_type,
                envelope=envelope,
                instance_count=int(count),
                weight=float(weight),
                environment=tuple(sorted((str(k), str(v)) for k, v in environment.items())),
                multi_model=container.get("Mode") == "MultiModel",
                scaling=_scaling(name, variant, scalable_targets, scaling_policies),
                capture_args=capture_flags(capture, name, variant) if capture_flags is not None else (),
            )
        )
    destination = None
    if isinstance(capture, Mapping) and capture.get("EnableCapture", True) and capture.get("DestinationS3Uri"):
        destination = str(capture["DestinationS3Uri"])
    return EndpointSpec(name, config_name, tuple(variants), destination)


def _str(doc: Mapping[str, Any], key: str, where: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise ExportError(f"{where}: {key} is missing")
    return value


def _scaling(
    endpoint: str, variant: str, targets: Sequence[Mapping[str, Any]], policies: Sequence[Mapping[str, Any]]
) -> Scaling | None:
    resource = f"endpoint/{endpoint}/variant/{variant}"

    def ours(doc: Mapping[str, Any]) -> bool:
        return (
            doc.get("ResourceId") == resource
            and doc.get("ServiceNamespace", SERVICE_NAMESPACE) == SERVICE_NAMESPACE
            and doc.get("ScalableDimension", SCALABLE_DIMENSION) == SCALABLE_DIMENSION
        )

    found = [t for t in targets if ours(t)]
    if not found:
        return None
    target = found[0]
    mirrored: list[TargetTracking] = []
    unsupported: list[str] = []
    for policy in policies:
        if not ours(policy):
            continue
        name = str(policy.get("PolicyName", ""))
        config = policy.get("TargetTrackingScalingPolicyConfiguration")
        if policy.get("PolicyType") != "TargetTrackingScaling" or not isinstance(config, Mapping):
            unsupported.append(f"{name} ({policy.get('PolicyType')})")
            continue
        mirrored.append(_target_tracking(name, config))
    low, high = int(target["MinCapacity"]), int(target["MaxCapacity"])
    if low > high:
        raise ExportError(f"scalable target {resource}: MinCapacity {low} is more than MaxCapacity {high}")
    return Scaling(low, high, tuple(mirrored), tuple(unsupported))


def _target_tracking(name: str, config: Mapping[str, Any]) -> TargetTracking:
    predefined = (config.get("PredefinedMetricSpecification") or {}).get("PredefinedMetricType")
    custom = config.get("CustomizedMetricSpecification") or {}
    if not predefined and not custom.get("MetricName"):
        raise ExportError(f"policy {name}: neither a predefined nor a customized metric")
    return TargetTracking(
        name=name,
        target_value=float(config["TargetValue"]),
        predefined=str(predefined) if predefined else None,
        metric_name=custom.get("MetricName"),
        metric_namespace=custom.get("Namespace"),
        statistic=custom.get("Statistic"),
        dimensions=tuple((str(d["Name"]), str(d["Value"])) for d in custom.get("Dimensions") or []),
        scale_in_cooldown_s=_int_or_none(config.get("ScaleInCooldown")),
        scale_out_cooldown_s=_int_or_none(config.get("ScaleOutCooldown")),
        disable_scale_in=bool(config.get("DisableScaleIn", False)),
    )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
