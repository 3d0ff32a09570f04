"""Validation of exported manifests, offline.

Built-in kinds (Deployment, Service, HorizontalPodAutoscaler, ConfigMap) are checked by kubernetes-validate against
the Kubernetes API's own JSON schemas that its wheel ships, in strict mode (an unknown field fails). The two
custom resources have no schema in that wheel, and the KServe package on PyPI ships no CRD either, so they are
checked structurally: the envelope and every field we write against the fields their APIs define (KServe's
v1beta1 ``PredictorSpec`` field list, Gateway API v1 ``HTTPRoute``), and every nested Kubernetes type (Container,
Volume, ResourceRequirements...) against the same Kubernetes schemas, strict.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate.utils import latest_version, schema_contents
from referencing import Registry, Resource

K8S_VERSION = latest_version()

# serving.kserve.io/v1beta1 PredictorSpec: KServe's own fields and the PodSpec fields it embeds
PREDICTOR_FIELDS = frozenset(
    "activeDeadlineSeconds affinity annotations autoScaling automountServiceAccountToken batcher canaryTrafficPercent "
    "containerConcurrency containers deploymentStrategy dnsConfig dnsPolicy enableServiceLinks ephemeralContainers "
    "hostAliases hostIPC hostNetwork hostPID hostUsers hostname hostnameOverride huggingface imagePullSecrets "
    "initContainers labels lightgbm logger maxReplicas minReplicas model name nodeName nodeSelector onnx os overhead "
    "paddle pmml preemptionPolicy priority priorityClassName pytorch readinessGates resourceClaims resources "
    "restartPolicy runtimeClassName scaleMetric scaleMetricType scaleTarget schedulerName schedulingGates "
    "schedulingGroup securityContext serviceAccount serviceAccountName setHostnameAsFQDN shareProcessNamespace sklearn "
    "storageContainerName storageUris subdomain tensorflow terminationGracePeriodSeconds timeout tolerations "
    "topologySpreadConstraints triton volumes workerSpec xgboost".split()
)


@cache
def _definitions() -> dict[str, Any]:
    defs: dict[str, Any] = schema_contents(
        f"kubernetes-json-schema/v{K8S_VERSION}-local-strict/_definitions.json", K8S_VERSION
    )
    return defs


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"/api/_definitions.json#/$defs/{name}"}


def _validate_with_core(instance: Any, schema: dict[str, Any]) -> None:
    """``schema`` may $ref Kubernetes definitions (io.k8s.api.core.v1.Container...)."""
    registry: Registry = Resource.from_contents(_definitions()) @ Registry()
    # the refs are relative to the Kubernetes schemas' base, as in kubernetes-validate's own files
    schema = {"$id": "https://kubernetes.io/api/servekit-custom", **schema}
    jsonschema.Draft202012Validator(schema, registry=registry).validate(instance)


_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}


def _inference_service_schema() -> dict[str, Any]:
    core = "io.k8s.api.core.v1."
    predictor = {
        "type": "object",
        "propertyNames": {"enum": sorted(PREDICTOR_FIELDS)},
        "properties": {
            "minReplicas": {"type": "integer", "minimum": 0},
            "maxReplicas": {"type": "integer", "minimum": 0},
            "canaryTrafficPercent": {"type": "integer", "minimum": 0, "maximum": 100},
            "scaleMetric": {"enum": ["cpu", "memory", "concurrency", "rps"]},
            "scaleTarget": {"type": "integer", "minimum": 1},
            "containers": {"type": "array", "items": _ref(core + "Container"), "minItems": 1, "maxItems": 1},
            "initContainers": {"type": "array", "items": _ref(core + "Container")},
            "volumes": {"type": "array", "items": _ref(core + "Volume")},
            "resources": _ref(core + "ResourceRequirements"),
        },
    }
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "serving.kserve.io/v1beta1"},
            "kind": {"const": "InferenceService"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["predictor"],
                "propertyNames": {"enum": ["predictor", "transformer", "explainer", "canary", "tracing"]},
                "properties": {"predictor": predictor},
            },
        },
        "additionalProperties": False,
    }


def _http_route_schema() -> dict[str, Any]:
    name = {"type": "string", "minLength": 1, "maxLength": 253}
    backend = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "group": {"type": "string"},
            "kind": {"type": "string"},
            "name": name,
            "namespace": {"type": "string"},
            "port": {"type": "integer", "minimum": 1, "maximum": 65535},
            "weight": {"type": "integer", "minimum": 0, "maximum": 1000000},
        },
        "additionalProperties": False,
    }
    parent = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "group": {"type": "string"},
            "kind": {"type": "string"},
            "name": name,
            "namespace": {"type": "string"},
            "sectionName": {"type": "string"},
            "port": {"type": "integer"},
        },
        "additionalProperties": False,
    }
    match = {
        "type": "object",
        "properties": {
            "path": {
                "type": "object",
                "properties": {
                    "type": {"enum": ["Exact", "PathPrefix", "RegularExpression"]},
                    "value": {"type": "string", "maxLength": 1024},
                },
                "additionalProperties": False,
            },
            "headers": {"type": "array"},
            "queryParams": {"type": "array"},
            "method": {"type": "string"},
        },
        "additionalProperties": False,
    }
    rule = {
        "type": "object",
        "properties": {
            "matches": {"type": "array", "items": match, "maxItems": 64},
            "backendRefs": {"type": "array", "items": backend, "maxItems": 16},
            "filters": {"type": "array"},
            "name": {"type": "string"},
            "timeouts": {"type": "object"},
        },
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "gateway.networking.k8s.io/v1"},
            "kind": {"const": "HTTPRoute"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "properties": {
                    "parentRefs": {"type": "array", "items": parent, "maxItems": 32},
                    "hostnames": {"type": "array", "items": {"type": "string"}},
                    "rules": {"type": "array", "items": rule, "maxItems": 16},
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    }


CUSTOM = {
    ("serving.kserve.io/v1beta1", "InferenceService"): _inference_service_schema,
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): _http_route_schema,
}


def validate(document: dict[str, Any]) -> str:
    """Validate one manifest; returns what it was checked against. Raises on any violation."""
    # a round trip through JSON: what the API server would get (no tuples, no non-string keys)
    document = json.loads(json.dumps(document))
    custom = CUSTOM.get((document.get("apiVersion"), document.get("kind")))
    if custom is not None:
        _validate_with_core(document, custom())
        return f"structural {document['kind']} schema"
    version = kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    return f"Kubernetes {version} (strict)"
