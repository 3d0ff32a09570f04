"""The model registry's pages: every package group with its versions (``/console/registry``, with the approve
action, ``POST /console/registry/approve``) and a version's page with its approval history and lineage
(``/console/registry/package?arn=``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute

from servekit.console import data
from servekit.console.client import ApiFailure
from servekit.console.data import package_data_url
from servekit.console.links import endpoint_href, execution_href, package_href
from servekit.console.render import badge, csrf_field, esc, link, table, when
from servekit.console.web import HEADERS, Console


def routes(console: Console) -> list[BaseRoute]:
    return [
        console.route("/console/registry", registry),
        console.route("/console/registry/package", package),
        console.route("/console/registry/approve", approve, methods=["POST"]),
    ]


async def registry(console: Console, request: Request) -> Response:
    s = console.session(request)
    groups = await data.registry(console.api)
    return console.html(request, "Models & registry", registry_body(groups, s.csrf if s else None), "/console/registry")


async def package(console: Console, request: Request) -> Response:
    arn = request.query_params.get("arn", "")
    if not arn:
        body = '<p role="alert" class="error">Which package? (?arn=)</p>'
        return console.html(request, "Not found", body, status=400)
    try:
        described = await data.model_package(console.api, arn)
        lineage = await data.package_lineage(console.api, described)
    except ApiFailure as exc:
        return console.failed(request, exc)
    title = f"{described.get('ModelPackageGroupName')} version {described.get('ModelPackageVersion')}"
    return console.html(request, title, package_body(described, lineage), "/console/registry")


async def approve(console: Console, request: Request) -> Response:
    got = await console.acting(request)
    if isinstance(got, Response):
        return got
    s, form = got
    arn = form.get("package", "")
    try:
        await console.api(
            "sagemaker",
            "UpdateModelPackage",
            {"ModelPackageArn": arn, "ModelApprovalStatus": "Approved", "ApprovalDescription": "console"},
            s.access_key_id,
        )
    except ApiFailure as exc:
        body = f'<p role="alert" class="error">{esc(exc.message)}</p>'
        return console.html(request, "Not approved", body, status=400)
    return RedirectResponse(package_href(arn), 303, headers=HEADERS)


def registry_body(groups: Sequence[dict[str, Any]], csrf: str | None) -> str:
    if not groups:
        return '<p class="empty">No model package groups yet.</p>'
    out = []
    for g in groups:
        group = g["group"]
        rows = []
        for p in g["packages"]:
            action = ""
            if csrf is not None and p.get("ModelApprovalStatus") != "Approved":
                action = (
                    '<form method="post" action="/console/registry/approve" class="inline">'
                    f'{csrf_field(csrf)}<input type="hidden" name="package" value="{esc(p["ModelPackageArn"])}">'
                    f'<button type="submit" aria-label="Approve version {esc(p.get("ModelPackageVersion"))} of '
                    f'{esc(group["ModelPackageGroupName"])}">Approve</button></form>'
                )
            rows.append(
                (
                    link(
                        package_href(p["ModelPackageArn"]),
                        f"version {p.get('ModelPackageVersion', '?')}",
                    ),
                    badge(p.get("ModelApprovalStatus")),
                    badge(p.get("ModelPackageStatus")),
                    esc(when(p.get("CreationTime"))),
                    esc(p.get("ModelPackageDescription", "")),
                    action,
                )
            )
        out.append(
            f"<section><h2>{esc(group['ModelPackageGroupName'])}</h2>"
            f'<p class="hint">{esc(group.get("ModelPackageGroupDescription", ""))}</p>'
            + table("Versions", ("Version", "Approval", "Status", "Created", "Description", ""), rows)
            + "</section>"
        )
    return "".join(out)


def lineage_section(p: dict[str, Any], lineage: dict[str, Any]) -> str:
    """Where the version came from (the pipeline execution that registered it, its steps) and where it runs now."""
    arn = str(p.get("ModelPackageArn", ""))
    run, generated_by = lineage.get("run"), lineage.get("generated_by", "")
    out = '<section aria-labelledby="h-lineage"><h2 id="h-lineage">Lineage</h2>'
    if run is not None:
        pipeline = str(run.get("PipelineArn", "")).rsplit("/", 1)[-1]
        facts = [
            ("Produced by", link(execution_href(generated_by), generated_by.rsplit("/", 1)[-1])),
            ("Pipeline", esc(pipeline)),
            ("Execution status", badge(run.get("PipelineExecutionStatus"))),
            ("Started", esc(when(run.get("CreationTime")))),
            ("Model data (artifact)", esc(package_data_url(p))),
        ]
        out += '<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"
        steps = []
        for step in lineage.get("steps", []):
            registered = ((step.get("Metadata") or {}).get("RegisterModel") or {}).get("Arn", "")
            made = "registered this version" if registered and registered.lower() == arn.lower() else ""
            if registered and not made:
                made = "registered " + str(registered).rsplit("/", 2)[-2] + " v" + str(registered).rsplit("/", 1)[-1]
            steps.append(
                (
                    esc(step.get("StepName")),
                    badge(step.get("StepStatus")),
                    esc(when(step.get("EndTime"))),
                    esc(made),
                    esc(step.get("FailureReason", "")),
                )
            )
        out += table(
            "Steps of the producing execution",
            ("Step", "Status", "Ended", "Produced", "Failure reason"),
            steps,
            "none listed.",
        )
    elif generated_by:
        why = lineage.get("run_error") or "it is not a pipeline execution of this plane"
        out += f'<p class="hint">Generated by {esc(generated_by)} ({esc(why)}).</p>'
    else:
        out += '<p class="empty">Not produced by a pipeline (no MetadataProperties.GeneratedBy).</p>'
    serving = [
        (
            link(endpoint_href(str(e["EndpointName"])), e["EndpointName"]),
            badge(e.get("EndpointStatus")),
            esc(e.get("EndpointConfigName")),
            esc(e.get("VariantName")),
            esc(e.get("ModelName")),
            esc(e.get("MatchedBy")),
        )
        for e in lineage.get("endpoints", [])
    ]
    out += table(
        "Endpoints serving this version now",
        ("Endpoint", "Status", "Config", "Variant", "Model", "Matched by"),
        serving,
        "none.",
    )
    return out + "</section>"


def package_body(p: dict[str, Any], lineage: dict[str, Any] | None = None) -> str:
    container = (p.get("InferenceSpecification") or {}).get("Containers") or [{}]
    facts = [
        ("Group", p.get("ModelPackageGroupName")),
        ("Version", p.get("ModelPackageVersion")),
        ("Approval", p.get("ModelApprovalStatus")),
        ("Status", p.get("ModelPackageStatus")),
        ("Model data", container[0].get("ModelDataUrl")),
        ("Created", when(p.get("CreationTime"))),
    ]
    out = '<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts) + "</dl>"
    history = [
        (esc(when(h.get("Time"))), esc(h.get("From", "")), badge(h.get("To")), esc(h.get("By")), esc(h.get("Reason")))
        for h in p.get("ServekitApprovalHistory", [])
    ]
    out += table("Approval history", ("Time", "From", "To", "By", "Reason"), history, "no changes.")
    deployments = [
        (esc(when(d.get("Time"))), esc(", ".join(f"{k}={v}" for k, v in sorted(d.items()) if k != "Time")))
        for d in p.get("ServekitDeployments", [])
    ]
    out += table(
        "Deployments made by the registry's rules (history)", ("Time", "Detail"), deployments, "none recorded."
    )
    return out + (lineage_section(p, lineage) if lineage is not None else "")
