"""The endpoint page lists an IC-based endpoint's inference components (model, what a copy reserves, copies,
status, the reason of a failed one) beside its variants; an endpoint without components shows no such table."""

from __future__ import annotations

from typing import Any

from servekit.console.pages import endpoint


def detail(components: list[dict[str, Any]]) -> dict[str, Any]:
    variant = {"VariantName": "AllTraffic", "CurrentWeight": 1.0, "CurrentInstanceCount": 1}
    return {
        "endpoint": {"EndpointName": "ic", "EndpointStatus": "InService", "ProductionVariants": [variant]},
        "config": {"ProductionVariants": [{"VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge"}]},
        "components": components,
    }


def component(name: str, status: str, current: int, desired: int, reason: str = "") -> dict[str, Any]:
    need = {"NumberOfCpuCoresRequired": 2, "MinMemoryRequiredInMb": 1024}
    out = {
        "InferenceComponentName": name,
        "InferenceComponentStatus": status,
        "VariantName": "AllTraffic",
        "Specification": {"ModelName": f"m-{name}", "ComputeResourceRequirements": need},
        "RuntimeConfig": {"CurrentCopyCount": current, "DesiredCopyCount": desired},
    }
    if reason:
        out["FailureReason"] = reason
    return out


def test_the_components_of_an_ic_endpoint_are_listed() -> None:
    html = endpoint.variants_section(
        detail([component("alpha", "InService", 2, 2), component("gamma", "Failed", 0, 1, "needs 2 CPU core(s)")]),
        None,
    )
    assert "Inference components" in html
    for text in ("alpha", "m-alpha", "2 core(s), 1024 MB", '<span data-field="copies">2</span>', "gamma",
                 "needs 2 CPU core(s)", "Failed"):  # fmt: skip
        assert text in html


def test_an_endpoint_without_components_has_no_components_table() -> None:
    assert "Inference components" not in endpoint.variants_section(detail([]), None)
