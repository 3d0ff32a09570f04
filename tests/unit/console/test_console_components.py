"""The endpoint page lists an IC-based endpoint's inference components (model, what a copy reserves, copies,
status, the reason of a failed one) beside its variants; an endpoint without components shows no such table."""

from __future__ import annotations

import asyncio
from typing import Any

from servekit.console import data
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


def test_a_models_serving_endpoints_skip_ic_based_variants() -> None:
    """The registry page's endpoints serving a package read every endpoint config: an IC-based variant names no
    model and is skipped (it raised KeyError before), while a model variant still matches."""
    configs = {
        "ic": [{"VariantName": "AllTraffic", "InstanceType": "ml.m5.xlarge"}],
        "plain": [{"VariantName": "AllTraffic", "InstanceType": "ml.m5.large", "ModelName": "m"}],
    }

    async def api(service: str, operation: str, params: dict[str, Any], body: Any) -> dict[str, Any]:
        if operation == "ListEndpoints":
            return {"Endpoints": [{"EndpointName": n} for n in configs]}
        if operation == "DescribeEndpoint":
            return {"EndpointName": params["EndpointName"], "EndpointConfigName": params["EndpointName"]}
        if operation == "DescribeEndpointConfig":
            return {"ProductionVariants": configs[params["EndpointConfigName"]]}
        assert operation == "DescribeModel" and params == {"ModelName": "m"}
        return {"PrimaryContainer": {"ModelDataUrl": "s3://b/m.tar.gz"}}

    found = asyncio.run(data.serving_endpoints(api, "arn:pkg", "s3://b/m.tar.gz"))
    assert [(e["EndpointName"], e["MatchedBy"]) for e in found] == [("plain", "ModelDataUrl")]
