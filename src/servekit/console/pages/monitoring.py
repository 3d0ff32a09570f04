"""The monitoring page (``/console/monitoring``): schedules, their latest executions, per endpoint a drift heatmap
and the model-quality chart; and the files of an execution's output folder (``/console/monitoring/report``),
for a signed-in user only."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from servekit.console import data
from servekit.console.client import ApiFailure
from servekit.console.links import report_href
from servekit.console.render import badge, esc, link, table, when
from servekit.console.web import HEADERS, Console

# the report's own inline styles and SVG only; sandboxed: no script, no navigation, no form
_REPORT_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"


def routes(console: Console) -> list[BaseRoute]:
    return [console.route("/console/monitoring", monitoring), console.route("/console/monitoring/report", report)]


async def monitoring(console: Console, request: Request) -> Response:
    found = await data.monitoring(console.api)
    return console.html(request, "Monitoring", monitoring_body(found), "/console/monitoring")


async def report(console: Console, request: Request) -> Response:
    """A file of a monitoring execution's output folder (its HTML report, violations, metrics), for a signed-in
    user only (reports hold samples of captured data); a path that leaves the folder is refused."""
    if console.session(request) is None:
        back = quote(f"/console/monitoring/report?{request.url.query}", safe="")
        body = (
            '<p role="alert" class="error">Sign in to open reports.</p>'
            f'<p><a href="/console/login?next={back}">Sign in</a></p>'
        )
        return console.html(request, "Sign in required", body, "/console/monitoring", status=401)
    job, name = request.query_params.get("job", ""), request.query_params.get("file", "")
    if not job or not name:
        body = '<p role="alert" class="error">Which report? (?job=processing job name&amp;file=report.html)</p>'
        return console.html(request, "Not found", body, "/console/monitoring", status=400)
    try:
        root = await data.output_folder(console.api, job)
    except ApiFailure as exc:
        return console.failed(request, exc)
    if root is None:
        body = '<p role="alert" class="error">This execution\'s output is not on this machine\'s disk.</p>'
        return console.html(request, "Not here", body, "/console/monitoring", status=404)
    base = root.resolve()
    target = (base / name).resolve()  # symlinks followed: a link out of the folder is refused too
    if not target.is_relative_to(base) or target == base:
        body = f'<p role="alert" class="error">{esc(name)} is outside the execution\'s output folder.</p>'
        return console.html(request, "Refused", body, "/console/monitoring", status=403)
    if not target.is_file():
        body = f'<p role="alert" class="error">No file {esc(name)} in the execution\'s output folder.</p>'
        return console.html(request, "Not found", body, "/console/monitoring", status=404)
    kind = {".html": "text/html; charset=utf-8", ".json": "application/json"}.get(target.suffix, "text/plain")
    headers = {**HEADERS, "Content-Security-Policy": _REPORT_CSP}
    return Response(target.read_bytes(), media_type=kind, headers=headers)


def _short_time(epoch: object) -> str:
    text = when(epoch)
    return text[11:19] if len(text) >= 19 else text


def _drift_cell(feature: str, run: dict[str, Any]) -> str:
    """One heatmap cell: a word and a symbol (not colour alone) and a title with the measured values."""
    window = run["window"]
    if window is None:
        why = "its output is not on this machine" if not run["local"] else "no judged window"
        return f'<td class="cell-none" title="{esc(why)}">—</td>'
    f = (window.get("features") or {}).get(feature)
    if f is None:
        return '<td class="cell-none" title="not in this run">—</td>'
    metrics = ", ".join(f"{k} {v:.4g}" for k, v in (f.get("metrics") or {}).items() if isinstance(v, (int, float)))
    limits = ", ".join(f"{k} {v:.4g}" for k, v in (f.get("thresholds") or {}).items() if isinstance(v, (int, float)))
    word, kind, mark = ("drifted", "drift", "✗") if f.get("drifted") else ("ok", "ok", "✓")
    title = f"{feature} {word} in the window ending {window.get('end', '')}: {metrics or 'no metrics'}"
    if limits:
        title += f" (thresholds {limits})"
    return f'<td class="cell-{kind}" title="{esc(title)}"><span aria-hidden="true">{mark}</span> {word}</td>'


def drift_section(endpoint: str, found: dict[str, Any]) -> str:
    """Per endpoint: a features-by-executions heatmap, the latest violations, and links to each run's reports."""
    runs, features = found["runs"], found["features"]
    head = "".join(
        f'<th scope="col" title="{esc(when(r["execution"].get("ScheduledTime")))}">'
        f"{esc(_short_time(r['execution'].get('ScheduledTime')))}</th>"
        for r in runs
    )
    body = "".join(
        f'<tr><th scope="row">{esc(feature)}</th>' + "".join(_drift_cell(feature, r) for r in runs) + "</tr>"
        for feature in features
    )
    if body:
        heatmap = (
            '<p class="hint">The latest judged executions, oldest left: ✗ drifted, ✓ ok, — not judged; a cell\'s '
            "title holds the measured values and thresholds.</p>"
            f'<table class="heatmap"><caption>Drift per feature: {esc(endpoint)}</caption>'
            f'<thead><tr><th scope="col">Feature</th>{head}</tr></thead><tbody>{body}</tbody></table>'
        )
    else:
        heatmap = f'<p class="empty">Drift of {esc(endpoint)}: no judged window with a local output yet.</p>'
    latest = next((r for r in reversed(runs) if r["violations"]), None)
    violations = [
        (esc(v.get("feature_name")), esc(v.get("constraint_check_type")), esc(v.get("description")))
        for v in (latest["violations"] if latest else [])
    ]
    when_text = when(latest["execution"].get("ScheduledTime")) if latest else ""
    out = heatmap + table(
        f"Latest violations{' (execution scheduled ' + when_text + ')' if latest else ''}",
        ("Feature", "Check", "Description"),
        violations,
        "none.",
    )
    reports = [
        (
            esc(when(r["execution"].get("ScheduledTime"))),
            badge(r["execution"].get("MonitoringExecutionStatus")),
            " ".join(
                link(report_href(r["job"], name), text)
                for name, text, present in (
                    ("report.html", "HTML report", r["report"]),
                    ("constraint_violations.json", "violations (JSON)", r["local"]),
                    ("metrics.json", "metrics (JSON)", r["local"]),
                )
                if present
            )
            or "not on this machine",
        )
        for r in reversed(runs)
    ]
    return (
        f'<section aria-labelledby="d-{esc(endpoint)}"><h2 id="d-{esc(endpoint)}">Drift: {esc(endpoint)}</h2>'
        + out
        + table("Reports (sign in to open)", ("Scheduled", "Status", "Files"), reports)
        + "</section>"
    )


def quality_section(endpoint: str, found: dict[str, Any]) -> str:
    """Per endpoint: the problem type's two metrics per model-quality execution as a chart, the same numbers as a
    table (with the labelled rows and violations), and links to each run's files."""
    runs, names = found["runs"], tuple(found["metrics"])
    chart = found.get("chart")
    rows = []
    for r in reversed(runs):
        window = r["window"] or {}
        metrics = window.get("metrics") or {}
        values = [esc(f"{metrics[n]:.4g}") if isinstance(metrics.get(n), (int, float)) else "—" for n in names]
        files = " ".join(
            link(report_href(r["job"], name), text)
            for name, text, present in (
                ("report.html", "HTML report", r["report"]),
                ("quality_metrics.json", "metrics (JSON)", r["local"]),
                ("constraint_violations.json", "violations (JSON)", r["local"]),
            )
            if present
        )
        rows.append(
            (
                esc(when(r["execution"].get("ScheduledTime"))),
                badge(r["execution"].get("MonitoringExecutionStatus")),
                *values,
                esc(window.get("labelled", "—")),
                esc("; ".join(str(v.get("description", "")) for v in r["violations"]) or "none"),
                files or "not on this machine",
            )
        )
    out = f'<section aria-labelledby="q-{esc(endpoint)}"><h2 id="q-{esc(endpoint)}">Model quality: {esc(endpoint)}</h2>'
    if chart is not None and chart.data[0]:
        payload = json.dumps([chart.as_json()], separators=(",", ":"))
        out += (
            f'<p class="hint">{esc(found["problem_type"])}: {esc(" and ".join(names))} of the last judged window of '
            "each execution (from its quality_metrics.json), by scheduled time; the table below has the same "
            "numbers.</p>"
            f'<div class="charts" data-charts="{esc(payload)}"></div>'
        )
    else:
        out += f'<p class="empty">Model quality of {esc(endpoint)}: no judged window with a local output yet.</p>'
    out += table(
        "Model quality per execution (sign in to open the files)",
        ("Scheduled", "Status", *names, "Labelled rows", "Violations", "Files"),
        rows,
    )
    return out + "</section>"


def monitoring_body(found: dict[str, Any]) -> str:
    schedules = [
        (
            esc(s.get("MonitoringScheduleName")),
            esc(s.get("EndpointName", "")),
            esc(s.get("MonitoringType", "")),
            badge(s.get("MonitoringScheduleStatus")),
            esc(when(s.get("LastModifiedTime"))),
        )
        for s in found["schedules"]
    ]
    executions = [
        (
            esc(when(x.get("ScheduledTime"))),
            esc(x.get("MonitoringScheduleName")),
            esc(x.get("EndpointName", "")),
            badge(x.get("MonitoringExecutionStatus")),
            esc(x.get("FailureReason", "")),
            esc(x.get("ProcessingJobArn", "")),
        )
        for x in found["executions"]
    ]
    drift = "".join(drift_section(endpoint, runs) for endpoint, runs in found.get("drift", {}).items())
    drift += "".join(quality_section(endpoint, runs) for endpoint, runs in found.get("quality", {}).items())
    return (
        drift
        + table("Monitoring schedules", ("Schedule", "Endpoint", "Type", "Status", "Last modified"), schedules)
        + table(
            "Latest executions (CompletedWithViolations marks drift)",
            ("Scheduled", "Schedule", "Endpoint", "Status", "Failure reason", "Processing job"),
            executions,
        )
    )
