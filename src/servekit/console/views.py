"""The console's pages as pure functions of API answers (and an injected ``now``): HTML fragments a page embeds
and its script swaps in when it polls, so the first render and every live update come from the same code."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from servekit.console.data import RANGES_S, Chart, package_data_url
from servekit.console.render import badge, csrf_field, esc, json_script, link, table, when


def _money(value: object) -> str:
    return f"${float(value):,.3f}/h" if isinstance(value, (int, float)) else "—"


def _weight(value: object) -> str:
    return f"{float(value):g}" if isinstance(value, (int, float)) else "—"


def endpoint_href(name: str) -> str:
    return "/console/endpoints/" + quote(name, safe="")


def instance_types(config: dict[str, Any]) -> dict[str, str]:
    return {v["VariantName"]: str(v.get("InstanceType", "serverless")) for v in config.get("ProductionVariants", [])}


def _status_cell(endpoint: dict[str, Any]) -> str:
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
            f"{_weight(v.get('CurrentWeight'))}, {esc(v.get('CurrentInstanceCount', 0))}/"
            f"{esc(v.get('DesiredInstanceCount', 0))} &times; {esc(types.get(v['VariantName'], '—'))}</li>"
            for v in e.get("ProductionVariants", [])
        )
        rollout = _rollout_line(e.get("PendingDeploymentSummary"))
        rows.append(
            (
                link(endpoint_href(e["EndpointName"]), e["EndpointName"]),
                _status_cell(e) + rollout,
                f'<ul class="variants">{variants}</ul>',
                f'<span data-field="cost">{_money(e.get("ServekitCostPerHour"))}</span>',
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


def status_section(detail: dict[str, Any]) -> str:
    e = detail["endpoint"]
    items = [
        ("Status", _status_cell(e)),
        ("Endpoint config", esc(e.get("EndpointConfigName"))),
        ("Cost", f'<span data-field="cost">{_money(e.get("ServekitCostPerHour"))}</span>'),
        ("Created", esc(when(e.get("CreationTime")))),
        ("Last modified", esc(when(e.get("LastModifiedTime")))),
    ]
    for warning in e.get("ServekitWarnings", []):
        items.append(("Warning", esc(warning)))
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<dl class="facts">{rows}</dl>'


def variants_section(detail: dict[str, Any], csrf: str | None) -> str:
    e = detail["endpoint"]
    types = instance_types(detail["config"])
    variants = e.get("ProductionVariants", [])
    total = sum(float(v.get("CurrentWeight") or 0) for v in variants) or 1.0
    rows = [
        (
            esc(v["VariantName"]),
            f'<span data-field="weight">{_weight(v.get("CurrentWeight"))}</span>',
            f"{float(v.get('CurrentWeight') or 0) / total:.0%}",
            _weight(v.get("DesiredWeight")),
            f'<span data-field="instances">{esc(v.get("CurrentInstanceCount", 0))}</span>',
            esc(v.get("DesiredInstanceCount", "—")),
            esc(types.get(v["VariantName"], "—")),
        )
        for v in variants
    ]
    out = table(
        "Production variants",
        ("Variant", "Weight", "Share", "Desired weight", "Instances", "Desired instances", "Instance type"),
        rows,
    )
    if csrf is not None and variants:
        fields = "".join(
            f'<label>{esc(v["VariantName"])} <input type="number" min="0" step="any" required '
            f'name="weight:{esc(v["VariantName"])}" value="{_weight(v.get("CurrentWeight"))}"></label> '
            for v in variants
        )
        out += (
            f'<form method="post" action="{esc(endpoint_href(e["EndpointName"]))}/weights" class="action">'
            f"{csrf_field(csrf)}<fieldset><legend>Shift variant weights "
            f"(UpdateEndpointWeightsAndCapacities)</legend>{fields}"
            '<button type="submit">Apply weights</button></fieldset></form>'
        )
    return out


def stop_rollout_form(detail: dict[str, Any], csrf: str | None) -> str:
    """The "stop this rollout" action: SageMaker has no StopDeployment, so the console sets one of the alarms that
    can guard the deployment to ALARM (CloudWatch SetAlarmState), which makes a deployment watching it roll back.
    Offered only while a deployment runs, only signed in, and only with alarms to set; otherwise it says why not."""
    e = detail["endpoint"]
    if not e.get("PendingDeploymentSummary"):
        return ""
    names = rollback_alarms(detail)
    if not names:
        return (
            '<p class="hint" data-field="stop-rollout">Stopping this rollout is unavailable: its deployment '
            "configuration names no existing alarm (SageMaker has no StopDeployment; a deployment rolls back when "
            "an alarm of its AutoRollbackConfiguration goes to ALARM).</p>"
        )
    if csrf is None:
        return (
            '<p class="hint" data-field="stop-rollout"><a href="/console/login">Sign in</a> to stop this rollout.</p>'
        )
    buttons = "".join(
        f'<button type="submit" name="alarm" value="{esc(n)}">Roll back: set {esc(n)} to ALARM</button> ' for n in names
    )
    return (
        f'<form method="post" action="{esc(endpoint_href(e["EndpointName"]))}/rollback" class="action">'
        f"{csrf_field(csrf)}<fieldset><legend>Stop this rollout (CloudWatch SetAlarmState)</legend>"
        '<p class="hint">These are the alarms the deployment watches (its AutoRollbackConfiguration); it rolls back '
        "when one is in ALARM. The alarm returns to its measured state at its next evaluation.</p>"
        f"{buttons}</fieldset></form>"
    )


def rollback_alarms(detail: dict[str, Any]) -> list[str]:
    """The alarms the running deployment watches: those its DeploymentConfig's AutoRollbackConfiguration names
    (DescribeEndpoint's LastDeploymentConfig, the running one's from the moment UpdateEndpoint accepted it) and
    that exist. Setting any other alarm would not stop it, so no other is offered."""
    return [str(a["AlarmName"]) for a in detail.get("alarms", []) if a.get("Watched")]


def rollout_section(detail: dict[str, Any], now: float, csrf: str | None = None) -> str:
    """Where a blue/green deployment stands: its step and time in it, the alarms it watches and their states,
    the alarms' state changes (the reasons for rollbacks), and the deployment configuration last used."""
    e = detail["endpoint"]
    parts: list[str] = []
    pending = e.get("PendingDeploymentSummary")
    if pending:
        rows = []
        for v in pending.get("ProductionVariants", []):
            status = (v.get("VariantStatus") or [{}])[0]
            started = status.get("StartTime")
            elapsed = (
                f"{max(0.0, now - float(started)):.0f} s in this phase" if isinstance(started, (int, float)) else ""
            )
            rows.append(
                (
                    esc(v.get("VariantName")),
                    badge(status.get("Status")),
                    esc(status.get("StatusMessage")),
                    esc(elapsed),
                    f"{_weight(v.get('CurrentWeight'))} of {_weight(v.get('DesiredWeight'))}",
                    f"{esc(v.get('CurrentInstanceCount', 0))}/{esc(v.get('DesiredInstanceCount', 0))}",
                )
            )
        parts.append(
            f"<p>Deploying <strong>{esc(pending.get('EndpointConfigName'))}</strong> since "
            f"{esc(when(pending.get('StartTime')))}.</p>"
        )
        parts.append(
            table(
                "New fleet",
                ("Variant", "Phase", "Step", "Bake timer", "Weight on new fleet", "Instances"),
                rows,
                "launching.",
            )
        )
    else:
        parts.append('<p class="empty">No deployment in progress.</p>')
    parts.append(stop_rollout_form(detail, csrf))
    states = {a["AlarmName"]: a for a in detail.get("alarms", [])}
    alarms = [
        (
            esc(a["AlarmName"]),
            esc(a.get("MetricName", "")),
            badge(a.get("StateValue")),
            "yes" if a.get("Watched") else "no (on this endpoint's metrics)",
            esc(a.get("StateReason", "")),
        )
        for a in detail.get("alarms", [])
    ]
    alarms += [
        (esc(name), "", badge("missing"), "yes", "No such alarm: the deployment cannot roll back on it.")
        for name in _watched(e)
        if name not in states
    ]
    parts.append(
        table(
            "Alarms the rollout watches (auto-rollback) and alarms on this endpoint",
            ("Alarm", "Metric", "State", "Watched by the deployment", "Reason"),
            alarms,
            "none.",
        )
    )
    history = [
        (esc(when(h.get("Timestamp"))), esc(h.get("AlarmName")), esc(h.get("HistorySummary")))
        for h in detail.get("alarm_history", [])
    ]
    parts.append(table("Alarm state changes (rollback triggers)", ("Time", "Alarm", "Change"), history, "none."))
    last = e.get("LastDeploymentConfig")
    if last:
        routing = (last.get("BlueGreenUpdatePolicy") or {}).get("TrafficRoutingConfiguration") or {}
        size = routing.get("CanarySize") or routing.get("LinearStepSize") or {}
        facts = [
            ("Type", routing.get("Type", "rolling" if last.get("RollingUpdatePolicy") else "—")),
            ("Step size", f"{size.get('Value')} {size.get('Type', '')}" if size else "—"),
            ("Wait per step", f"{routing.get('WaitIntervalInSeconds', '—')} s"),
            (
                "Termination wait",
                f"{(last.get('BlueGreenUpdatePolicy') or {}).get('TerminationWaitInSeconds', '—')} s",
            ),
        ]
        parts.append(
            f"<h3>{'Deployment configuration of this rollout' if pending else 'Last deployment configuration'}</h3>"
            '<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts) + "</dl>"
        )
    return "".join(parts)


def _watched(endpoint: dict[str, Any]) -> list[str]:
    deployment = endpoint.get("LastDeploymentConfig") or {}
    return [str(a["AlarmName"]) for a in (deployment.get("AutoRollbackConfiguration") or {}).get("Alarms") or []]


def autoscaling_section(detail: dict[str, Any]) -> str:
    current = {v["VariantName"]: v for v in detail["endpoint"].get("ProductionVariants", [])}
    rows = []
    for t in detail.get("targets", []):
        variant = str(t["ResourceId"]).rsplit("/", 1)[-1]
        v = current.get(variant, {})
        rows.append(
            (
                esc(variant),
                esc(t.get("MinCapacity")),
                esc(t.get("MaxCapacity")),
                esc(v.get("DesiredInstanceCount", "—")),
                esc(v.get("CurrentInstanceCount", "—")),
            )
        )
    out = table(
        "Scalable targets", ("Variant", "Min", "Max", "Desired", "Current"), rows, "not registered for autoscaling."
    )
    acts = [
        (esc(when(a.get("StartTime"))), badge(a.get("StatusCode")), esc(a.get("Description")), esc(a.get("Cause")))
        for a in detail.get("activities", [])
    ]
    return out + table("Scaling activities", ("Started", "Status", "Description", "Cause"), acts, "none.")


def endpoint_sections(detail: dict[str, Any], csrf: str | None, now: float) -> dict[str, str]:
    return {
        "status": status_section(detail),
        "variants": variants_section(detail, csrf),
        "rollout": rollout_section(detail, now, csrf),
        "autoscaling": autoscaling_section(detail),
    }


def endpoint_body(name: str, sections: dict[str, str], range_s: int, flash: str = "") -> str:
    options = "".join(
        f'<option value="{r}"{" selected" if r == range_s else ""}>{_range_text(r)}</option>' for r in RANGES_S
    )
    src = f"{endpoint_href(name)}/data"

    def section(key: str, title: str) -> str:
        return (
            f'<section aria-labelledby="h-{key}"><h2 id="h-{key}">{esc(title)}</h2>'
            f'<div data-live="{key}" aria-live="polite">{sections[key]}</div></section>'
        )

    return (
        (f'<p role="status" class="flash">{esc(flash)}</p>' if flash else "")
        + f'<div data-endpoint="{esc(name)}" data-src="{esc(src)}">'
        + section("status", "Status")
        + section("variants", "Variants")
        + '<section aria-labelledby="h-traffic"><h2 id="h-traffic">Traffic and latency</h2>'
        + f'<label for="range">Range</label> <select id="range" name="range">{options}</select> '
        + '<span class="hint" data-field="updated" aria-live="off"></span>'
        + '<div class="charts" id="charts"></div></section>'
        + section("rollout", "Rollout")
        + '<section aria-labelledby="h-autoscaling"><h2 id="h-autoscaling">Autoscaling</h2>'
        + '<p class="hint">Desired and current instances per variant (sampled each metrics period from '
        + "DescribeEndpoint); dashed lines mark scaling activities, listed in the table below.</p>"
        + '<div class="charts" id="scaling-charts"></div>'
        + f'<div data-live="autoscaling" aria-live="polite">{sections["autoscaling"]}</div></section>'
        + "</div>"
    )


def _range_text(seconds: int) -> str:
    return f"last {seconds // 3600} h" if seconds >= 3600 else f"last {seconds // 60} min"


def charts_json(period: int, charts: Sequence[Chart]) -> dict[str, Any]:
    return {"period": period, "charts": [c.as_json() for c in charts]}


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
                        "/console/registry/package?arn=" + quote(p["ModelPackageArn"], safe=""),
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


def report_href(job: str, file: str) -> str:
    return f"/console/monitoring/report?job={quote(job, safe='')}&file={quote(file, safe='')}"


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


def monitoring_body(data: dict[str, Any]) -> str:
    schedules = [
        (
            esc(s.get("MonitoringScheduleName")),
            esc(s.get("EndpointName", "")),
            esc(s.get("MonitoringType", "")),
            badge(s.get("MonitoringScheduleStatus")),
            esc(when(s.get("LastModifiedTime"))),
        )
        for s in data["schedules"]
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
        for x in data["executions"]
    ]
    drift = "".join(drift_section(endpoint, found) for endpoint, found in data.get("drift", {}).items())
    drift += "".join(quality_section(endpoint, found) for endpoint, found in data.get("quality", {}).items())
    return (
        drift
        + table("Monitoring schedules", ("Schedule", "Endpoint", "Type", "Status", "Last modified"), schedules)
        + table(
            "Latest executions (CompletedWithViolations marks drift)",
            ("Scheduled", "Schedule", "Endpoint", "Status", "Failure reason", "Processing job"),
            executions,
        )
    )


def _progress(done: int, total: int, label: str) -> str:
    """A native progress bar (announced by screen readers) with its numbers as text beside it."""
    if total <= 0:
        return '<span class="hint">counting objects…</span>'
    return (
        f'<progress max="{total}" value="{min(done, total)}" aria-label="{esc(label)}"></progress> '
        f"{esc(done)} / {esc(total)}"
    )


def transform_table(jobs: Sequence[dict[str, Any]]) -> str:
    """Transform jobs: status, objects done of total, records and record errors, times, the failure reason."""
    rows = []
    for j in jobs:
        progress = j.get("ServekitProgress") or {}
        total, done = int(progress.get("ObjectsTotal") or 0), int(progress.get("ObjectsDone") or 0)
        failed = int(progress.get("ObjectsFailed") or 0)
        status = badge(j.get("TransformJobStatus"))
        own = j.get("ServekitStatus")
        if own and own != j.get("TransformJobStatus"):
            status += f'<div class="reason">servekit: {esc(own)}</div>'
        name = str(j.get("TransformJobName"))
        objects = _progress(done, total, f"Objects done of {name}")
        if failed:
            objects += f'<div class="reason">{esc(failed)} failed</div>'
        rows.append(
            (
                f'<span data-job="{esc(name)}">{esc(name)}</span>',
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


def execution_href(arn: str) -> str:
    return "/console/pipelines/execution?arn=" + quote(arn, safe="")


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
            esc(s.get("FailureReason", "")),
        )
        for s in found["steps"]
    ]
    return (
        '<dl class="facts">'
        + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts)
        + "</dl>"
        + table(
            "Steps (in the order they started)",
            ("Step", "Status", "Started", "Ended", "Took", "Attempts", "Cache", "Failure reason"),
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


def login_body(token: str, error: str = "", next_path: str = "/console/") -> str:
    err = f'<p role="alert" class="error">{esc(error)}</p>' if error else ""
    return (
        f"{err}<p>Actions (approving a model package, shifting weights) need an admin access key of this servekit "
        "home (its <code>credentials.json</code>). Viewing needs none.</p>"
        '<form method="post" action="/console/login" class="login">'
        f'<input type="hidden" name="csrf" value="{esc(token)}">'
        f'<input type="hidden" name="next" value="{esc(next_path)}">'
        '<label for="key">Access key id</label><input id="key" name="access_key_id" autocomplete="username" required>'
        '<label for="secret">Secret access key</label>'
        '<input id="secret" name="secret_access_key" type="password" autocomplete="current-password" required>'
        '<button type="submit">Sign in</button></form>'
    )


def charts_script(data: dict[str, Any]) -> str:
    return json_script("initial-charts", data)
