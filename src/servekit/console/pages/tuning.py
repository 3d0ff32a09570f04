"""Hyperparameter tuning jobs: the list (``/console/tuning``: the newest searches with status, counters and best
training job, refreshed live from ``/console/api/tuning``) and a job's page (``/console/tuning/{name}``): what
DescribeHyperParameterTuningJob says of it, the objective of each training job it launched as a chart, and those
training jobs (ListTrainingJobsForHyperParameterTuningJob) with their objective values, the best one marked in
words; all but its parameter ranges and static hyperparameters refreshed live from ``/console/api/tuning/{name}``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from servekit.console import data
from servekit.console.charts import objective_chart
from servekit.console.client import ApiFailure
from servekit.console.links import training_href, tuning_data_href, tuning_href
from servekit.console.pages.training import failed_json, instances, not_found, status_cell, values_table
from servekit.console.render import duration, esc, facts, link, table, when
from servekit.console.web import HEADERS, Console


def routes(console: Console) -> list[BaseRoute]:
    return [
        console.route("/console/tuning", tuning_jobs),
        console.route("/console/api/tuning", tuning_jobs_json),
        console.route("/console/tuning/{name}", tuning_job),
        console.route("/console/api/tuning/{name}", tuning_job_json),
    ]


def _objective(j: Mapping[str, Any]) -> str:
    o = (j.get("HyperParameterTuningJobConfig") or {}).get("HyperParameterTuningJobObjective") or {}
    return f"{esc(o.get('Type', '—'))} <code>{esc(o.get('MetricName', '—'))}</code>"


def _counters(j: Mapping[str, Any]) -> str:
    c = j.get("TrainingJobStatusCounters") or {}
    failed = int(c.get("NonRetryableError") or 0) + int(c.get("RetryableError") or 0)
    return (
        f"{esc(c.get('Completed', 0))} completed, {esc(c.get('InProgress', 0))} in progress, "
        f"{esc(c.get('Stopped', 0))} stopped, {esc(failed)} failed"
    )


def _best(j: Mapping[str, Any]) -> str:
    best = j.get("BestTrainingJob") or {}
    if not best.get("TrainingJobName"):
        return "—"
    name = str(best["TrainingJobName"])
    value = (best.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value", "—")
    return f'<a href="{esc(training_href(name))}" data-field="best">{esc(name)}</a> ({esc(value)})'


# ---- the list -------------------------------------------------------------------------------------------------
async def tuning_jobs(console: Console, request: Request) -> Response:
    found = await data.tuning_jobs(console.api)
    return console.html(request, "Hyperparameter tuning jobs", list_body(found), "/console/tuning")


async def tuning_jobs_json(console: Console, request: Request) -> Response:
    found = await data.tuning_jobs(console.api)
    return JSONResponse({"jobs": found, "html": {"tuning": tuning_table(found)}}, headers=HEADERS)


def tuning_table(jobs: Sequence[dict[str, Any]]) -> str:
    """Tuning jobs: status, strategy, objective, training-job counters, the best training job with its objective
    value, times, the failure reason."""
    rows = []
    for j in jobs:
        name = str(j.get("HyperParameterTuningJobName"))
        rows.append(
            (
                f'<a href="{esc(tuning_href(name))}" data-job="{esc(name)}">{esc(name)}</a>',
                status_cell(j.get("HyperParameterTuningJobStatus")),
                esc((j.get("HyperParameterTuningJobConfig") or {}).get("Strategy", "—")),
                _objective(j),
                _counters(j),
                _best(j),
                esc(when(j.get("CreationTime"))),
                esc(when(j.get("HyperParameterTuningEndTime"))),
                esc(duration(j.get("CreationTime"), j.get("HyperParameterTuningEndTime"))),
                esc(j.get("FailureReason", "")),
            )
        )
    return table(
        "Hyperparameter tuning jobs (newest first)",
        ("Job", "Status", "Strategy", "Objective", "Training jobs", "Best training job", "Created", "Ended",
         "Duration", "Reason"),
        rows,
        "none yet: CreateHyperParameterTuningJob with boto3, or a HyperparameterTuner's fit() from the SageMaker SDK.",
    )  # fmt: skip


def list_body(jobs: Sequence[dict[str, Any]]) -> str:
    return (
        '<p class="hint">Refreshed every few seconds. Times are UTC.</p>'
        '<section aria-live="polite" data-live="tuning" data-src="/console/api/tuning">'
        f"{tuning_table(jobs)}</section>"
    )


# ---- a job's page ---------------------------------------------------------------------------------------------
async def tuning_job(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        found = await data.tuning_job(console.api, name)
    except ApiFailure as exc:
        return console.failed(request, exc)
    if found is None:
        return not_found(console, request, "tuning job", name, "/console/tuning")
    return console.html(request, f"Tuning job {name}", job_body(found), "/console/tuning")


async def tuning_job_json(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        found = await data.tuning_job(console.api, name)
    except ApiFailure as exc:
        return failed_json(console, request, exc)
    if found is None:
        return JSONResponse({"message": f"No tuning job named {name}."}, 404, headers=HEADERS)
    return JSONResponse(
        {**found, "html": live_sections(found), "charts": [c.as_json() for c in _charts(found)]}, headers=HEADERS
    )


def _best_name(j: Mapping[str, Any]) -> str | None:
    best = (j.get("BestTrainingJob") or {}).get("TrainingJobName")
    return str(best) if best else None


def _charts(found: Mapping[str, Any]) -> list[Any]:
    chart = objective_chart(found["training_jobs"], _best_name(found["job"]))
    return [chart] if chart is not None else []


def job_facts(j: Mapping[str, Any]) -> str:
    """Status, failure reason, strategy, objective, limits, counters, times, the best training job; the training job
    definition's image and instances."""
    config = j.get("HyperParameterTuningJobConfig") or {}
    limits = config.get("ResourceLimits") or {}
    objectives = j.get("ObjectiveStatusCounters") or {}
    definition = j.get("TrainingJobDefinition") or {}
    items = [("Status", status_cell(j.get("HyperParameterTuningJobStatus")))]
    if j.get("FailureReason"):
        items.append(("Failure reason", f'<span data-field="failure">{esc(j["FailureReason"])}</span>'))
    items += [
        ("Strategy", esc(config.get("Strategy", "—"))),
        ("Objective", _objective(j)),
        (
            "Limits",
            f"{esc(limits.get('MaxNumberOfTrainingJobs', '—'))} training jobs, "
            f"{esc(limits.get('MaxParallelTrainingJobs', '—'))} at once",
        ),
        ("Training jobs", _counters(j)),
        (
            "Objective values",
            f"{esc(objectives.get('Succeeded', 0))} succeeded, {esc(objectives.get('Pending', 0))} pending, "
            f"{esc(objectives.get('Failed', 0))} failed",
        ),
        ("Best training job", _best(j)),
        ("Created", esc(when(j.get("CreationTime")))),
        ("Ended", esc(when(j.get("HyperParameterTuningEndTime")))),
        ("Duration", esc(duration(j.get("CreationTime"), j.get("HyperParameterTuningEndTime")))),
        ("Image", f"<code>{esc((definition.get('AlgorithmSpecification') or {}).get('TrainingImage', '—'))}</code>"),
        ("Instances per training job", instances(definition.get("ResourceConfig"))),
    ]
    return facts(items)


def training_jobs_table(summaries: Sequence[Mapping[str, Any]], best: str | None) -> str:
    """The training jobs the search launched (newest first): status, objective value, tuned hyperparameters, times,
    reason; the best one says so in words."""
    rows = []
    for s in summaries:
        name = str(s.get("TrainingJobName"))
        cell = f'<a href="{esc(training_href(name))}" data-job="{esc(name)}">{esc(name)}</a>'
        if name == best:
            cell += ' <span class="badge badge-good" data-field="best-mark">best</span>'
        objective = s.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
        value = esc(objective["Value"]) if "Value" in objective else esc(s.get("ObjectiveStatus", "—"))
        tuned = "<br>".join(
            f"<code>{esc(k)}</code> = <code>{esc(v)}</code>"
            for k, v in sorted((s.get("TunedHyperParameters") or {}).items())
        )
        rows.append(
            (
                cell,
                status_cell(s.get("TrainingJobStatus")),
                f'<span data-field="objective">{value}</span>',
                tuned or "—",
                esc(when(s.get("TrainingStartTime"))),
                esc(when(s.get("TrainingEndTime"))),
                esc(duration(s.get("TrainingStartTime"), s.get("TrainingEndTime"))),
                esc(s.get("FailureReason", "")),
            )
        )
    return table(
        "Training jobs launched (newest first)",
        ("Training job", "Status", "Objective", "Tuned hyperparameters", "Started", "Ended", "Duration", "Reason"),
        rows,
        "none yet.",
    )


def ranges_table(j: Mapping[str, Any]) -> str:
    ranges = (j.get("HyperParameterTuningJobConfig") or {}).get("ParameterRanges") or {}
    rows = []
    for kind, key in (("Continuous", "ContinuousParameterRanges"), ("Integer", "IntegerParameterRanges")):
        for r in ranges.get(key) or []:
            rows.append(
                (
                    f"<code>{esc(r.get('Name'))}</code>",
                    esc(kind),
                    f"{esc(r.get('MinValue'))} to {esc(r.get('MaxValue'))}",
                    esc(r.get("ScalingType", "Auto")),
                )
            )
    for r in ranges.get("CategoricalParameterRanges") or []:
        values = ", ".join(str(v) for v in r.get("Values") or [])
        rows.append((f"<code>{esc(r.get('Name'))}</code>", "Categorical", f"<code>{esc(values)}</code>", "—"))
    return table("Parameter ranges", ("Hyperparameter", "Type", "Range or values", "Scaling"), rows, "none.")


def live_sections(found: Mapping[str, Any]) -> dict[str, str]:
    """What the page refreshes from its JSON: the facts and the training jobs."""
    j = found["job"]
    return {"job": job_facts(j), "training-jobs": training_jobs_table(found["training_jobs"], _best_name(j))}


def job_body(found: Mapping[str, Any]) -> str:
    j = found["job"]
    name = str(j.get("HyperParameterTuningJobName", ""))
    live = live_sections(found)
    payload = json.dumps([c.as_json() for c in _charts(found)], separators=(",", ":"))
    static = (j.get("TrainingJobDefinition") or {}).get("StaticHyperParameters")
    return (
        f"<p>{link('/console/tuning', 'All tuning jobs')}</p>"
        '<h2 id="h-job">Job</h2>'
        f'<section aria-labelledby="h-job" aria-live="polite" data-live="job" '
        f'data-src="{esc(tuning_data_href(name))}">{live["job"]}</section>'
        '<section aria-labelledby="h-training-jobs"><h2 id="h-training-jobs">Training jobs</h2>'
        '<p class="hint">The objective of each training job that reported it, by the time it ended; the dashed line '
        "marks the best. The table has the same values.</p>"
        f'<div class="charts" id="charts" data-charts="{esc(payload)}"></div>'
        f'<div data-live="training-jobs" aria-live="polite">{live["training-jobs"]}</div></section>'
        '<section aria-labelledby="h-ranges"><h2 id="h-ranges">Search space</h2>'
        f"{ranges_table(j)}{values_table('Static hyperparameters', static, 'none.')}</section>"
    )
