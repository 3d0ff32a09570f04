"""servekit export's plain manifests, built from a described endpoint: exact fields, and every document valid
against the Kubernetes API schemas (tests/unit/tools/export/k8s_schemas.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.tools.export.described import ENVELOPES, RESOURCE_A, described, policy, spec_of
from tests.unit.tools.export.k8s_schemas import validate

from servekit.config.loading import parse_model_config
from servekit.tools.export import ExportError, ExportOptions, endpoint_spec, kubernetes_manifests, to_yaml


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_spec_reads_the_desired_state_envelopes_scaling_and_capture() -> None:
    spec = spec_of(described())
    a, b = spec.variants
    assert (spec.name, spec.config_name, spec.capture_destination) == (
        "churn",
        "churn-cfg",
        "s3://capture-bucket/churn",
    )
    assert (a.name, a.model_name, a.instance_count, a.weight, a.envelope) == (
        "A",
        "churn-a",
        2,
        3.0,
        ENVELOPES["ml.m5.xlarge"],
    )
    assert a.environment == (("LOG_LEVEL", "info"), ("SAGEMAKER_PROGRAM", "inference.py"))
    assert a.scaling is not None and (a.scaling.min_capacity, a.scaling.max_capacity) == (2, 6)
    (tt,) = a.scaling.policies
    assert (tt.predefined, tt.target_value, tt.scale_in_cooldown_s, tt.scale_out_cooldown_s) == (
        "SageMakerVariantInvocationsPerInstance",
        120.0,
        600,
        60,
    )
    assert b.scaling is None and b.instance_count == 1
    # the control plane's own capture flags, per variant
    assert a.capture_args == (
        "--capture_destination",
        "s3://capture-bucket/churn",
        "--capture_sampling_percentage",
        "50",
        "--capture_mode",
        "input",
        "--capture_partition_prefix",
        "churn/A",
    )


def test_desired_counts_and_weights_win_over_the_config_s_initial_ones() -> None:
    doc = described()
    doc["endpoint"]["ProductionVariants"][0].update(DesiredInstanceCount=5, DesiredWeight=0.5)
    a = spec_of(doc).variants[0]
    assert (a.instance_count, a.weight) == (5, 0.5)


def test_the_deployment_of_a_variant_with_s3_model_data() -> None:
    docs = kubernetes_manifests(spec_of(described()), ExportOptions(image="reg.example/servekit:1")).documents
    dep = by_kind(docs, "Deployment")["churn-a"]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["selector"] == {"matchLabels": {"servekit/endpoint": "churn", "servekit/variant": "A"}}
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["template"]["metadata"]["labels"]["servekit/variant"] == "A"
    (fetch,) = pod["initContainers"]
    assert fetch["image"] == "reg.example/servekit:1"
    assert fetch["command"] == [
        "servekit",
        "export",
        "fetch-model",
        "s3://model-bucket/churn/a/model.tar.gz",
        "/opt/ml/model",
    ]
    assert fetch["envFrom"] == [{"secretRef": {"name": "churn-aws", "optional": True}}]
    (serve,) = pod["containers"]
    limits = {"cpu": "4", "memory": "16384Mi"}  # ml.m5.xlarge: 4 vCPUs, 16 GiB
    assert serve["resources"] == {"requests": limits, "limits": limits}
    assert serve["args"][:12] == [
        "--model_config_file",
        "/etc/servekit/models.yaml",
        "--host",
        "0.0.0.0",
        "--rest_api_port",
        "8080",
        "--num_inference_threads",
        "4",
        "--tensorflow_intra_op_parallelism",
        "4",
        "--file_system_poll_wait_seconds",
        "0",
    ]
    assert serve["args"][12:] == list(spec_of(described()).variants[0].capture_args)
    assert serve["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8080}
    assert serve["livenessProbe"]["httpGet"] == {"path": "/ping", "port": 8080}
    assert serve["startupProbe"]["httpGet"] == {"path": "/ping", "port": 8080}
    assert serve["env"] == [
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "SAGEMAKER_PROGRAM", "value": "inference.py"},
    ]
    assert serve["volumeMounts"] == [
        {"name": "config", "mountPath": "/etc/servekit", "readOnly": True},
        {"name": "model", "mountPath": "/opt/ml/model", "readOnly": True},
    ]
    assert pod["volumes"] == [
        {
            "name": "config",
            "configMap": {"name": "churn-config", "items": [{"key": "a.models.yaml", "path": "models.yaml"}]},
        },
        {"name": "model", "emptyDir": {}},
    ]


def test_the_config_map_holds_each_variant_s_model_config_that_serve_parses(tmp_path: Path) -> None:
    docs = kubernetes_manifests(spec_of(described()), ExportOptions()).documents
    data = by_kind(docs, "ConfigMap")["churn-config"]["data"]
    (a,) = parse_model_config(data["a.models.yaml"], str(tmp_path / "models.yaml"))
    (b,) = parse_model_config(data["b.models.yaml"], str(tmp_path / "models.yaml"))
    assert (a.name, a.base_path) == ("churn-a", "/opt/ml/model")
    assert (b.name, b.base_path) == ("churn-b", "/opt/servekit/models/churn-b")


def test_a_local_model_path_is_said_to_need_baking_and_gets_no_fetch() -> None:
    out = kubernetes_manifests(spec_of(described()), ExportOptions())
    pod = by_kind(out.documents, "Deployment")["churn-b"]["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert [v["name"] for v in pod["volumes"]] == ["config"]
    assert any("/srv/models/churn-b is a local path" in w and "image-context" in w for w in out.warnings), out.warnings


def test_services_per_endpoint_and_variant_and_a_weighted_route_with_a_gateway() -> None:
    out = kubernetes_manifests(spec_of(described()), ExportOptions(gateway="infra/public", namespace="ml"))
    services = by_kind(out.documents, "Service")
    assert services["churn"]["spec"]["selector"] == {"servekit/endpoint": "churn"}
    assert services["churn-b"]["spec"]["selector"] == {"servekit/endpoint": "churn", "servekit/variant": "B"}
    assert services["churn"]["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    route = by_kind(out.documents, "HTTPRoute")["churn"]
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public", "namespace": "infra"}
    ]
    (rule,) = route["spec"]["rules"]
    assert [(r["name"], r["weight"]) for r in rule["backendRefs"]] == [("churn-a", 750), ("churn-b", 250)]
    assert {d["metadata"]["namespace"] for d in out.documents} == {"ml"}
    assert not any("replica counts" in w for w in out.warnings)


def test_without_a_gateway_unequal_weights_are_warned_about() -> None:
    out = kubernetes_manifests(spec_of(described()), ExportOptions())
    assert not by_kind(out.documents, "HTTPRoute")
    assert any("replica counts, not by the variant weights (A 3, B 1)" in w for w in out.warnings), out.warnings
    doc = described()  # 2 instances at weight 2 and 1 at weight 1: replicas already split traffic 2:1
    doc["endpoint"]["ProductionVariants"][0].update(DesiredWeight=2.0)
    assert not any("replica counts" in w for w in kubernetes_manifests(spec_of(doc), ExportOptions()).warnings)


def test_the_hpa_mirrors_the_invocations_policy() -> None:
    docs = kubernetes_manifests(spec_of(described()), ExportOptions()).documents
    hpas = by_kind(docs, "HorizontalPodAutoscaler")
    assert list(hpas) == ["churn-a"]  # B is not autoscaled
    hpa = hpas["churn-a"]
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "churn-a"},
        "minReplicas": 2,
        "maxReplicas": 6,
        "metrics": [
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "servekit_invocations_per_minute"},
                    "target": {"type": "AverageValue", "averageValue": "120"},
                },
            }
        ],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
    }
    assert hpa["metadata"]["annotations"] == {"servekit/scale-out-cooldown-seconds": "60"}


def test_cpu_memory_custom_and_disabled_scale_in_policies() -> None:
    doc = described()
    ns = "/aws/sagemaker/Endpoints"
    doc["policies"] = [
        policy(
            "cpu",
            {
                "TargetValue": 200.0,
                "CustomizedMetricSpecification": {
                    "MetricName": "CPUUtilization",
                    "Namespace": ns,
                    "Statistic": "Average",
                },
            },
        ),
        policy(
            "mem",
            {
                "TargetValue": 70.0,
                "CustomizedMetricSpecification": {
                    "MetricName": "MemoryUtilization",
                    "Namespace": ns,
                    "Statistic": "Average",
                },
            },
        ),
        policy(
            "queue",
            {
                "TargetValue": 12.5,
                "DisableScaleIn": True,
                "CustomizedMetricSpecification": {
                    "MetricName": "QueueDepth",
                    "Namespace": "app",
                    "Statistic": "Average",
                    "Dimensions": [{"Name": "Queue", "Value": "jobs"}],
                },
            },
        ),
        {**policy("steps", {}), "PolicyType": "StepScaling", "TargetTrackingScalingPolicyConfiguration": None},
    ]
    out = kubernetes_manifests(spec_of(doc), ExportOptions())
    hpa = by_kind(out.documents, "HorizontalPodAutoscaler")["churn-a"]
    assert hpa["spec"]["metrics"] == [
        # 200% summed over 4 vCPUs is 50% of the pod's 4-CPU request
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
        {
            "type": "Resource",
            "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 70}},
        },
        {
            "type": "External",
            "external": {
                "metric": {"name": "QueueDepth", "selector": {"matchLabels": {"Queue": "jobs"}}},
                "target": {"type": "Value", "value": "12500m"},
            },
        },
    ]
    assert hpa["spec"]["behavior"] == {"scaleDown": {"selectPolicy": "Disabled"}}
    assert any("steps (StepScaling) is not mirrored" in w for w in out.warnings), out.warnings
    assert any("QueueDepth becomes an External metric" in w for w in out.warnings), out.warnings
    for d in out.documents:
        validate(d)


def test_a_target_without_policies_writes_no_hpa_and_says_so() -> None:
    doc = described()
    doc["policies"] = []
    out = kubernetes_manifests(spec_of(doc), ExportOptions())
    assert not by_kind(out.documents, "HorizontalPodAutoscaler")
    assert any("no HorizontalPodAutoscaler written" in w for w in out.warnings)


def test_capture_to_a_local_path_is_left_out_with_a_warning() -> None:
    doc = described()
    doc["config"]["DataCaptureConfig"]["DestinationS3Uri"] = "file:///var/capture"
    out = kubernetes_manifests(spec_of(doc), ExportOptions())
    serve = by_kind(out.documents, "Deployment")["churn-a"]["spec"]["template"]["spec"]["containers"][0]
    assert "--capture_destination" not in serve["args"] and "envFrom" not in serve
    assert any("capture goes to the local path file:///var/capture" in w for w in out.warnings)


def test_every_document_is_valid_and_the_yaml_round_trips() -> None:
    out = kubernetes_manifests(spec_of(described()), ExportOptions(gateway="public"))
    kinds = [d["kind"] for d in out.documents]
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "Deployment",
        "Service",
        "Service",
        "Service",
        "HTTPRoute",
        "HorizontalPodAutoscaler",
    ]
    for d in out.documents:
        validate(d)
    text = to_yaml(out.documents)
    assert list(yaml.safe_load_all(text)) == out.documents
    assert "&id" not in text  # no YAML anchors


def test_a_typo_in_a_manifest_fails_the_validation() -> None:
    """The validator is strict: the checks above could fail."""
    dep = by_kind(kubernetes_manifests(spec_of(described()), ExportOptions()).documents, "Deployment")["churn-a"]
    dep["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(Exception, match="readinesProbe"):
        validate(dep)


def test_what_cannot_be_exported_is_refused_with_the_reason() -> None:
    doc = described()
    doc["models"]["churn-a"]["PrimaryContainer"]["Mode"] = "MultiModel"
    with pytest.raises(ExportError, match="multi-model endpoint"):
        kubernetes_manifests(spec_of(doc), ExportOptions())
    doc = described()
    doc["config"]["ProductionVariants"][0]["InstanceType"] = "ml.unknown.huge"
    with pytest.raises(ExportError, match=r"instance type ml.unknown.huge is not in the instance types table"):
        spec_of(doc)
    doc = described()
    with pytest.raises(ExportError, match="DescribeModel of churn-b is missing"):
        endpoint_spec(doc["endpoint"], doc["config"], {"churn-a": doc["models"]["churn-a"]}, ENVELOPES)
    doc = described()
    del doc["config"]["ProductionVariants"][0]["ModelName"]  # an IC-based endpoint's variant
    with pytest.raises(ExportError, match=r"variant A is IC-based .* does not export inference components"):
        spec_of(doc)
    doc = described()
    doc["targets"][0]["MinCapacity"] = 9
    with pytest.raises(ExportError, match=f"{RESOURCE_A}: MinCapacity 9 is more than MaxCapacity 6"):
        spec_of(doc)
    for bad in ({"gateway": "a/b/c"}, {"namespace": "Not_A_Label"}, {"image": " "}):
        with pytest.raises(ExportError):
            ExportOptions(**bad)
