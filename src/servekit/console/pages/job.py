"""A transform job's page (``/console/jobs/{name}``): what DescribeTransformJob says of it (refreshed live from
``/console/api/jobs/{name}``) and the newest lines of its log streams (``<job>/…`` in ``/aws/sagemaker/TransformJobs``),
which a plain link refreshes."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from servekit.console import logview
from servekit.console.client import ApiFailure
from servekit.console.links import job_data_href, job_href
from servekit.console.pages.jobs import status_html
from servekit.console.render import esc, link, when
from servekit.console.web import HEADERS, Console


def routes(console: Console) -> list[BaseRoute]:
    return [console.route("/console/jobs/{name}", job), console.route("/console/api/jobs/{name}", job_json)]


async def _describe(console: Console, name: str) -> dict[str, Any] | None:
    """DescribeTransformJob's answer, or ``None`` when there is no such job (SageMaker's ValidationException
    "Could not find requested job")."""
    try:
        return await console.api("sagemaker", "DescribeTransformJob", {"TransformJobName": name}, None)
    except ApiFailure as exc:
        if exc.code == "ValidationException" and "could not find" in exc.message.lower():
            return None
        raise


async def job(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        described = await _describe(console, name)
    except ApiFailure as exc:
        return console.failed(request, exc)
    if described is None:
        body = f'<p role="alert" class="error">No transform job named {esc(name)}.</p>'
        return console.html(request, "Not found", body, "/console/jobs", status=404)
    logs = await logview.recent_logs(console.api, logview.TRANSFORM_GROUP, f"{name}/")
    refresh = f"{job_href(name)}?refresh={int(console.config.clock() * 1000)}#h-logs"
    return console.html(request, f"Transform job {name}", job_body(described, logs, refresh), "/console/jobs")


async def job_json(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        described = await _describe(console, name)
    except ApiFailure as exc:
        status = console.failed(request, exc).status_code  # as the page answers it: 400 or 502
        return JSONResponse({"message": f"{exc.code}: {exc.message}"}, status, headers=HEADERS)
    if described is None:
        return JSONResponse({"message": f"No transform job named {name}."}, 404, headers=HEADERS)
    return JSONResponse({"job": described, "html": {"job": job_facts(described)}}, headers=HEADERS)


def job_facts(j: dict[str, Any]) -> str:
    """Status (and servekit's own), objects, records, model, input and output, instances, times, failure reason."""
    progress = j.get("ServekitProgress") or {}
    status = status_html(j, "span")
    total, done = int(progress.get("ObjectsTotal") or 0), int(progress.get("ObjectsDone") or 0)
    objects = f"{esc(done)} / {esc(total)}" if total else "counting objects…"
    if progress.get("ObjectsFailed"):
        objects += f", {esc(progress['ObjectsFailed'])} failed"
    source = ((j.get("TransformInput") or {}).get("DataSource") or {}).get("S3DataSource") or {}
    resources = j.get("TransformResources") or {}
    items = [
        ("Status", status),
        ("Objects done / total", objects),
        ("Records", esc(progress.get("Records", "—"))),
        ("Record errors", esc(progress.get("RecordErrors", "—"))),
        ("Model", esc(j.get("ModelName"))),
        ("Input", f"<code>{esc(source.get('S3Uri', '—'))}</code>"),
        ("Output", f"<code>{esc((j.get('TransformOutput') or {}).get('S3OutputPath', '—'))}</code>"),
        ("Instances", f"{esc(resources.get('InstanceCount', '—'))} &times; {esc(resources.get('InstanceType', '—'))}"),
        ("Created", esc(when(j.get("CreationTime")))),
        ("Started", esc(when(j.get("TransformStartTime")))),
        ("Ended", esc(when(j.get("TransformEndTime")))),
    ]
    if j.get("FailureReason"):
        items.append(("Failure reason", esc(j["FailureReason"])))
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<dl class="facts">{rows}</dl>'


def job_body(described: dict[str, Any], logs: logview.RecentLogs, refresh_href: str) -> str:
    name = str(described.get("TransformJobName", ""))
    when_empty = (
        "A job created through the API (CreateTransformJob, the SDK's Transformer) ships its output here as it "
        "runs; one run directly with servekit transform run prints to its own terminal instead."
    )
    return (
        f"<p>{link('/console/jobs', 'All batch jobs')}</p>"
        '<h2 id="h-job">Job</h2>'
        f'<section aria-labelledby="h-job" aria-live="polite" data-live="job" data-src="{esc(job_data_href(name))}">'
        f"{job_facts(described)}</section>"
        '<section aria-labelledby="h-logs"><h2 id="h-logs">Logs</h2>'
        f"{logview.logs_section(logs, refresh_href, when_empty)}</section>"
    )
