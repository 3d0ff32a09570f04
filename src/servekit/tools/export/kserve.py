"""An endpoint as a KServe ``InferenceService`` (serving.kserve.io/v1beta1) for teams on KServe.

The predictor is a custom container (servekit serve, the same arguments, envelope and model fetch as the plain
manifests). KServe splits traffic between two revisions of one InferenceService, not between variants: a
two-variant endpoint becomes two documents of the same InferenceService, applied in turn — the first variant as
the stable revision, then the second as the candidate with ``canaryTrafficPercent`` = its share of the weights
(Serverless mode, KServe's canary rollout). More than two variants have no KServe form.

Knative (Serverless mode) runs init containers and emptyDir volumes only with its ``kubernetes.podspec-init-
containers`` and ``kubernetes.podspec-emptydir`` features on; docs/kubernetes.md says how.
"""

from __future__ import annotations

from typing import Any

from servekit.tools.export.autoscaling import kserve_scale
from servekit.tools.export.endpoint import EndpointSpec, ExportError, Variant
from servekit.tools.export.kubernetes import Manifests, config_map, config_map_name
from servekit.tools.export.names import dns_name, labels
from servekit.tools.export.options import PORT, ExportOptions
from servekit.tools.export.pod import pod_parts

KSERVE_CONTAINER = "kserve-container"  # the name KServe gives a custom predictor's container


def canary_percent(stable: Variant, candidate: Variant) -> int:
    """The candidate's share of the two weights, in whole percent (equal shares when both are zero)."""
    total = stable.weight + candidate.weight
    return 50 if total <= 0 else round(100 * candidate.weight / total)


def inference_service(
    spec: EndpointSpec, variant: Variant, options: ExportOptions, canary: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    parts = pod_parts(
        spec.name,
        config_map_name(spec),
        variant,
        options,
        spec.capture_destination,
        startup_probe=False,  # Knative Serving holds traffic back until its own readiness check passes
        container_name=KSERVE_CONTAINER,
    )
    (container,) = parts.containers
    container["ports"] = [{"containerPort": PORT, "protocol": "TCP"}]  # Knative: one unnamed (HTTP/1) port
    predictor: dict[str, Any] = {}
    if variant.scaling is not None:
        predictor["minReplicas"] = variant.scaling.min_capacity
        predictor["maxReplicas"] = variant.scaling.max_capacity
    else:  # a fixed fleet: no scaling either way
        predictor["minReplicas"] = variant.instance_count
        predictor["maxReplicas"] = variant.instance_count
    scale, warnings = kserve_scale(variant)
    predictor.update(scale)
    if canary is not None:
        predictor["canaryTrafficPercent"] = canary
    if parts.init_containers:
        predictor["initContainers"] = parts.init_containers
    predictor["containers"] = [container]
    predictor["volumes"] = parts.volumes
    meta: dict[str, Any] = {"name": dns_name(spec.name)}
    if options.namespace:
        meta["namespace"] = options.namespace
    meta["labels"] = labels(spec.name)
    meta["annotations"] = {
        "serving.kserve.io/deploymentMode": "Serverless",
        "servekit/endpoint-config": spec.config_name,
        "servekit/variant": variant.name,
        "servekit/instance-type": variant.instance_type,
        "servekit/model-data-url": variant.model_data_url,
    }
    doc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": meta,
        "spec": {"predictor": predictor},
    }
    return doc, parts.warnings + warnings


def kserve_manifests(spec: EndpointSpec, options: ExportOptions) -> Manifests:
    """The ConfigMap, then the InferenceService: one document for one variant; for two, the stable revision and
    then the candidate with its traffic share (apply the second once the first is Ready)."""
    if len(spec.variants) > 2:
        raise ExportError(
            f"endpoint {spec.name} has {len(spec.variants)} variants; a KServe InferenceService splits traffic "
            "between two revisions at most: use --format plain"
        )
    docs = [config_map(spec, options)]
    warnings: list[str] = []
    first, *rest = spec.variants
    doc, more = inference_service(spec, first, options)
    docs.append(doc)
    warnings += more
    if rest:
        (second,) = rest
        doc, more = inference_service(spec, second, options, canary=canary_percent(first, second))
        docs.append(doc)
        warnings += more
    return Manifests(docs, warnings)
