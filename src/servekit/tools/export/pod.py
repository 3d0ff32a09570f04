"""One variant's pod: the servekit serve container (envelope as requests and limits, probes, capture flags), how
its model data gets there, and the model config it reads. Shared by the plain and the KServe manifests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from servekit.tools.export.endpoint import Envelope, ExportError, Variant
from servekit.tools.export.names import dns_name
from servekit.tools.export.options import BAKED_MODELS, CONFIG_DIR, MODEL_DIR, PORT, ExportOptions

CONTAINER = "servekit"
FETCH_CONTAINER = "fetch-model"
MODEL_VOLUME = "model"
CONFIG_VOLUME = "config"
MODELS_FILE = "models.yaml"


def is_remote(url: str) -> bool:
    """A URI a pod can read from anywhere (``s3://``, ``gs://``…): not a local path or ``file://``."""
    return "://" in url and not url.startswith("file://")


def config_key(variant: Variant) -> str:
    """The variant's key in the endpoint's ConfigMap."""
    return f"{dns_name(variant.name)}.{MODELS_FILE}"


def model_base(variant: Variant) -> str:
    """Where the variant's servekit model base is inside the pod."""
    return MODEL_DIR if is_remote(variant.model_data_url) else f"{BAKED_MODELS}/{variant.model_name}"


def model_config(variant: Variant) -> str:
    """servekit serve's model config file (YAML) for the variant: its model under its ModelName."""
    doc = {"model_config_list": [{"name": variant.model_name, "base_path": model_base(variant)}]}
    return yaml.safe_dump(doc, sort_keys=False)


def quantity(value: float) -> str:
    """A Kubernetes quantity: whole numbers as they are, fractions in thousandths (``12.5`` -> ``12500m``)."""
    return str(int(value)) if float(value).is_integer() else f"{round(value * 1000)}m"


def resources(envelope: Envelope, gpus: bool = True) -> dict[str, Any]:
    """Requests equal to limits (Guaranteed QoS), as an instance's envelope is both what it gets and its cap; a GPU
    type's cards as NVIDIA's device plugin names them (``nvidia.com/gpu``), for the serving container only
    (``gpus`` False: the model fetcher needs none)."""
    amounts = {"cpu": str(envelope.vcpus), "memory": f"{round(envelope.memory_gib * 1024)}Mi"}
    if gpus and envelope.gpus:
        amounts["nvidia.com/gpu"] = str(envelope.gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _probe(path: str, period_s: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": PORT}, "periodSeconds": period_s, "failureThreshold": failures}


@dataclass(frozen=True, slots=True)
class PodParts:
    containers: list[dict[str, Any]]
    init_containers: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    warnings: list[str]


def pod_parts(
    endpoint: str,
    config_map: str,
    variant: Variant,
    options: ExportOptions,
    capture_destination: str | None,
    *,
    startup_probe: bool = True,
    container_name: str = CONTAINER,
) -> PodParts:
    """The containers, init containers and volumes of one variant's pod, and what the export could not carry."""
    if variant.multi_model:
        raise ExportError(
            f"variant {variant.name} is a multi-model endpoint (Mode MultiModel): its models are loaded by servekit "
            "up's gateway on request, which a Kubernetes Service does not do; export single-model variants"
        )
    warnings: list[str] = []
    threads = str(variant.envelope.vcpus)
    args = [
        "--model_config_file",
        f"{CONFIG_DIR}/{MODELS_FILE}",
        "--host",
        "0.0.0.0",  # the pod's address; health checks stay open, inference takes the cluster's own controls
        "--rest_api_port",
        str(PORT),
        "--num_inference_threads",
        threads,
        "--tensorflow_intra_op_parallelism",
        threads,
        "--file_system_poll_wait_seconds",
        "0",
    ]
    secret_env = [{"secretRef": {"name": options.secret_for(endpoint), "optional": True}}]
    serve_env_from: list[dict[str, Any]] = []
    if variant.capture_args and capture_destination is not None:
        if is_remote(capture_destination):
            args += list(variant.capture_args)
            serve_env_from = secret_env
        else:
            warnings.append(
                f"variant {variant.name}: capture goes to the local path {capture_destination}, which a pod does "
                "not have: capture is left out (give DataCaptureConfig an s3:// DestinationS3Uri)"
            )
    mounts = [{"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = [
        {
            "name": CONFIG_VOLUME,
            "configMap": {"name": config_map, "items": [{"key": config_key(variant), "path": MODELS_FILE}]},
        }
    ]
    init: list[dict[str, Any]] = []
    if is_remote(variant.model_data_url):
        mounts.append({"name": MODEL_VOLUME, "mountPath": MODEL_DIR, "readOnly": True})
        volumes.append({"name": MODEL_VOLUME, "emptyDir": {}})
        init.append(
            {
                "name": FETCH_CONTAINER,
                "image": options.image,
                # the same resolution servekit up does: an archive is checked and unpacked, files become version 1
                "command": ["servekit", "export", "fetch-model", variant.model_data_url, MODEL_DIR],
                "envFrom": secret_env,
                "resources": resources(variant.envelope, gpus=False),
                "volumeMounts": [{"name": MODEL_VOLUME, "mountPath": MODEL_DIR}],
            }
        )
    else:
        warnings.append(
            f"variant {variant.name}: model data {variant.model_data_url} is a local path: bake it into the image "
            f"(servekit export image-context DIR --model {variant.model_name}={variant.model_data_url}) or mount a "
            f"volume at {model_base(variant)}"
        )
    container: dict[str, Any] = {
        "name": container_name,
        "image": options.image,
        "args": args,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": [{"name": k, "value": v} for k, v in variant.environment],
        "resources": resources(variant.envelope),
        "volumeMounts": mounts,
        # ready = every model loaded (KServe V2); alive = SageMaker's /ping, once the startup probe has seen it
        "readinessProbe": _probe("/v2/health/ready", 5, 3),
        "livenessProbe": _probe("/ping", 10, 3),
    }
    if startup_probe:  # loading a large model may take minutes: liveness waits for the first good /ping
        container["startupProbe"] = _probe("/ping", 5, 120)
    if serve_env_from:
        container["envFrom"] = serve_env_from
    if not container["env"]:
        del container["env"]
    return PodParts([container], init, volumes, warnings)
