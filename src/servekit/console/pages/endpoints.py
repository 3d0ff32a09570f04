"""The endpoints page (``/console/``): every endpoint with its status, variants, instances and cost, refreshed
live from ``/console/api/endpoints``; and the endpoint cells the endpoint page shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from servekit.console import data
from servekit.console.links import endpoint_href
from servekit.console.render import badge, esc, link, money, table, weight, when
from servekit.console.web import HEADERS, Console


def routes(console: Console) -> list[BaseRoute]:
    return [console.route("/console/", endpoints), console.route("/console/api/endpoints", endpoints_json)]


async def endpoints(console: Console, request: Request) -> Response:
    summaries = await data.endpoint_summaries(console.api)
    return console.html(request, "Endpoints", endpoints_body(summaries), "/console/")


async def endpoints_json(console: Console, request: Request) -> Response:
    summaries = await data.endpoint_summaries(console.api)
    return JSONResponse({"endpoints": summaries, "html": {"endpoints": endpoints_table(summaries)}}, headers=HEADERS)


def instance_types(config: dict[str, Any]) -> dict[str, str]:
    return {v["VariantName"]: str(v.get("InstanceType", "serverless")) for v in config.get("ProductionVariants", [])}


def status_cell(endpoint: dict[str, Any]) -> str:
    cell = badge(endpoint.get("EndpointStatus"))
    if endpoint.get("FailureReason"):
        cell += f'<div class="reason">{esc(endpoint["FailureReason"])}</div>'
    return cell


def _rollout_line(pending: dict[str, Any] | None) -> str:
    """One line for the list: the config being deployed and its step (the endpoint page has the rest)."""
    if not pending:
        return ""
    steps = [
        (v.get("VariantStatus") or [{}])[0].get("StatusMessage", "") for v in pending.get("ProductionVariants", [])
    ]
    step = next((s for s in steps if s), "starting")
    return f'<div class="reason">Rollout to {esc(pending.get("EndpointConfigName"))}: {esc(step)}</div>'


def endpoints_table(summaries: Sequence[dict[str, Any]]) -> str:
    """The endpoints list: status and failure reason, each variant's weight and instances, cost per hour."""
    rows = []
    for s in summaries:
        e, types = s["endpoint"], instance_types(s["config"])
        variants = "".join(
            f'<li data-variant="{esc(v["VariantName"])}"><strong>{esc(v["VariantName"])}</strong> weight '
            f"{weight(v.get('CurrentWeight'))}, {esc(v.get('CurrentInstanceCount', 0))}/"
            f"{esc(v.get('DesiredInstanceCount', 0))} &times; {esc(types.get(v['VariantName'], '—'))}</li>"
            for v in e.get("ProductionVariants", [])
        )
        rollout = _rollout_line(e.get("PendingDeploymentSummary"))
        rows.append(
            (
                link(endpoint_href(e["EndpointName"]), e["EndpointName"]),
                status_cell(e) + rollout,
                f'<ul class="variants">{variants}</ul>',
                f'<span data-field="cost">{money(e.get("ServekitCostPerHour"))}</span>',
                esc(when(e.get("LastModifiedTime"))),
            )
        )
    return table(
        "Endpoints",
        ("Endpoint", "Status", "Variants (weight, current/desired instances x type)", "Cost", "Last modified"),
        rows,
        "none yet: create one with boto3 or servekit endpoint create.",
    )


def endpoints_body(summaries: Sequence[dict[str, Any]]) -> str:
    return (
        '<p class="hint">Refreshed every few seconds. Times are UTC.</p>'
        f'<section aria-live="polite" data-live="endpoints" data-src="/console/api/endpoints">'
        f"{endpoints_table(summaries)}</section>"
    )
