"""The batch jobs page (``/console/jobs``): transform jobs with their progress, refreshed live from
``/console/api/jobs``; each job's name links to its own page (:mod:`servekit.console.pages.job`, with its logs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from servekit.console import data
from servekit.console.links import job_href
from servekit.console.render import badge, esc, table, when
from servekit.console.web import HEADERS, Console


def routes(console: Console) -> list[BaseRoute]:
    return [console.route("/console/jobs", jobs), console.route("/console/api/jobs", jobs_json)]


async def jobs(console: Console, request: Request) -> Response:
    found = await data.transform_jobs(console.api)
    return console.html(request, "Batch transform jobs", jobs_body(found), "/console/jobs")


async def jobs_json(console: Console, request: Request) -> Response:
    found = await data.transform_jobs(console.api)
    return JSONResponse({"jobs": found, "html": {"transform": transform_table(found)}}, headers=HEADERS)


def _progress(done: int, total: int, label: str) -> str:
    """A native progress bar (announced by screen readers) with its numbers as text beside it."""
    if total <= 0:
        return '<span class="hint">counting objects…</span>'
    return (
        f'<progress max="{total}" value="{min(done, total)}" aria-label="{esc(label)}"></progress> '
        f"{esc(done)} / {esc(total)}"
    )


def status_html(j: dict[str, Any], tag: str) -> str:
    """The job's status badge and, in a ``tag`` of class reason, the other status word. A job whose records
    failed (servekit's CompletedWithErrors, SageMaker's Completed) shows CompletedWithErrors in its own colour,
    never as a green Completed."""
    sagemaker, own = j.get("TransformJobStatus"), j.get("ServekitStatus")
    if own == "CompletedWithErrors":
        return f'{badge(own)} <{tag} class="reason">SageMaker: {esc(sagemaker)}</{tag}>'
    status = badge(sagemaker)
    if own and own != sagemaker:
        status += f' <{tag} class="reason">servekit: {esc(own)}</{tag}>'
    return status


def transform_table(jobs: Sequence[dict[str, Any]]) -> str:
    """Transform jobs: status, objects done of total, records and record errors, times, the failure reason."""
    rows = []
    for j in jobs:
        progress = j.get("ServekitProgress") or {}
        total, done = int(progress.get("ObjectsTotal") or 0), int(progress.get("ObjectsDone") or 0)
        failed = int(progress.get("ObjectsFailed") or 0)
        status = status_html(j, "div")
        name = str(j.get("TransformJobName"))
        objects = _progress(done, total, f"Objects done of {name}")
        if failed:
            objects += f'<div class="reason">{esc(failed)} failed</div>'
        rows.append(
            (
                f'<a href="{esc(job_href(name))}" data-job="{esc(name)}">{esc(name)}</a>',
                status,
                objects,
                esc(progress.get("Records", "—")),
                esc(progress.get("RecordErrors", "—")),
                esc(when(j.get("CreationTime"))),
                esc(when(j.get("TransformStartTime"))),
                esc(when(j.get("TransformEndTime"))),
                esc(j.get("FailureReason", "")),
            )
        )
    return table(
        "Batch transform jobs (newest first)",
        ("Job", "Status", "Objects done / total", "Records", "Record errors", "Created", "Started", "Ended", "Reason"),
        rows,
        "none yet: run servekit transform run, or CreateTransformJob with boto3.",
    )


def jobs_body(jobs: Sequence[dict[str, Any]]) -> str:
    return (
        '<p class="hint">Refreshed every few seconds. Times are UTC.</p>'
        '<section aria-live="polite" data-live="transform" data-src="/console/api/jobs">'
        f"{transform_table(jobs)}</section>"
    )
