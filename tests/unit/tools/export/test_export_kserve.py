"""servekit export --format kserve: an InferenceService, the second variant as a canary revision."""

from __future__ import annotations

import pytest
from tests.unit.tools.export.described import described, spec_of
from tests.unit.tools.export.k8s_schemas import validate

from servekit.tools.export import ExportError, ExportOptions, kserve_manifests


def test_two_variants_become_the_stable_revision_then_the_canary_with_its_share() -> None:
    out = kserve_manifests(spec_of(described()), ExportOptions(namespace="ml"))
    config, stable, canary = out.documents
    assert config["kind"] == "ConfigMap"
    for doc in (stable, canary):
        assert (doc["apiVersion"], doc["kind"], doc["metadata"]["name"]) == (
            "serving.kserve.io/v1beta1",
            "InferenceService",
            "churn",
        )
        assert doc["metadata"]["namespace"] == "ml"
        validate(doc)
    validate(config)
    p1, p2 = stable["spec"]["predictor"], canary["spec"]["predictor"]
    assert "canaryTrafficPercent" not in p1
    assert p2["canaryTrafficPercent"] == 25  # weights 3:1
    # A is autoscaled 2..6 on 120 invocations a minute = 2 requests a second per replica; B is a fixed fleet of 1
    assert {k: p1[k] for k in ("minReplicas", "maxReplicas", "scaleMetric", "scaleTarget")} == {
        "minReplicas": 2,
        "maxReplicas": 6,
        "scaleMetric": "rps",
        "scaleTarget": 2,
    }
    assert (p2["minReplicas"], p2["maxReplicas"]) == (1, 1) and "scaleMetric" not in p2
    (container,) = p1["containers"]
    assert container["name"] == "kserve-container"
    assert container["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert "startupProbe" not in container
    assert container["resources"]["limits"] == {"cpu": "4", "memory": "16384Mi"}
    assert p1["initContainers"][0]["command"][-2:] == ["s3://model-bucket/churn/a/model.tar.gz", "/opt/ml/model"]
    assert stable["metadata"]["annotations"]["servekit/variant"] == "A"
    assert canary["metadata"]["annotations"]["servekit/variant"] == "B"


def test_one_variant_is_one_document_and_an_inexact_rps_target_is_reported() -> None:
    doc = described()
    del doc["config"]["ProductionVariants"][1]
    doc["policies"][0]["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] = 100.0
    out = kserve_manifests(spec_of(doc), ExportOptions())
    _, isvc = out.documents
    assert isvc["spec"]["predictor"]["scaleTarget"] == 2  # 1.67 requests a second, rounded
    assert any("KServe's rps target is a whole number: 2" in w for w in out.warnings), out.warnings


def test_more_than_two_variants_have_no_kserve_form() -> None:
    doc = described()
    third = dict(doc["config"]["ProductionVariants"][1], VariantName="C")
    doc["config"]["ProductionVariants"].append(third)
    with pytest.raises(ExportError, match=r"3 variants.*--format plain"):
        kserve_manifests(spec_of(doc), ExportOptions())
