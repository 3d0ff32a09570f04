"""servekit export of an endpoint on a GPU instance type: the serving container asks for the type's GPUs as
``nvidia.com/gpu`` (requests = limits), the model fetcher for none, and the documents stay valid Kubernetes."""

from __future__ import annotations

import dataclasses

import pytest
from tests.unit.tools.export.described import described
from tests.unit.tools.export.k8s_schemas import validate

from servekit.services.hosting.instance_types import instance_types
from servekit.tools.export import Envelope, ExportError, ExportOptions, endpoint_spec, kubernetes_manifests

TABLE = {t.name: Envelope(t.vcpus, t.memory_gib, t.gpus) for t in instance_types()}


def test_a_gpu_variant_asks_for_its_gpus() -> None:
    doc = described()
    doc["config"]["ProductionVariants"][0]["InstanceType"] = "ml.g5.12xlarge"
    doc["endpoint"]["ProductionVariants"][0]["CurrentInstanceType"] = "ml.g5.12xlarge"
    spec = endpoint_spec(doc["endpoint"], doc["config"], doc["models"], TABLE, doc["targets"], doc["policies"])
    docs = kubernetes_manifests(spec, ExportOptions(image="reg.example/servekit:1")).documents
    for d in docs:
        validate(d)
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    pod = deployments["churn-a"]["spec"]["template"]["spec"]
    (serve,) = pod["containers"]
    want = {"cpu": "48", "memory": "196608Mi", "nvidia.com/gpu": "4"}  # ml.g5.12xlarge: 48 vCPUs, 192 GiB, 4 A10G
    assert serve["resources"] == {"requests": want, "limits": want}
    (fetch,) = pod["initContainers"]
    assert "nvidia.com/gpu" not in fetch["resources"]["limits"]
    (other,) = deployments["churn-b"]["spec"]["template"]["spec"]["containers"]  # a CPU type beside it
    assert "nvidia.com/gpu" not in other["resources"]["limits"]


def test_a_negative_gpu_count_is_refused() -> None:
    with pytest.raises(ExportError, match="GPU count must be >= 0"):
        dataclasses.replace(Envelope(4, 16.0), gpus=-1)
