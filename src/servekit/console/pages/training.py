"""Training jobs: the list (``/console/training``: the newest jobs with status, times and final metrics, refreshed
live from ``/console/api/training``) and a job's page (``/console/training/{name}``): what DescribeTrainingJob says
of it (status and secondary status, times, failure reason, instances, model artifact, its status history and final
metrics, refreshed live from ``/console/api/training/{name}``; hyperparameters and input channels), a chart per
metric, and the newest lines of its log streams (``<job>/…`` in ``/aws/sagemaker/TrainingJobs``), which a plain
link refreshes.

The status cell, instance text and name/value tables here are the processing and tuning pages' too."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from servekit.console import data, logview
from servekit.console.charts import Chart, training_metric_charts
from servekit.console.client import ApiFailure
from servekit.console.links import training_data_href, training_href, tuning_href
from servekit.console.render import badge, duration, esc, facts, link, table, when
from servekit.console.web import HEADERS, Console

GROUP = "/aws/sagemaker/TrainingJobs"


def routes(console: Console) -> list[BaseRoute]:
    return [
        console.route("/console/training", training_jobs),
        console.route("/console/api/training", training_jobs_json),
        console.route("/console/training/{name}", training_job),
        console.route("/console/api/training/{name}", training_job_json),
    ]


# ---- shared with the processing and tuning pages --------------------------------------------------------------
def status_cell(status: object, secondary: object = None) -> str:
    """A job's status as a badge, with its secondary status (SageMaker's finer step) beside it when it says more."""
    out = badge(status)
    if secondary and secondary != status:
        out += f' <span class="reason" data-field="secondary">{esc(secondary)}</span>'
    return out


def instances(resources: Mapping[str, Any] | None) -> str:
    r = resources or {}
    return f"{esc(r.get('InstanceCount', '—'))} &times; {esc(r.get('InstanceType', '—'))}"


def name_of(arn: object) -> str:
    """The name at the end of a job's ARN (``…:hyper-parameter-tuning-job/<name>``)."""
    return str(arn or "").rsplit("/", 1)[-1]


def values_table(caption: str, values: Mapping[str, Any] | None, empty: str) -> str:
    """Name/value pairs (hyperparameters) by name; values as the API holds them (the SDK sends JSON text)."""
    rows = [(f"<code>{esc(k)}</code>", f"<code>{esc(v)}</code>") for k, v in sorted((values or {}).items())]
    return table(caption, ("Name", "Value"), rows, empty)


def not_found(console: Console, request: Request, what: str, name: str, active: str) -> Response:
    body = (
        f'<p role="alert" class="error">No {esc(what)} named {esc(name)}.</p><p>{link(active, "All " + what + "s")}</p>'
    )
    return console.html(request, "Not found", body, active, status=404)


def failed_json(console: Console, request: Request, exc: ApiFailure) -> Response:
    status = console.failed(request, exc).status_code  # as the page answers it: 400 or 502
    return JSONResponse({"message": f"{exc.code}: {exc.message}"}, status, headers=HEADERS)


# ---- the list -------------------------------------------------------------------------------------------------
async def training_jobs(console: Console, request: Request) -> Response:
    found = await data.training_jobs(console.api)
    return console.html(request, "Training jobs", list_body(found), "/console/training")


async def training_jobs_json(console: Console, request: Request) -> Response:
    found = await data.training_jobs(console.api)
    return JSONResponse({"jobs": found, "html": {"training": training_table(found)}}, headers=HEADERS)


def _final_metrics(j: Mapping[str, Any]) -> str:
    items = [
        f"{esc(m.get('MetricName'))} = {esc(m.get('Value'))}"
        for m in j.get("FinalMetricDataList") or []
        if isinstance(m, Mapping)
    ]
    return "<br>".join(items) or "—"


def training_table(jobs: Sequence[dict[str, Any]]) -> str:
    """Training jobs: status (and secondary status), instances, times, duration, final metrics, the tuning job that
    launched it, the failure reason."""
    rows = []
    for j in jobs:
        name = str(j.get("TrainingJobName"))
        tuning = name_of(j["TuningJobArn"]) if j.get("TuningJobArn") else ""
        rows.append(
            (
                f'<a href="{esc(training_href(name))}" data-job="{esc(name)}">{esc(name)}</a>',
                status_cell(j.get("TrainingJobStatus"), j.get("SecondaryStatus")),
                instances(j.get("ResourceConfig")),
                esc(when(j.get("CreationTime"))),
                esc(when(j.get("TrainingStartTime"))),
                esc(when(j.get("TrainingEndTime"))),
                esc(duration(j.get("TrainingStartTime"), j.get("TrainingEndTime"))),
                _final_metrics(j),
                link(tuning_href(tuning), tuning) if tuning else "—",
                esc(j.get("FailureReason", "")),
            )
        )
    return table(
        "Training jobs (newest first)",
        (
            "Job",
            "Status",
            "Instances",
            "Created",
            "Started",
            "Ended",
            "Duration",
            "Final metrics",
            "Tuning job",
            "Reason",
        ),
        rows,
        "none yet: CreateTrainingJob with boto3, or an estimator's fit() from the SageMaker SDK.",
    )


def list_body(jobs: Sequence[dict[str, Any]]) -> str:
    return (
        '<p class="hint">Refreshed every few seconds. Times are UTC. A tuning job\'s training jobs are here too.</p>'
        '<section aria-live="polite" data-live="training" data-src="/console/api/training">'
        f"{training_table(jobs)}</section>"
    )


# ---- a job's page ---------------------------------------------------------------------------------------------
async def _read(console: Console, name: str) -> tuple[dict[str, Any], logview.RecentLogs, list[Chart]] | None:
    described = await data.describe_job(console.api, "DescribeTrainingJob", "TrainingJobName", name)
    if described is None:
        return None
    logs = await logview.recent_logs(console.api, GROUP, f"{name}/")
    return described, logs, metric_charts(described, logs)


def metric_charts(described: Mapping[str, Any], logs: logview.RecentLogs) -> list[Chart]:
    definitions = (described.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
    lines = [(e.timestamp / 1000.0, e.message) for e in logs.events]
    return training_metric_charts(definitions, described.get("FinalMetricDataList") or [], lines)


async def training_job(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        found = await _read(console, name)
    except ApiFailure as exc:
        return console.failed(request, exc)
    if found is None:
        return not_found(console, request, "training job", name, "/console/training")
    described, logs, charts = found
    refresh = f"{training_href(name)}?refresh={int(console.config.clock() * 1000)}#h-logs"
    body = job_body(described, charts, logview.logs_section(logs, refresh, _WHEN_NO_LOGS))
    return console.html(request, f"Training job {name}", body, "/console/training")


async def training_job_json(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        found = await _read(console, name)
    except ApiFailure as exc:
        return failed_json(console, request, exc)
    if found is None:
        return JSONResponse({"message": f"No training job named {name}."}, 404, headers=HEADERS)
    described, _logs, charts = found
    return JSONResponse(
        {"job": described, "html": live_sections(described), "charts": [c.as_json() for c in charts]},
        headers=HEADERS,
    )


_WHEN_NO_LOGS = "The job's output (what its script prints) appears here while it runs."


def job_facts(j: Mapping[str, Any]) -> str:
    """Status and secondary status, failure reason, image, instances, times, duration, stopping condition, the model
    artifact, the output path, the tuning job that launched it."""
    spec = j.get("AlgorithmSpecification") or {}
    artifact = (j.get("ModelArtifacts") or {}).get("S3ModelArtifacts", "—")
    written = (
        "" if j.get("TrainingJobStatus") == "Completed" else ' <span class="hint">(written when it completes)</span>'
    )
    items = [("Status", status_cell(j.get("TrainingJobStatus"), j.get("SecondaryStatus")))]
    if j.get("FailureReason"):
        items.append(("Failure reason", f'<span data-field="failure">{esc(j["FailureReason"])}</span>'))
    items += [
        ("Image", f"<code>{esc(spec.get('TrainingImage', '—'))}</code>"),
        ("Input mode", esc(spec.get("TrainingInputMode", "—"))),
        ("Instances", instances(j.get("ResourceConfig"))),
        ("Created", esc(when(j.get("CreationTime")))),
        ("Started", esc(when(j.get("TrainingStartTime")))),
        ("Ended", esc(when(j.get("TrainingEndTime")))),
        ("Duration", esc(duration(j.get("TrainingStartTime"), j.get("TrainingEndTime")))),
        ("Billable seconds", esc(j.get("BillableTimeInSeconds", "—"))),
        ("Max runtime", f"{esc((j.get('StoppingCondition') or {}).get('MaxRuntimeInSeconds', '—'))} s"),
        ("Model artifact", f'<code data-field="artifact">{esc(artifact)}</code>{written}'),
        ("Output path", f"<code>{esc((j.get('OutputDataConfig') or {}).get('S3OutputPath', '—'))}</code>"),
    ]
    if j.get("TuningJobArn"):
        tuning = name_of(j["TuningJobArn"])
        items.append(("Tuning job", link(tuning_href(tuning), tuning)))
    return facts(items)


def metrics_table(j: Mapping[str, Any]) -> str:
    rows = [
        (f"<code>{esc(m.get('MetricName'))}</code>", esc(m.get("Value")), esc(when(m.get("Timestamp"))))
        for m in j.get("FinalMetricDataList") or []
    ]
    return table(
        "Final metrics (FinalMetricDataList)",
        ("Metric", "Value", "Time"),
        rows,
        "none yet: the job's MetricDefinitions are read from its log when it ends.",
    )


def transitions_table(j: Mapping[str, Any]) -> str:
    rows = [
        (
            status_cell(t.get("Status")),
            esc(when(t.get("StartTime"))),
            esc(when(t.get("EndTime"))),
            esc(t.get("StatusMessage", "")),
        )
        for t in j.get("SecondaryStatusTransitions") or []
    ]
    return table("Secondary status transitions", ("Status", "Started", "Ended", "Message"), rows, "none yet.")


def channels_table(j: Mapping[str, Any]) -> str:
    rows = []
    for ch in j.get("InputDataConfig") or []:
        source = (ch.get("DataSource") or {}).get("S3DataSource") or {}
        rows.append(
            (
                esc(ch.get("ChannelName")),
                f"<code>{esc(source.get('S3Uri', '—'))}</code>",
                esc(source.get("S3DataType", "—")),
                esc(source.get("S3DataDistributionType", "FullyReplicated")),
                esc(ch.get("ContentType", "—")),
                esc(ch.get("InputMode", "—")),
            )
        )
    return table(
        "Input channels",
        ("Channel", "S3 URI", "Data type", "Distribution", "Content type", "Input mode"),
        rows,
        "none (the job reads no channel).",
    )


def live_sections(j: Mapping[str, Any]) -> dict[str, str]:
    """What the page refreshes from its JSON: the facts, the final metrics, the status history."""
    return {"job": job_facts(j), "metrics": metrics_table(j), "transitions": transitions_table(j)}


def job_body(j: Mapping[str, Any], charts: Sequence[Chart], logs: str) -> str:
    name = str(j.get("TrainingJobName", ""))
    live = live_sections(j)
    payload = json.dumps([c.as_json() for c in charts], separators=(",", ":"))
    return (
        f"<p>{link('/console/training', 'All training jobs')}</p>"
        '<h2 id="h-job">Job</h2>'
        f'<section aria-labelledby="h-job" aria-live="polite" data-live="job" '
        f'data-src="{esc(training_data_href(name))}">{live["job"]}</section>'
        '<section aria-labelledby="h-metrics"><h2 id="h-metrics">Metrics</h2>'
        "<p class=\"hint\">A chart per metric: its values in the job's newest log lines (its MetricDefinitions' "
        "regexes, as SageMaker reads a job's log into metrics) by time, or its final value where no line was read. "
        "The table has the final values.</p>"
        f'<div class="charts" id="charts" data-charts="{esc(payload)}"></div>'
        f'<div data-live="metrics" aria-live="polite">{live["metrics"]}</div></section>'
        '<section aria-labelledby="h-transitions"><h2 id="h-transitions">Status history</h2>'
        f'<div data-live="transitions">{live["transitions"]}</div></section>'
        '<section aria-labelledby="h-config"><h2 id="h-config">Hyperparameters and input channels</h2>'
        f"{values_table('Hyperparameters', j.get('HyperParameters'), 'none.')}{channels_table(j)}</section>"
        f'<section aria-labelledby="h-logs"><h2 id="h-logs">Logs</h2>{logs}</section>'
    )
