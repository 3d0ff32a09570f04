"""Where an artifact or a model package came from, and which endpoints serve a model package.

An artifact (a path or URI, a file inside an output, or a content hash) leads to the run and step that wrote it,
its code hash and parameters, and its inputs, each traced back the same way. A model package ARN is described
through the control plane (``MetadataProperties.GeneratedBy`` holds the producing run's ARN), its model data is
traced as an artifact, and the endpoints are walked (ListEndpoints, DescribeEndpoint, DescribeEndpointConfig,
DescribeModel) for models made from the package or from its model data."""

from __future__ import annotations

import re
from typing import Any

from servekit.services.pipelines.access.guard import normalize
from servekit.services.pipelines.runs.repo import ArtifactRow, Pipelines

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_DEPTH = 32  # a lineage chain is a DAG's path: bounded by the number of steps


def find_artifact(repo: Pipelines, target: str) -> ArtifactRow | None:
    """The artifact ``target`` names: a content hash (of an artifact or of one of its files), an output's
    URI, or a path inside one."""
    if SHA256_RE.match(target):
        rows = repo.artifacts(sha256=target)
        return rows[-1] if rows else None
    try:
        uri = normalize(target)
    except ValueError:
        return None
    return repo.artifact_under(uri)


def artifact_lineage(repo: Pipelines, artifact: ArtifactRow, depth: int = 0) -> dict[str, Any]:
    """``artifact`` and, recursively, the artifacts among its inputs."""
    run = repo.get_run(artifact.run_id)
    node: dict[str, Any] = {
        "uri": artifact.uri,
        "sha256": artifact.sha256,
        "pipeline": artifact.pipeline,
        "run_id": artifact.run_id,
        "run_arn": run.arn if run else "",
        "step": artifact.step,
        "attempt": artifact.attempt,
        "output": artifact.output,
        "code_hash": artifact.code_hash,
        "parameters": artifact.parameters,
        "files": [{"key": f.key, "sha256": f.sha256, "size": f.size} for f in repo.artifact_files(artifact)],
        "inputs": [],
    }
    for item in artifact.inputs:
        entry = dict(item)
        upstream = repo.artifacts(uri=item["uri"]) if item.get("ref") else []
        if upstream and depth < MAX_DEPTH:
            entry["lineage"] = artifact_lineage(repo, upstream[0], depth + 1)
        node["inputs"].append(entry)
    return node


def _package_data_url(package: dict[str, Any]) -> str:
    containers = (package.get("InferenceSpecification") or {}).get("Containers") or []
    return str(containers[0].get("ModelDataUrl", "")) if containers else ""


def model_package_lineage(sm: Any, repo: Pipelines, arn: str) -> dict[str, Any]:
    """The package (DescribeModelPackage), the run that produced it, its model data's lineage and the endpoints
    serving it."""
    package = sm.describe_model_package(ModelPackageName=arn)
    generated_by = str((package.get("MetadataProperties") or {}).get("GeneratedBy", ""))
    run = repo.get_run(generated_by) if generated_by else None
    data_url = _package_data_url(package)
    artifact = find_artifact(repo, data_url) if data_url else None
    return {
        "model_package_arn": package["ModelPackageArn"],
        "model_package_group": package.get("ModelPackageGroupName", ""),
        "model_package_version": package.get("ModelPackageVersion"),
        "approval_status": package.get("ModelApprovalStatus", ""),
        "model_data_url": data_url,
        "generated_by": generated_by,
        "run": None
        if run is None
        else {"run_id": run.run_id, "arn": run.arn, "pipeline": run.pipeline, "status": run.status},
        "steps": [] if run is None else run_steps(repo, run.run_id),
        "artifact": None if artifact is None else artifact_lineage(repo, artifact),
        "endpoints": serving_endpoints(sm, package["ModelPackageArn"], data_url),
    }


def run_steps(repo: Pipelines, run_id: str) -> list[dict[str, Any]]:
    """The run's steps in the order they started, each with what it made: the jobs, model or package whose ARNs
    its ListPipelineExecutionSteps Metadata names (a SageMaker definition's steps), a condition's outcome."""
    out = []
    for row in sorted(repo.steps(run_id), key=lambda r: (r.started or 0.0, r.step)):
        meta = dict(row.metadata or {})
        made = {k: str(v["Arn"]) for k, v in meta.items() if isinstance(v, dict) and v.get("Arn")}
        item: dict[str, Any] = {"step": row.step, "kind": row.kind, "status": row.status, "made": made}
        if "Condition" in meta:
            item["outcome"] = meta["Condition"].get("Outcome")
        out.append(item)
    return out


def _same_package(a: str, b: str) -> bool:
    return a.lower() == b.lower()  # SageMaker lower-cases names in ARNs


def serving_endpoints(sm: Any, package_arn: str, data_url: str) -> list[dict[str, Any]]:
    """Endpoints with a variant whose model was made from the package (``ModelPackageName``) or from its model
    data (``ModelDataUrl``)."""
    out = []
    for page in sm.get_paginator("list_endpoints").paginate():
        for summary in page.get("Endpoints", []):
            name = summary["EndpointName"]
            endpoint = sm.describe_endpoint(EndpointName=name)
            config_name = endpoint.get("EndpointConfigName")
            if not config_name:
                continue
            config = sm.describe_endpoint_config(EndpointConfigName=config_name)
            for variant in config.get("ProductionVariants", []):
                if not variant.get("ModelName"):  # an IC-based endpoint's variant: its components name the models
                    continue
                model = sm.describe_model(ModelName=variant["ModelName"])
                containers = [model.get("PrimaryContainer") or {}, *(model.get("Containers") or [])]
                via = next(
                    (
                        how
                        for c in containers
                        for how, hit in (
                            ("ModelPackageName", _same_package(str(c.get("ModelPackageName", "")), package_arn)),
                            ("ModelDataUrl", bool(data_url) and c.get("ModelDataUrl") == data_url),
                        )
                        if hit
                    ),
                    None,
                )
                if via is not None:
                    out.append(
                        {
                            "EndpointName": name,
                            "EndpointStatus": endpoint.get("EndpointStatus"),
                            "EndpointConfigName": config_name,
                            "VariantName": variant["VariantName"],
                            "ModelName": variant["ModelName"],
                            "MatchedBy": via,
                        }
                    )
    return out
