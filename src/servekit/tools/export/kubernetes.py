"""An endpoint as plain Kubernetes manifests: a ConfigMap, a Deployment per variant, Services, an HPA per
autoscaled variant and, with a Gateway, an HTTPRoute that weights the variants.

Weights: a Service spreads connections over its pods about evenly, so the endpoint's Service (every variant's
pods) splits traffic by replica counts, not by variant weights. Each variant also gets a Service of its own (what
``TargetVariant`` reaches), and with ``--gateway`` a Gateway API ``HTTPRoute`` (gateway.networking.k8s.io/v1) sends
each variant its weight's share through ``backendRefs`` weights, the standard way Kubernetes weights backends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from servekit.tools.export.autoscaling import hpa_parts
from servekit.tools.export.endpoint import EndpointSpec, Variant
from servekit.tools.export.names import dns_name, labels, selector
from servekit.tools.export.options import ExportOptions
from servekit.tools.export.pod import config_key, model_config, pod_parts

ROUTE_WEIGHT_SCALE = 1000  # HTTPRoute weights are integers: shares in thousandths


@dataclass(frozen=True, slots=True)
class Manifests:
    documents: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)


def _meta(
    name: str, options: ExportOptions, lab: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if options.namespace:
        meta["namespace"] = options.namespace
    meta["labels"] = lab
    if annotations:
        meta["annotations"] = annotations
    return meta


def config_map_name(spec: EndpointSpec) -> str:
    return dns_name(spec.name, "config")


def variant_name(spec: EndpointSpec, variant: Variant) -> str:
    """The Deployment, Service and HPA name of a variant."""
    return dns_name(spec.name, variant.name)


def config_map(spec: EndpointSpec, options: ExportOptions) -> dict[str, Any]:
    """Each variant's servekit model config (mounted as /etc/servekit/models.yaml in its pods), and the endpoint's
    variants as the export read them (for people and diffs; nothing reads it)."""
    data = {config_key(v): model_config(v) for v in spec.variants}
    data["endpoint.json"] = json.dumps(
        {
            "EndpointName": spec.name,
            "EndpointConfigName": spec.config_name,
            "ProductionVariants": [
                {
                    "VariantName": v.name,
                    "ModelName": v.model_name,
                    "ModelDataUrl": v.model_data_url,
                    "InstanceType": v.instance_type,
                    "InstanceCount": v.instance_count,
                    "Weight": v.weight,
                }
                for v in spec.variants
            ],
        },
        indent=2,
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(config_map_name(spec), options, labels(spec.name)),
        "data": data,
    }


def deployment(spec: EndpointSpec, variant: Variant, options: ExportOptions) -> tuple[dict[str, Any], list[str]]:
    parts = pod_parts(spec.name, config_map_name(spec), variant, options, spec.capture_destination)
    pod: dict[str, Any] = {}
    if parts.init_containers:
        pod["initContainers"] = parts.init_containers
    pod["containers"] = parts.containers
    pod["volumes"] = parts.volumes
    annotations = {
        "servekit/endpoint-config": spec.config_name,
        "servekit/model": variant.model_name,
        "servekit/model-data-url": variant.model_data_url,
        "servekit/instance-type": variant.instance_type,
        "servekit/variant-weight": f"{variant.weight:g}",
    }
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(variant_name(spec, variant), options, labels(spec.name, variant.name), annotations),
        "spec": {
            "replicas": variant.instance_count,
            "selector": {"matchLabels": selector(spec.name, variant.name)},
            "template": {"metadata": {"labels": labels(spec.name, variant.name)}, "spec": pod},
        },
    }
    return doc, parts.warnings


def service(name: str, options: ExportOptions, lab: dict[str, str], pick: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, options, lab),
        "spec": {
            "selector": pick,
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def hpa(spec: EndpointSpec, variant: Variant, options: ExportOptions) -> tuple[dict[str, Any] | None, list[str]]:
    if variant.scaling is None:
        return None, []
    parts = hpa_parts(variant)
    if not parts.metrics:
        return None, [
            *parts.warnings,
            f"variant {variant.name}: a scalable target without a target-tracking policy Kubernetes can follow: "
            "no HorizontalPodAutoscaler written",
        ]
    warnings = list(parts.warnings)
    low = variant.scaling.min_capacity
    if low < 1:
        warnings.append(f"variant {variant.name}: MinCapacity {low} becomes minReplicas 1 (HPA's least)")
        low = 1
    name = variant_name(spec, variant)
    body: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "minReplicas": low,
        "maxReplicas": variant.scaling.max_capacity,
        "metrics": parts.metrics,
    }
    if parts.behavior:
        body["behavior"] = parts.behavior
    doc = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(name, options, labels(spec.name, variant.name), parts.annotations or None),
        "spec": body,
    }
    return doc, warnings


def route_weights(variants: tuple[Variant, ...]) -> list[int]:
    """Each variant's share of the total weight in thousandths (all zero: equal shares)."""
    total = sum(v.weight for v in variants)
    if total <= 0:
        return [1] * len(variants)
    return [round(ROUTE_WEIGHT_SCALE * v.weight / total) for v in variants]


def http_route(spec: EndpointSpec, options: ExportOptions) -> dict[str, Any]:
    assert options.gateway is not None
    gateway_ns, _, gateway = options.gateway.rpartition("/")
    parent: dict[str, Any] = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway}
    if gateway_ns:
        parent["namespace"] = gateway_ns
    backends = [
        {"kind": "Service", "name": variant_name(spec, v), "port": 80, "weight": w}
        for v, w in zip(spec.variants, route_weights(spec.variants), strict=True)
    ]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": _meta(dns_name(spec.name), options, labels(spec.name)),
        "spec": {
            "parentRefs": [parent],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": backends}],
        },
    }


def kubernetes_manifests(spec: EndpointSpec, options: ExportOptions) -> Manifests:
    """Every document, in the order ``kubectl apply`` should create them, and what the export could not carry."""
    docs: list[dict[str, Any]] = [config_map(spec, options)]
    warnings: list[str] = []
    for variant in spec.variants:
        doc, more = deployment(spec, variant, options)
        docs.append(doc)
        warnings += more
    docs.append(service(dns_name(spec.name), options, labels(spec.name), selector(spec.name)))
    if len(spec.variants) > 1:
        for variant in spec.variants:
            name = variant_name(spec, variant)
            docs.append(service(name, options, labels(spec.name, variant.name), selector(spec.name, variant.name)))
        if options.gateway is not None:
            docs.append(http_route(spec, options))
        elif not _proportional(spec.variants):
            warnings.append(
                "the endpoint's Service splits traffic by replica counts, not by the variant weights "
                f"({', '.join(f'{v.name} {v.weight:g}' for v in spec.variants)}): give --gateway NAME for a Gateway "
                "API HTTPRoute that weights them"
            )
    for variant in spec.variants:
        scaler, more = hpa(spec, variant, options)
        warnings += more
        if scaler is not None:
            docs.append(scaler)
    return Manifests(docs, warnings)


def _proportional(variants: tuple[Variant, ...]) -> bool:
    """Do replica counts alone split traffic as the weights do?"""
    total_w = sum(v.weight for v in variants)
    total_n = sum(v.instance_count for v in variants)
    return total_w > 0 and all(abs(v.weight / total_w - v.instance_count / total_n) < 1e-9 for v in variants)
