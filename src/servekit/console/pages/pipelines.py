"""The pipelines pages: every pipeline with its newest executions (``/console/pipelines``) and an execution with
its steps (``/console/pipelines/execution?arn=``), each refreshed live from its ``/console/api/...`` JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from servekit.console import data
from servekit.console.client import ApiFailure
from servekit.console.links import execution_href
from servekit.console.pages.pipeline_dag import dag_svg, job_link
from servekit.console.render import badge, esc, link, table, when
from servekit.console.web import HEADERS, Console


def routes(console: Console) -> list[BaseRoute]:
    return [
        console.route("/console/pipelines", pipelines),
        console.route("/console/api/pipelines", pipelines_json),
        console.route("/console/pipelines/execution", execution),
        console.route("/console/api/pipelines/execution", execution_json),
    ]


async def pipelines(console: Console, request: Request) -> Response:
    found = await data.pipelines(console.api)
    return console.html(request, "Pipelines", pipelines_body(found), "/console/pipelines")


async def pipelines_json(console: Console, request: Request) -> Response:
    found = await data.pipelines(console.api)
    return JSONResponse({"pipelines": found, "html": {"pipelines": pipelines_table(found)}}, headers=HEADERS)


async def execution(console: Console, request: Request) -> Response:
    arn = request.query_params.get("arn", "")
    if not arn:
        body = '<p role="alert" class="error">Which execution? (?arn=PipelineExecutionArn)</p>'
        return console.html(request, "Not found", body, "/console/pipelines", status=400)
    try:
        found = await data.pipeline_execution(console.api, arn)
    except ApiFailure as exc:
        return console.failed(request, exc)
    name = found["execution"].get("PipelineExecutionDisplayName") or arn.rsplit("/", 1)[-1]
    return console.html(request, f"Pipeline execution {name}", execution_body(arn, found), "/console/pipelines")


async def execution_json(console: Console, request: Request) -> Response:
    try:
        found = await data.pipeline_execution(console.api, request.query_params.get("arn", ""))
    except ApiFailure as exc:
        return JSONResponse({"message": exc.message}, 404 if exc.status == 400 else 502, headers=HEADERS)
    return JSONResponse({**found, "html": {"execution": execution_section(found)}}, headers=HEADERS)


def _span(start: object, end: object) -> str:
    if isinstance(start, (int, float)) and isinstance(end, (int, float)):
        return f"{max(0.0, float(end) - float(start)):.1f} s"
    return "—"


def pipelines_table(found: Sequence[dict[str, Any]]) -> str:
    """One table per pipeline: its newest executions with status, start, last change and failure reason."""
    if not found:
        return (
            '<p class="empty">No pipelines yet: CreatePipeline with boto3 (servekit\'s definition format), '
            "or servekit pipeline run.</p>"
        )
    out = []
    for item in found:
        p = item["pipeline"]
        rows = [
            (
                link(execution_href(x["PipelineExecutionArn"]), x.get("PipelineExecutionDisplayName") or "execution"),
                badge(x.get("PipelineExecutionStatus")),
                esc(when(x.get("StartTime"))),
                esc(x.get("PipelineExecutionFailureReason", "")),
            )
            for x in item["executions"]
        ]
        name = str(p.get("PipelineName"))
        out.append(
            f'<section aria-labelledby="p-{esc(name)}"><h2 id="p-{esc(name)}">{esc(name)}</h2>'
            f'<p class="hint">{esc(p.get("PipelineDescription", ""))} Created {esc(when(p.get("CreationTime")))}.</p>'
            + table(
                f"Executions of {name} (newest first)",
                ("Execution", "Status", "Started", "Failure reason"),
                rows,
                "never run.",
            )
            + "</section>"
        )
    return "".join(out)


def pipelines_body(found: Sequence[dict[str, Any]]) -> str:
    return (
        '<p class="hint">Refreshed every few seconds. Times are UTC.</p>'
        '<section aria-live="polite" data-live="pipelines" data-src="/console/api/pipelines">'
        f"{pipelines_table(found)}</section>"
    )


def _cache_cell(step: dict[str, Any]) -> str:
    hit = step.get("CacheHitResult")
    if not hit:
        return "no"
    source = str(hit.get("SourcePipelineExecutionArn", ""))
    return "hit, from " + (link(execution_href(source), source.rsplit("/", 1)[-1]) if source else "an earlier run")


def _job_cell(step: dict[str, Any]) -> str:
    href = job_link(step)
    if not href:
        return ""
    meta = step.get("Metadata") or {}
    arn = next((str(v["Arn"]) for v in meta.values() if isinstance(v, dict) and v.get("Arn")), "")
    return link(href, arn.rsplit("/", 1)[-1] if ":model-package/" not in arn else arn.split(":model-package/", 1)[1])


def execution_section(found: dict[str, Any]) -> str:
    """An execution: its status and times, then its steps (status, times, attempts, cache hit, failure reason)."""
    x = found["execution"]
    facts = [
        ("Status", badge(x.get("PipelineExecutionStatus"))),
        ("Pipeline", esc(str(x.get("PipelineArn", "")).rsplit("/", 1)[-1])),
        ("Execution ARN", f"<code>{esc(x.get('PipelineExecutionArn'))}</code>"),
        ("Created", esc(when(x.get("CreationTime")))),
        ("Last modified", esc(when(x.get("LastModifiedTime")))),
    ]
    if x.get("FailureReason"):
        facts.append(("Failure reason", esc(x["FailureReason"])))
    rows = [
        (
            esc(s.get("StepName")),
            badge(s.get("StepStatus")),
            esc(when(s.get("StartTime"))),
            esc(when(s.get("EndTime"))),
            esc(_span(s.get("StartTime"), s.get("EndTime"))),
            esc(s.get("AttemptCount", "")),
            _cache_cell(s),
            _job_cell(s),
            esc(s.get("FailureReason", "")),
        )
        for s in found["steps"]
    ]
    finished = x.get("PipelineExecutionStatus") in ("Succeeded", "Failed", "Stopped")
    return (
        '<dl class="facts">'
        + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts)
        + "</dl>"
        + dag_svg(found.get("definition") or {}, found["steps"], finished)
        + table(
            "Steps (in the order they started)",
            ("Step", "Status", "Started", "Ended", "Took", "Attempts", "Cache", "Job", "Failure reason"),
            rows,
            "none started yet.",
        )
    )


def execution_body(arn: str, found: dict[str, Any]) -> str:
    src = "/console/api/pipelines/execution?arn=" + quote(arn, safe="")
    return (
        '<p><a href="/console/pipelines">All pipelines</a></p>'
        f'<section aria-live="polite" data-live="execution" data-src="{esc(src)}">{execution_section(found)}</section>'
    )
