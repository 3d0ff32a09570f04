"""An endpoint's rollout, on its page: where a blue/green deployment stands, the alarms it watches and their
history, and the action that stops it (``POST /console/endpoints/{name}/rollback``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from servekit.console import data
from servekit.console.client import ApiFailure
from servekit.console.links import endpoint_href
from servekit.console.render import badge, csrf_field, esc, table, weight, when
from servekit.console.web import Console, back


def routes(console: Console) -> list[BaseRoute]:
    return [console.route("/console/endpoints/{name}/rollback", rollback, methods=["POST"])]


async def rollback(console: Console, request: Request) -> Response:
    """Stop a rollout the public way: SetAlarmState(ALARM) on one of the alarms that can guard it."""
    got = await console.acting(request)
    if isinstance(got, Response):
        return got
    s, form = got
    name, alarm = request.path_params["name"], form.get("alarm", "")
    href = endpoint_href(name)
    detail = await data.endpoint_detail(console.api, name)
    if detail is None:
        return back(href, f"No endpoint named {name}.")
    if not detail["endpoint"].get("PendingDeploymentSummary"):
        return back(href, "No rollout is in progress: nothing to stop.")
    if alarm not in rollback_alarms(detail):
        return back(href, f"{alarm!r} is not an alarm of this endpoint's rollout; pick one of its buttons.")
    try:
        await console.api(
            "cloudwatch",
            "SetAlarmState",
            {
                "AlarmName": alarm,
                "StateValue": "ALARM",
                "StateReason": f"Rollback requested in the servekit console by {s.access_key_id}",
            },
            s.access_key_id,
        )
    except ApiFailure as exc:
        return back(href, f"Not applied: {exc.message}")
    return back(href, f"{alarm} set to ALARM: a deployment watching it rolls back.")


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
    pending = e.get("PendingDeploymentSummary")
    parts = [_new_fleet(pending, now) if pending else '<p class="empty">No deployment in progress.</p>']
    parts.append(stop_rollout_form(detail, csrf))
    parts.append(_alarms_table(detail))
    history = [
        (esc(when(h.get("Timestamp"))), esc(h.get("AlarmName")), esc(h.get("HistorySummary")))
        for h in detail.get("alarm_history", [])
    ]
    parts.append(table("Alarm state changes (rollback triggers)", ("Time", "Alarm", "Change"), history, "none."))
    last = e.get("LastDeploymentConfig")
    if last:
        parts.append(_deployment_config(last, running=bool(pending)))
    return "".join(parts)


def _new_fleet(pending: dict[str, Any], now: float) -> str:
    """The deployment in progress: the config it deploys and, per variant of the new fleet, its phase, step, time
    in the phase, weight and instances."""
    rows = []
    for v in pending.get("ProductionVariants", []):
        status = (v.get("VariantStatus") or [{}])[0]
        started = status.get("StartTime")
        elapsed = f"{max(0.0, now - float(started)):.0f} s in this phase" if isinstance(started, (int, float)) else ""
        rows.append(
            (
                esc(v.get("VariantName")),
                badge(status.get("Status")),
                esc(status.get("StatusMessage")),
                esc(elapsed),
                f"{weight(v.get('CurrentWeight'))} of {weight(v.get('DesiredWeight'))}",
                f"{esc(v.get('CurrentInstanceCount', 0))}/{esc(v.get('DesiredInstanceCount', 0))}",
            )
        )
    deploying = (
        f"<p>Deploying <strong>{esc(pending.get('EndpointConfigName'))}</strong> since "
        f"{esc(when(pending.get('StartTime')))}.</p>"
    )
    return deploying + table(
        "New fleet",
        ("Variant", "Phase", "Step", "Bake timer", "Weight on new fleet", "Instances"),
        rows,
        "launching.",
    )


def _alarms_table(detail: dict[str, Any]) -> str:
    """The alarms of the endpoint (watched by its deployment or on its metrics) with their states, and the watched
    names no alarm exists for."""
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
        for name in _watched(detail["endpoint"])
        if name not in states
    ]
    return table(
        "Alarms the rollout watches (auto-rollback) and alarms on this endpoint",
        ("Alarm", "Metric", "State", "Watched by the deployment", "Reason"),
        alarms,
        "none.",
    )


def _deployment_config(last: dict[str, Any], running: bool) -> str:
    """The deployment configuration of the running rollout (or, with none running, of the last one)."""
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
    return (
        f"<h3>{'Deployment configuration of this rollout' if running else 'Last deployment configuration'}</h3>"
        '<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts) + "</dl>"
    )


def _watched(endpoint: dict[str, Any]) -> list[str]:
    deployment = endpoint.get("LastDeploymentConfig") or {}
    return [str(a["AlarmName"]) for a in (deployment.get("AutoRollbackConfiguration") or {}).get("Alarms") or []]
