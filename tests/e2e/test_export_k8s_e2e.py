"""`servekit export` end to end: a real `servekit up` with a two-variant endpoint and autoscaling policies (set up
with boto3), `servekit export k8s` as a real process, and manifests that validate against the Kubernetes API schemas
and carry the numbers DescribeEndpoint, the instance types and the policies hold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.tools.export.k8s_schemas import validate

from servekit.services.hosting.instance_types import load_instance_types
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
TYPES = {"A": "ml.t2.medium", "B": "ml.m5.large"}


def cli(up: UpProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVEKIT_URL": up.url, "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", *args], capture_output=True, text=True, env=env, timeout=100
    )


def two_variant_endpoint(up: UpProcess, tmp: Path) -> None:
    sm, aas = up.sm(), up.client("application-autoscaling")
    variants = []
    for name, factor, weight, count in (("A", 2.0, 3.0, 2), ("B", 3.0, 1.0, 1)):
        model = f"exp-{name}"
        sm.create_model(
            ModelName=model,
            PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp, model, factor))},
        )
        variants.append(
            {
                "VariantName": name,
                "ModelName": model,
                "InitialInstanceCount": count,
                "InstanceType": TYPES[name],
                "InitialVariantWeight": weight,
            }
        )
    sm.create_endpoint_config(EndpointConfigName="exp-cfg", ProductionVariants=variants)
    sm.create_endpoint(EndpointName="exp", EndpointConfigName="exp-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="exp", WaiterConfig=FAST)
    for variant, low, high in (("A", 2, 5), ("B", 1, 3)):
        aas.register_scalable_target(
            ServiceNamespace="sagemaker",
            ResourceId=f"endpoint/exp/variant/{variant}",
            ScalableDimension=DIMENSION,
            MinCapacity=low,
            MaxCapacity=high,
        )
    aas.put_scaling_policy(
        PolicyName="invocations",
        ServiceNamespace="sagemaker",
        ResourceId="endpoint/exp/variant/A",
        ScalableDimension=DIMENSION,
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 90.0,
            "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
            "ScaleInCooldown": 120,
            "ScaleOutCooldown": 30,
        },
    )
    aas.put_scaling_policy(
        PolicyName="cpu",
        ServiceNamespace="sagemaker",
        ResourceId="endpoint/exp/variant/B",
        ScalableDimension=DIMENSION,
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 140.0,  # summed over ml.m5.large's 2 vCPUs: 70% of the pod's request
            "CustomizedMetricSpecification": {
                "MetricName": "CPUUtilization",
                "Namespace": "/aws/sagemaker/Endpoints",
                "Statistic": "Average",
                "Dimensions": [{"Name": "EndpointName", "Value": "exp"}, {"Name": "VariantName", "Value": "B"}],
            },
        },
    )


def named(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_export_k8s_reproduces_a_live_endpoint(up: UpProcess, tmp_path: Path) -> None:
    two_variant_endpoint(up, tmp_path)
    desc = up.sm().describe_endpoint(EndpointName="exp")
    live = {v["VariantName"]: v for v in desc["ProductionVariants"]}
    assert {n: v["CurrentInstanceCount"] for n, v in live.items()} == {"A": 2, "B": 1}

    out = tmp_path / "manifests"
    result = cli(up, "export", "k8s", "--endpoint", "exp", "--output", str(out), "--gateway", "infra/public",
                 "--image", "registry.example/servekit:test", "--home", str(up.home))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "wrote" in result.stdout and "Traceback" not in result.stderr
    # local model folders cannot be fetched in a cluster: the export says so instead of writing a broken pod
    assert "is a local path: bake it into the image" in result.stderr, result.stderr
    docs = [d for d in yaml.safe_load_all((out / "exp.yaml").read_text()) if d]
    checked = {f"{d['kind']}/{d['metadata']['name']}": validate(d) for d in docs}
    assert checked == {
        "ConfigMap/exp-config": "Kubernetes 1.37 (strict)",
        "Deployment/exp-a": "Kubernetes 1.37 (strict)",
        "Deployment/exp-b": "Kubernetes 1.37 (strict)",
        "Service/exp": "Kubernetes 1.37 (strict)",
        "Service/exp-a": "Kubernetes 1.37 (strict)",
        "Service/exp-b": "Kubernetes 1.37 (strict)",
        "HTTPRoute/exp": "structural HTTPRoute schema",
        "HorizontalPodAutoscaler/exp-a": "Kubernetes 1.37 (strict)",
        "HorizontalPodAutoscaler/exp-b": "Kubernetes 1.37 (strict)",
    }

    table = load_instance_types()
    deployments = named(docs, "Deployment")
    for variant in ("A", "B"):
        dep = deployments[f"exp-{variant.lower()}"]
        assert dep["spec"]["replicas"] == live[variant]["DesiredInstanceCount"]
        (serve,) = dep["spec"]["template"]["spec"]["containers"]
        itype = table[TYPES[variant]]
        envelope = {"cpu": str(itype.vcpus), "memory": f"{round(itype.memory_gib * 1024)}Mi"}
        assert serve["resources"] == {"requests": envelope, "limits": envelope}
        assert serve["image"] == "registry.example/servekit:test"
        assert serve["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
        assert serve["livenessProbe"]["httpGet"]["path"] == "/ping"
    route = named(docs, "HTTPRoute")["exp"]
    assert [(b["name"], b["weight"]) for b in route["spec"]["rules"][0]["backendRefs"]] == [
        ("exp-a", 750),
        ("exp-b", 250),
    ]

    aas = up.client("application-autoscaling")
    targets = {
        t["ResourceId"]: t for t in aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    }
    hpas = named(docs, "HorizontalPodAutoscaler")
    for variant in ("A", "B"):
        target = targets[f"endpoint/exp/variant/{variant}"]
        spec = hpas[f"exp-{variant.lower()}"]["spec"]
        assert (spec["minReplicas"], spec["maxReplicas"]) == (target["MinCapacity"], target["MaxCapacity"])
        assert spec["scaleTargetRef"]["name"] == f"exp-{variant.lower()}"
    assert hpas["exp-a"]["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "servekit_invocations_per_minute"},
                "target": {"type": "AverageValue", "averageValue": "90"},
            },
        }
    ]
    assert hpas["exp-a"]["spec"]["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 120}}
    assert hpas["exp-b"]["spec"]["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
    ]

    kserve = cli(
        up, "export", "k8s", "--endpoint", "exp", "--format", "kserve", "--output", "-", "--home", str(up.home)
    )
    assert kserve.returncode == 0, kserve.stderr
    config_map, stable, canary = [d for d in yaml.safe_load_all(kserve.stdout) if d]
    for doc in (config_map, stable, canary):
        validate(doc)
    assert "canaryTrafficPercent" not in stable["spec"]["predictor"]
    assert canary["spec"]["predictor"]["canaryTrafficPercent"] == 25
    assert (stable["spec"]["predictor"]["minReplicas"], stable["spec"]["predictor"]["maxReplicas"]) == (2, 5)
    assert stable["spec"]["predictor"]["scaleMetric"] == "rps"


def test_export_errors_are_one_line(up: UpProcess, tmp_path: Path) -> None:
    missing = cli(up, "export", "k8s", "--endpoint", "nope", "--home", str(up.home))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith("servekit: ValidationException: Could not find endpoint"), missing.stderr
    bad = cli(up, "export", "k8s", "--endpoint", "nope", "--gateway", "a/b/c", "--home", str(up.home))
    assert bad.returncode == 2 and bad.stderr.startswith("servekit: --gateway must be NAME or NAMESPACE/NAME")


def test_image_context_bakes_local_models_and_the_model_fetch_fills_a_folder(tmp_path: Path) -> None:
    import tarfile

    model = scaling_model(tmp_path / "src", "baked", 2.0)
    ctx = tmp_path / "ctx"
    env = {**os.environ, "COLUMNS": "160"}
    run = [sys.executable, "-m", "servekit.cli.main", "export"]
    made = subprocess.run([*run, "image-context", str(ctx), "--model", f"baked={model}", "--extras", "s3,sklearn"],
                          capture_output=True, text=True, env=env, timeout=100)  # fmt: skip
    assert made.returncode == 0, made.stderr
    dockerfile = (ctx / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["servekit", "serve"]' in dockerfile and "COPY models/ /opt/servekit/models/" in dockerfile
    assert (ctx / "models" / "baked" / "1" / "code" / "inference.py").is_file()

    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:  # SageMaker's layout: the version's files at the root
        tar.add(model / "1" / "code", arcname="code")
    target = tmp_path / "mnt" / "model"
    fetched = subprocess.run([*run, "fetch-model", str(archive), str(target)], capture_output=True, text=True,
                             env=env, timeout=100)  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr
    assert (target / "1" / "code" / "inference.py").read_text() == (model / "1" / "code" / "inference.py").read_text()
    assert sorted(p.name for p in target.iterdir()) == ["1"]  # the unpacking cache is gone
    again = subprocess.run([*run, "fetch-model", str(archive), str(target)], capture_output=True, text=True,
                           env=env, timeout=100)  # fmt: skip
    assert again.returncode == 2 and "is not empty" in again.stderr
    # a local model base is copied, never moved out of the user's folder
    copied = tmp_path / "copy"
    assert subprocess.run([*run, "fetch-model", str(model), str(copied)], env=env, timeout=100).returncode == 0
    assert (copied / "1" / "code" / "inference.py").is_file() and (model / "1" / "code" / "inference.py").is_file()
