"""An endpoint's page (``/console/endpoints/{name}``): status, variants (and the form that shifts their weights),
traffic and latency charts over the range picked, the rollout, autoscaling, the instances' newest log lines; its
JSON for live updates (all but the logs, which a plain link refreshes)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from servekit.console import data, logview
from servekit.console.charts import RANGES_S, charts_json
from servekit.console.client import ApiFailure
from servekit.console.links import endpoint_href
from servekit.console.pages.endpoints import instance_types, status_cell
from servekit.console.pages.rollout import rollout_section
from servekit.console.render import badge, csrf_field, esc, money, table, weight, when
from servekit.console.web import HEADERS, Console, back


def routes(console: Console) -> list[BaseRoute]:
    return [
        console.route("/console/endpoints/{name}", endpoint),
        console.route("/console/endpoints/{name}/data", endpoint_json),
        console.route("/console/endpoints/{name}/weights", weights, methods=["POST"]),
    ]


async def endpoint(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        detail = await data.endpoint_detail(console.api, name)
    except ApiFailure as exc:
        return console.failed(request, exc)
    if detail is None:
        body = f'<p role="alert" class="error">No endpoint named {esc(name)}.</p>'
        return console.html(request, "Not found", body, status=404)
    s = console.session(request)
    now = console.config.clock()
    sections = endpoint_sections(detail, s.csrf if s else None, now)
    range_s = console.range_of(request)
    logs = await logview.recent_logs(console.api, logview.endpoint_group(name))
    sections["logs"] = logview.logs_section(
        logs,
        f"{endpoint_href(name)}?range={range_s}&refresh={int(now * 1000)}#h-logs",
        "Each instance's output appears here a few seconds after it prints it.",
    )
    flash = request.query_params.get("flash", "")
    return console.html(request, f"Endpoint {name}", endpoint_body(name, sections, range_s, flash))


async def endpoint_json(console: Console, request: Request) -> Response:
    name = request.path_params["name"]
    detail = await data.endpoint_detail(console.api, name)
    if detail is None:
        return JSONResponse({"message": f"No endpoint named {name}."}, 404, headers=HEADERS)
    s = console.session(request)
    cfg = console.config
    now = cfg.clock()
    variants = [v["VariantName"] for v in detail["endpoint"].get("ProductionVariants", [])]
    period, charts, scaling = await data.endpoint_charts(
        console.api, name, variants, console.range_of(request), cfg.resolution_s, now, detail["activities"]
    )
    return JSONResponse(
        {
            "endpoint": detail["endpoint"],
            "html": endpoint_sections(detail, s.csrf if s else None, now),
            **charts_json(period, charts),
            "scaling_charts": [c.as_json() for c in scaling],
            "now": now,
        },
        headers=HEADERS,
    )


async def weights(console: Console, request: Request) -> Response:
    got = await console.acting(request)
    if isinstance(got, Response):
        return got
    s, form = got
    name = request.path_params["name"]
    href = endpoint_href(name)
    try:
        desired = [
            {"VariantName": k.removeprefix("weight:"), "DesiredWeight": float(v)}
            for k, v in form.items()
            if k.startswith("weight:")
        ]
    except ValueError:
        return back(href, "Weights must be numbers.")
    if not desired:
        return back(href, "No weights given.")
    try:
        await console.api(
            "sagemaker",
            "UpdateEndpointWeightsAndCapacities",
            {"EndpointName": name, "DesiredWeightsAndCapacities": desired},
            s.access_key_id,
        )
    except ApiFailure as exc:
        return back(href, f"Not applied: {exc.message}")
    return back(href, "Weights submitted: the endpoint is Updating.")


def status_section(detail: dict[str, Any]) -> str:
    e = detail["endpoint"]
    items = [
        ("Status", status_cell(e)),
        ("Endpoint config", esc(e.get("EndpointConfigName"))),
        ("Cost", f'<span data-field="cost">{money(e.get("ServekitCostPerHour"))}</span>'),
        ("Created", esc(when(e.get("CreationTime")))),
        ("Last modified", esc(when(e.get("LastModifiedTime")))),
    ]
    items += hosting_options(detail)
    for warning in e.get("ServekitWarnings", []):
        items.append(("Warning", esc(warning)))
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<dl class="facts">{rows}</dl>'


def hosting_options(detail: dict[str, Any]) -> list[tuple[str, str]]:
    """How the endpoint is hosted beyond instances: each serverless variant's ServerlessConfig (as DescribeEndpoint
    reports it, else as configured) and the config's AsyncInferenceConfig, as (term, escaped HTML) pairs."""
    items: list[tuple[str, str]] = []
    configured = {v["VariantName"]: v for v in (detail.get("config") or {}).get("ProductionVariants", [])}
    for v in detail["endpoint"].get("ProductionVariants", []):
        sc = v.get("CurrentServerlessConfig") or configured.get(v["VariantName"], {}).get("ServerlessConfig")
        if sc:
            parts = [f"{sc.get('MemorySizeInMB')} MB", f"max concurrency {sc.get('MaxConcurrency')}"]
            if sc.get("ProvisionedConcurrency"):
                parts.append(f"provisioned concurrency {sc['ProvisionedConcurrency']}")
            items.append((f"Serverless ({v['VariantName']})", esc(", ".join(parts))))
    ac = detail["endpoint"].get("AsyncInferenceConfig") or (detail.get("config") or {}).get("AsyncInferenceConfig")
    if ac:
        out = ac.get("OutputConfig") or {}
        per = (ac.get("ClientConfig") or {}).get("MaxConcurrentInvocationsPerInstance")
        lines = [f"answers to {out.get('S3OutputPath')}"]
        if out.get("S3FailurePath"):
            lines.append(f"failures to {out['S3FailurePath']}")
        lines.append(f"{per or 4} invocation(s) at a time per instance{'' if per else ' (default)'}")
        notes = out.get("NotificationConfig") or {}
        for key, what in (("SuccessTopic", "successes"), ("ErrorTopic", "errors")):
            if notes.get(key):
                lines.append(f"{what} notified to {notes[key]} (through servekit up --sns-webhook; SNS is not reached)")
        items.append(("Asynchronous", "<br>".join(esc(line) for line in lines)))
    return items


def variants_section(detail: dict[str, Any], csrf: str | None) -> str:
    e = detail["endpoint"]
    types = instance_types(detail["config"])
    variants = e.get("ProductionVariants", [])
    total = sum(float(v.get("CurrentWeight") or 0) for v in variants) or 1.0
    rows = [
        (
            esc(v["VariantName"]),
            f'<span data-field="weight">{weight(v.get("CurrentWeight"))}</span>',
            f"{float(v.get('CurrentWeight') or 0) / total:.0%}",
            weight(v.get("DesiredWeight")),
            f'<span data-field="instances">{esc(v.get("CurrentInstanceCount", 0))}</span>',
            esc(v.get("DesiredInstanceCount", "—")),
            esc(types.get(v["VariantName"], "—")),
        )
        for v in variants
    ]
    out = (
        table(
            "Production variants",
            ("Variant", "Weight", "Share", "Desired weight", "Instances", "Desired instances", "Instance type"),
            rows,
        )
        + components_table(detail.get("components") or [])
        + stages_table(variants)
    )
    if csrf is not None and variants:
        fields = "".join(
            f'<label>{esc(v["VariantName"])} <input type="number" min="0" step="any" required '
            f'name="weight:{esc(v["VariantName"])}" value="{weight(v.get("CurrentWeight"))}"></label> '
            for v in variants
        )
        out += (
            f'<form method="post" action="{esc(endpoint_href(e["EndpointName"]))}/weights" class="action">'
            f"{csrf_field(csrf)}<fieldset><legend>Shift variant weights "
            f"(UpdateEndpointWeightsAndCapacities)</legend>{fields}"
            '<button type="submit">Apply weights</button></fieldset></form>'
        )
    return out


def components_table(components: list[dict[str, Any]]) -> str:
    """An IC-based endpoint's inference components: model, what each copy reserves, copies, status and why."""
    if not components:
        return ""
    rows = []
    for c in components:
        spec = c.get("Specification") or {}
        need = spec.get("ComputeResourceRequirements") or {}
        runtime = c.get("RuntimeConfig") or {}
        rows.append(
            (
                esc(c.get("InferenceComponentName")),
                badge(c.get("InferenceComponentStatus")),
                esc(c.get("VariantName")),
                esc(spec.get("ModelName", "—")),
                esc(f"{need.get('NumberOfCpuCoresRequired', 1)} core(s), {need.get('MinMemoryRequiredInMb', '—')} MB"),
                f'<span data-field="copies">{esc(runtime.get("CurrentCopyCount", 0))}</span>',
                esc(runtime.get("DesiredCopyCount", "—")),
                esc(c.get("FailureReason", "")),
            )
        )
    return table(
        "Inference components",
        ("Component", "Status", "Variant", "Model", "Each copy needs", "Copies", "Desired copies", "Failure"),
        rows,
    )


def stages_table(variants: list[dict[str, Any]]) -> str:
    """A model-parallel variant's instances and their stage processes (DescribeEndpoint's
    ``ServekitPipelineStages``): which process holds which consecutive layers, and how many weight bytes each."""
    rows = [
        (
            esc(v["VariantName"]),
            esc(instance.get("InstanceId")),
            esc(stage.get("Stage")),
            esc(stage.get("InstanceId")),
            esc(f"{int(stage.get('WeightBytes') or 0) / 2**20:.1f} MiB"),
        )
        for v in variants
        for instance in v.get("ServekitPipelineStages") or []
        for stage in instance.get("Stages") or []
    ]
    if not rows:
        return ""
    return table("Pipeline stages", ("Variant", "Instance", "Stage", "Stage process", "Weights"), rows)


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
        + '<section aria-labelledby="h-logs"><h2 id="h-logs">Logs</h2>'
        + f"{sections.get('logs', '')}</section>"
        + "</div>"
    )


def _range_text(seconds: int) -> str:
    return f"last {seconds // 3600} h" if seconds >= 3600 else f"last {seconds // 60} min"
