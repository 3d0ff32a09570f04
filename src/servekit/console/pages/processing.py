"""Processing jobs: the list (``/console/processing``: the newest jobs with status and times, refreshed live from
``/console/api/processing``) and a job's page (``/console/processing/{name}``): what DescribeProcessingJob says of
it (status, times, failure reason or exit message, image, entrypoint and arguments, instances, refreshed live from
``/console/api/processing/{name}``; its inputs and outputs) and the newest lines of its log streams (``<job>/…`` in
``/aws/sagemaker/ProcessingJobs``), which a plain link refreshes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from servekit.console import data, logview
from servekit.console.client import ApiFailure
from servekit.console.links import processing_data_href, processing_href
from servekit.console.pages.training import failed_json, instances, not_found, status_cell
from servekit.console.render import duration, esc, facts, link, table, when
from servekit.console.web import HEADERS, Console

GROUP = "/aws/sagemaker/ProcessingJobs"


def routes(console: Console) -> list[BaseRoute]:
    return [
        console.route("/console/processing", processing_jobs),
        console.route("/console/api/processing", processing_jobs_json),
        console.route("/console/processing/{name}", processing_job),
        console.route("/console/api/processing/{name}", processing_job_json),
    ]


def _cluster(j: Mapping[str, Any]) -> Mapping[str, Any]:
    return (j.get("ProcessingResources") or {}).get("ClusterConfig") or {}


# ---- the list -------------------------------------------------------------------------------------------------
async def processing_jobs(console: Console, request: Request) -> Response:
    found = await data.processing_jobs(console.api)
    return console.html(request, "Processing jobs", list_body(found), "/console/processing")


async def processing_jobs_json(console: Console, request: Request) -> Response:
    found = await data.processing_jobs(console.api)
    return JSONResponse({"jobs": found, "html": {"processing": processing_table(found)}}, headers=HEADERS)


def processing_table(jobs: Sequence[dict[str, Any]]) -> str:
    """Processing jobs: status, instances, times, duration, the failure reason (or a stopped job's exit message)."""
    rows = []
    for j in jobs:
        name = str(j.get("ProcessingJobName"))
        rows.append(
            (
                f'<a href="{esc(processing_href(name))}" data-job="{esc(name)}">{esc(name)}</a>',
                status_cell(j.get("ProcessingJobStatus")),
                instances(_cluster(j)),
                esc(when(j.get("CreationTime"))),
                esc(when(j.get("ProcessingStartTime"))),
                esc(when(j.get("ProcessingEndTime"))),
                esc(duration(j.get("ProcessingStartTime"), j.get("ProcessingEndTime"))),
                esc(j.get("FailureReason") or j.get("ExitMessage") or ""),
            )
        )
    return table(
        "Processing jobs (newest first)",
        ("Job", "Status", "Instances", "Created", "Started", "Ended", "Duration", "Reason"),
        rows,
        "none yet: CreateProcessingJob with boto3, or a processor's run() from the SageMaker SDK.",
    )


def list_body(jobs: Sequence[dict[str, Any]]) -> str:
    return (
        '<p class="hint">Refreshed every few seconds. Times are UTC.</p>'
        '<section aria-live="polite" data-live="processing" data-src="/console/api/processing">'
        f"{processing_table(jobs)}</section>"
    )


# ---- a job's page ---------------------------------------------------------------------------------------------
async def _describe(console: Console, name: str) -> dict[str, Any] | None:
    return await data.describe_job(console.api, "DescribeProcessingJob", "ProcessingJobName", name)


async def processing_job(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        described = await _describe(console, name)
    except ApiFailure as exc:
        return console.failed(request, exc)
    if described is None:
        return not_found(console, request, "processing job", name, "/console/processing")
    logs = await logview.recent_logs(console.api, GROUP, f"{name}/")
    refresh = f"{processing_href(name)}?refresh={int(console.config.clock() * 1000)}#h-logs"
    when_empty = "The job's output (what its container prints) appears here while it runs."
    body = job_body(described, logview.logs_section(logs, refresh, when_empty))
    return console.html(request, f"Processing job {name}", body, "/console/processing")


async def processing_job_json(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        described = await _describe(console, name)
    except ApiFailure as exc:
        return failed_json(console, request, exc)
    if described is None:
        return JSONResponse({"message": f"No processing job named {name}."}, 404, headers=HEADERS)
    return JSONResponse({"job": described, "html": {"job": job_facts(described)}}, headers=HEADERS)


def _words(words: object) -> str:
    return " ".join(str(w) for w in words) if isinstance(words, list) else ""


def job_facts(j: Mapping[str, Any]) -> str:
    """Status, failure reason or exit message, image, entrypoint, arguments, instances, times, stopping condition."""
    app = j.get("AppSpecification") or {}
    items = [("Status", status_cell(j.get("ProcessingJobStatus")))]
    if j.get("FailureReason"):
        items.append(("Failure reason", f'<span data-field="failure">{esc(j["FailureReason"])}</span>'))
    if j.get("ExitMessage"):
        items.append(("Exit message", esc(j["ExitMessage"])))
    items += [
        ("Image", f"<code>{esc(app.get('ImageUri', '—'))}</code>"),
        ("Entrypoint", f"<code>{esc(_words(app.get('ContainerEntrypoint')) or '—')}</code>"),
        ("Arguments", f"<code>{esc(_words(app.get('ContainerArguments')) or '—')}</code>"),
        ("Instances", instances(_cluster(j))),
        ("Created", esc(when(j.get("CreationTime")))),
        ("Started", esc(when(j.get("ProcessingStartTime")))),
        ("Ended", esc(when(j.get("ProcessingEndTime")))),
        ("Duration", esc(duration(j.get("ProcessingStartTime"), j.get("ProcessingEndTime")))),
        ("Max runtime", f"{esc((j.get('StoppingCondition') or {}).get('MaxRuntimeInSeconds', '—'))} s"),
    ]
    return facts(items)


def inputs_table(j: Mapping[str, Any]) -> str:
    rows = []
    for i in j.get("ProcessingInputs") or []:
        s3 = i.get("S3Input") or {}
        rows.append(
            (
                esc(i.get("InputName")),
                f"<code>{esc(s3.get('S3Uri', '—'))}</code>",
                f"<code>{esc(s3.get('LocalPath', '—'))}</code>",
                esc(s3.get("S3DataType", "—")),
                esc(s3.get("S3DataDistributionType", "FullyReplicated")),
                esc(s3.get("S3InputMode", "—")),
            )
        )
    return table(
        "Inputs",
        ("Input", "S3 URI", "Local path", "Data type", "Distribution", "Input mode"),
        rows,
        "none.",
    )


def outputs_table(j: Mapping[str, Any]) -> str:
    rows = []
    for o in (j.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
        s3 = o.get("S3Output") or {}
        rows.append(
            (
                esc(o.get("OutputName")),
                f"<code>{esc(s3.get('S3Uri', '—'))}</code>",
                f"<code>{esc(s3.get('LocalPath', '—'))}</code>",
                esc(s3.get("S3UploadMode", "—")),
            )
        )
    return table("Outputs", ("Output", "S3 URI", "Local path", "Upload mode"), rows, "none.")


def job_body(j: Mapping[str, Any], logs: str) -> str:
    name = str(j.get("ProcessingJobName", ""))
    return (
        f"<p>{link('/console/processing', 'All processing jobs')}</p>"
        '<h2 id="h-job">Job</h2>'
        f'<section aria-labelledby="h-job" aria-live="polite" data-live="job" '
        f'data-src="{esc(processing_data_href(name))}">{job_facts(j)}</section>'
        '<section aria-labelledby="h-io"><h2 id="h-io">Inputs and outputs</h2>'
        f"{inputs_table(j)}{outputs_table(j)}</section>"
        f'<section aria-labelledby="h-logs"><h2 id="h-logs">Logs</h2>{logs}</section>'
    )
