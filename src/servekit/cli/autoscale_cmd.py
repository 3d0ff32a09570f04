"""``servekit autoscale``: thin clients of ``servekit up``'s Application Auto Scaling API for endpoint variants.

- ``servekit autoscale NAME --variant V --min 1 --max 4 --target 100`` registers the variant as a scalable target
  and puts a target-tracking policy on ``SageMakerVariantInvocationsPerInstance`` (invocations per minute per
  instance), what the SageMaker console's "Configure auto scaling" does;
- ``servekit autoscale describe NAME``: the endpoint's scalable targets, policies and scheduled actions;
- ``servekit autoscale activities NAME``: its scaling activities, newest first;
- ``servekit autoscale off NAME --variant V``: deregisters the target (its policies and scheduled actions go too).

Signed with the home's admin key, errors as one line (``servekit: <Code>: <Message>``), ``--json`` for scripts,
as the rest of the hosting CLI (:mod:`servekit.cli.hosting_cmd`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from servekit.cli.hosting_cmd import (
    DEFAULT_URL,
    HomeOpt,
    JsonOpt,
    UrlOpt,
    _api_errors,
    _client,
    _console,
    _fail,
    _fields_table,
    _print_json,
    _rows_table,
)

NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
METRIC = "SageMakerVariantInvocationsPerInstance"
DEFAULT_POLICY = "servekit-invocations-target"


class _DefaultsToSet(TyperGroup):
    """``servekit autoscale NAME --variant V ...`` (a name first, not a subcommand) is ``autoscale set NAME ...``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: typer's click Context
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["set", *args]
        return super().parse_args(ctx, args)


autoscale_app = typer.Typer(
    cls=_DefaultsToSet,
    add_completion=False,
    no_args_is_help=True,
    help=(
        "Autoscaling of endpoint variants (Application Auto Scaling): servekit autoscale NAME --variant V --min 1 "
        "--max 4 --target 100; describe, activities, off; simulate (what-if on a traffic curve)."
    ),
)

NameArg = Annotated[str, typer.Argument(help="The endpoint's name.")]
VariantOpt = Annotated[str, typer.Option("--variant", help="The production variant (e.g. AllTraffic).")]


def _resource(name: str, variant: str) -> str:
    return f"endpoint/{name}/variant/{variant}"


def _ours(resource_id: str, name: str) -> bool:
    return resource_id.startswith(f"endpoint/{name}/variant/")


@autoscale_app.command("set")
def autoscale_set(
    name: NameArg,
    variant: VariantOpt,
    min_capacity: Annotated[int, typer.Option("--min", help="Fewest instances.", min=1)],
    max_capacity: Annotated[int, typer.Option("--max", help="Most instances.", min=1)],
    target: Annotated[
        float, typer.Option("--target", help="Invocations per minute per instance to hold (TargetValue).")
    ],
    scale_in_cooldown: Annotated[
        int, typer.Option("--scale-in-cooldown", help="Seconds after a scale-in before the next one.", min=0)
    ] = 300,
    scale_out_cooldown: Annotated[
        int, typer.Option("--scale-out-cooldown", help="Seconds after a scale-out before a further one.", min=0)
    ] = 300,
    disable_scale_in: Annotated[
        bool, typer.Option("--disable-scale-in", help="Never remove instances (only add them).")
    ] = False,
    policy_name: Annotated[str, typer.Option("--policy-name", help="The policy's name.")] = DEFAULT_POLICY,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Scale a variant between --min and --max instances to hold --target invocations per minute per instance."""
    if min_capacity > max_capacity:
        raise _fail(f"--min {min_capacity} is more than --max {max_capacity}", code=2)
    if not target > 0:
        raise _fail("--target must be greater than 0", code=2)
    aas = _client("application-autoscaling", url, home)
    resource = _resource(name, variant)
    key = {"ServiceNamespace": NAMESPACE, "ResourceId": resource, "ScalableDimension": DIMENSION}
    with _api_errors(url):
        registered = aas.register_scalable_target(MinCapacity=min_capacity, MaxCapacity=max_capacity, **key)
        policy = aas.put_scaling_policy(
            PolicyName=policy_name,
            PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration={
                "TargetValue": target,
                "PredefinedMetricSpecification": {"PredefinedMetricType": METRIC},
                "ScaleInCooldown": scale_in_cooldown,
                "ScaleOutCooldown": scale_out_cooldown,
                "DisableScaleIn": disable_scale_in,
            },
            **key,
        )
    if as_json:
        _print_json({"ScalableTargetARN": registered["ScalableTargetARN"], **policy})
        return
    typer.echo(
        f"autoscaling {resource}: {min_capacity}-{max_capacity} instances, {target:g} invocations per minute per "
        f"instance (policy {policy_name}; cooldowns out {scale_out_cooldown} s, in {scale_in_cooldown} s"
        f"{'; never scales in' if disable_scale_in else ''})"
    )


@autoscale_app.command("describe")
def autoscale_describe(
    name: NameArg,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show an endpoint's scalable targets (with each variant's instance count), policies and scheduled actions."""
    aas = _client("application-autoscaling", url, home)
    with _api_errors(url):
        targets = [
            t
            for t in aas.describe_scalable_targets(ServiceNamespace=NAMESPACE)["ScalableTargets"]
            if _ours(t["ResourceId"], name)
        ]
        policies = [
            p
            for p in aas.describe_scaling_policies(ServiceNamespace=NAMESPACE)["ScalingPolicies"]
            if _ours(p["ResourceId"], name)
        ]
        scheduled = [
            s
            for s in aas.describe_scheduled_actions(ServiceNamespace=NAMESPACE)["ScheduledActions"]
            if _ours(s["ResourceId"], name)
        ]
    counts = _instance_counts(name, url, home)
    if as_json:
        _print_json({"ScalableTargets": targets, "ScalingPolicies": policies, "ScheduledActions": scheduled})
        return
    if not targets:
        typer.echo(f"endpoint {name} has no autoscaled variant (servekit autoscale {name} --variant V ... adds one)")
        return
    rows = []
    for t in targets:
        variant = t["ResourceId"].rsplit("/", 1)[-1]
        suspended = [k.removesuffix("Suspended") for k, v in (t.get("SuspendedState") or {}).items() if v]
        rows.append({
            "Variant": variant, "Instances": counts.get(variant, "?"), "Min": t["MinCapacity"],
            "Max": t["MaxCapacity"], "Suspended": ", ".join(suspended) or "-",
        })  # fmt: skip
    out = _console()
    out.print(_rows_table(rows, [(k, k) for k in ("Variant", "Instances", "Min", "Max", "Suspended")]))
    for p in policies:
        out.print()
        out.print(_fields_table(_policy_summary(p)))
    if scheduled:
        out.print()
        sched_rows = [
            {
                "Name": s["ScheduledActionName"],
                "Variant": s["ResourceId"].rsplit("/", 1)[-1],
                "Schedule": f"{s['Schedule']} {s.get('Timezone') or 'UTC'}",
                "Min": (s.get("ScalableTargetAction") or {}).get("MinCapacity", "-"),
                "Max": (s.get("ScalableTargetAction") or {}).get("MaxCapacity", "-"),
            }
            for s in scheduled
        ]
        out.print(_rows_table(sched_rows, [(k, k) for k in ("Name", "Variant", "Schedule", "Min", "Max")]))


def _policy_summary(p: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "Policy": p["PolicyName"],
        "Variant": p["ResourceId"].rsplit("/", 1)[-1],
        "Type": p["PolicyType"],
    }
    tt = p.get("TargetTrackingScalingPolicyConfiguration")
    if tt:
        out["Target"] = f"{tt['TargetValue']:g} invocations per minute per instance"
        out["Cooldowns"] = f"out {tt.get('ScaleOutCooldown', 300)} s, in {tt.get('ScaleInCooldown', 300)} s"
        out["Scale in"] = "disabled" if tt.get("DisableScaleIn") else "enabled"
    step = p.get("StepScalingPolicyConfiguration")
    if step:
        out["Adjustment"] = step["AdjustmentType"]
        out["Steps"] = step["StepAdjustments"]
        out["Cooldown"] = f"{step.get('Cooldown', 300)} s"
    out["ARN"] = p["PolicyARN"]
    return out


def _instance_counts(name: str, url: str, home: Any) -> dict[str, Any]:
    """Each variant's current instance count, if the endpoint can be described (it may be gone)."""
    import botocore.exceptions as bx

    try:
        desc = _client("sagemaker", url, home).describe_endpoint(EndpointName=name)
    except (bx.ClientError, bx.BotoCoreError):
        return {}
    return {v["VariantName"]: v.get("CurrentInstanceCount", "?") for v in desc.get("ProductionVariants") or []}


@autoscale_app.command("activities")
def autoscale_activities(
    name: NameArg,
    variant: Annotated[str | None, typer.Option("--variant", help="Only this variant.")] = None,
    include_not_scaled: Annotated[
        bool, typer.Option("--include-not-scaled", help="Also the times an alarm fired but nothing changed.")
    ] = False,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List an endpoint's scaling activities, newest first: what changed, why, and whether it succeeded."""
    aas = _client("application-autoscaling", url, home)
    params: dict[str, Any] = {"ServiceNamespace": NAMESPACE, "IncludeNotScaledActivities": include_not_scaled}
    if variant is not None:
        params.update(ResourceId=_resource(name, variant), ScalableDimension=DIMENSION)
    with _api_errors(url):
        found = aas.describe_scaling_activities(**params)["ScalingActivities"]
    activities = [a for a in found if _ours(a["ResourceId"], name)]
    if as_json:
        _print_json({"ScalingActivities": activities})
        return
    if not activities:
        typer.echo(f"no scaling activities for endpoint {name}")
        return
    rows = [{**a, "Variant": a["ResourceId"].rsplit("/", 1)[-1]} for a in activities]
    columns = [
        ("Started", "StartTime"),
        ("Variant", "Variant"),
        ("Status", "StatusCode"),
        ("Description", "Description"),
        ("Cause", "Cause"),
        ("Message", "StatusMessage"),
    ]
    _console().print(_rows_table(rows, columns))


@autoscale_app.command("off")
def autoscale_off(
    name: NameArg,
    variant: VariantOpt,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
) -> None:
    """Stop autoscaling a variant: deregister it (its policies and scheduled actions go; its instances stay)."""
    aas = _client("application-autoscaling", url, home)
    with _api_errors(url):
        aas.deregister_scalable_target(
            ServiceNamespace=NAMESPACE, ResourceId=_resource(name, variant), ScalableDimension=DIMENSION
        )
    typer.echo(f"autoscaling of {_resource(name, variant)} is off; its instance count stays as it is")


# ---- servekit autoscale simulate: the what-if (servekit.services.autoscaling.simulate)
# ---------------------------------------
def _opt(*names: str, **kw: Any) -> Any:
    return typer.Option(*names, **kw)


def _traffic(
    traffic: str | None, shape: str | None, duration_s: float, low: float, high: float, from_endpoint: str | None,
    variant: str, hours: float, url: str, home: Any, step_s: int = 60,
) -> Any:  # fmt: skip
    """The curve from a file, a synthetic shape or an endpoint's CloudWatch Invocations (through the plane)."""
    from pathlib import Path

    from servekit.services.autoscaling import traffic as tr

    given = [x for x in (traffic, shape, from_endpoint) if x is not None]
    if len(given) != 1:
        raise _fail("give one of --traffic FILE, --shape SHAPE or --from-endpoint NAME", code=2)
    if traffic is not None:
        try:
            text = Path(traffic).read_text()
        except OSError as exc:
            raise _fail(f"cannot read the traffic curve {traffic}: {exc.strerror or exc}", code=2) from None
        return tr.parse_file(text, traffic)
    if shape is not None:
        return tr.shape(shape, duration_s, float(step_s), low, high)
    import time
    from datetime import UTC, datetime

    assert from_endpoint is not None
    cw = _client("cloudwatch", url, home)
    end = time.time()
    with _api_errors(url):
        found = cw.get_metric_statistics(
            Namespace="AWS/SageMaker", MetricName="Invocations",
            Dimensions=[{"Name": "EndpointName", "Value": from_endpoint}, {"Name": "VariantName", "Value": variant}],
            StartTime=datetime.fromtimestamp(end - hours * 3600, UTC), EndTime=datetime.fromtimestamp(end, UTC),
            Period=step_s, Statistics=["Sum"],
        )["Datapoints"]  # fmt: skip
    points = [(d["Timestamp"].timestamp(), float(d["Sum"])) for d in found]
    return tr.from_invocations(points, float(step_s), f"CloudWatch Invocations of {from_endpoint}/{variant}")


def _schedule(text: str) -> Any:
    """``EXPR=MIN``, ``EXPR=MIN:MAX`` or ``EXPR=:MAX`` as a scheduled action."""
    from servekit.services.autoscaling.sim_fleet import ScheduledSpec

    expr, sep, bounds = text.rpartition("=")
    lo, _, hi = bounds.partition(":")
    try:
        if not sep or not expr or not (lo or hi):
            raise ValueError
        return ScheduledSpec(f"schedule-{abs(hash(text)) % 10**6}", expr.strip(), int(lo) if lo else None,
                             int(hi) if hi else None)  # fmt: skip
    except ValueError:
        raise _fail(f"--schedule {text!r}: write EXPR=MIN, EXPR=MIN:MAX or EXPR=:MAX", code=2) from None


def _step_policy(path: str) -> Any:
    import json
    from pathlib import Path

    from servekit.services.autoscaling.sim_fleet import StepSpec

    try:
        doc = json.loads(Path(path).read_text())
        return StepSpec(str(doc.get("PolicyName") or Path(path).stem), doc["StepScalingPolicyConfiguration"],
                        doc["Alarm"])  # fmt: skip
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise _fail(
            f"--step-policy {path}: expected JSON with StepScalingPolicyConfiguration and Alarm ({exc})", code=2
        ) from None


@autoscale_app.command("simulate")
def autoscale_simulate(
    traffic: Annotated[str | None, _opt("--traffic", help="Curve file: CSV with header time_s,rps, or JSON.")] = None,
    shape: Annotated[str | None, _opt("--shape", help="Synthetic curve: steps, ramp, diurnal or spike.")] = None,
    duration_s: Annotated[float, _opt("--duration-s", help="Length of a --shape curve.")] = 3600.0,
    low: Annotated[float, _opt("--low", help="A --shape curve's low rate (rps).")] = 10.0,
    high: Annotated[float, _opt("--high", help="A --shape curve's high rate (rps).")] = 100.0,
    from_endpoint: Annotated[
        str | None, _opt("--from-endpoint", help="Replay this endpoint's CloudWatch Invocations history.")
    ] = None,
    variant: Annotated[str, _opt("--variant", help="With --from-endpoint: the variant.")] = "AllTraffic",
    hours: Annotated[float, _opt("--hours", help="With --from-endpoint: how far back (per --step-s).")] = 24.0,
    capacity_rps: Annotated[
        float | None, _opt("--capacity-rps", help="Requests/s one instance serves within the SLO (R_max).")
    ] = None,
    price_per_hour: Annotated[float | None, _opt("--price-per-hour", help="Price of one instance-hour.")] = None,
    instance_type: Annotated[
        str | None, _opt("--instance-type", help="Price from the instance-types table (or the report's type).")
    ] = None,
    report: Annotated[
        str | None,
        _opt(
            "--recommend-report",
            help="A servekit recommend recommendations.json: capacity, "
            "price, setup time and measured p99-vs-load curve.",
        ),
    ] = None,
    min_capacity: Annotated[int, _opt("--min", help="Fewest instances.")] = 1,
    max_capacity: Annotated[int, _opt("--max", help="Most instances.")] = 4,
    targets: Annotated[
        list[float] | None, _opt("--target-utilization", help="Target utilisation; repeat to compare.")
    ] = None,
    cooldown_s: Annotated[float, _opt("--cooldown-s", help="Both cooldowns (AAS default 300).")] = 300.0,
    out_cooldown: Annotated[float | None, _opt("--scale-out-cooldown-s", help="Scale-out cooldown.")] = None,
    in_cooldown: Annotated[float | None, _opt("--scale-in-cooldown-s", help="Scale-in cooldown.")] = None,
    disable_scale_in: Annotated[bool, _opt("--disable-scale-in", help="Never remove instances.")] = False,
    startup_s: Annotated[float | None, _opt("--startup-s", help="Start-up time of a new instance.")] = None,
    schedules: Annotated[
        list[str] | None, _opt("--schedule", help="Scheduled action EXPR=MIN[:MAX], e.g. 'cron(0 8 * * ? *)=4'.")
    ] = None,
    without_schedule: Annotated[
        bool, _opt("--compare-without-schedule", help="Also each scenario without the --schedule actions.")
    ] = False,
    step_policies: Annotated[
        list[str] | None, _opt("--step-policy", help="JSON: StepScalingPolicyConfiguration and its Alarm.")
    ] = None,
    modes: Annotated[
        list[str] | None,
        _opt(
            "--mode",
            help="formula or real (default: formula when --cooldown-s 0 and no "
            "--startup-s, else real); repeat to compare.",
        ),
    ] = None,
    step_s: Annotated[int, _opt("--step-s", help="Seconds per step (formula mode: also the alarm period).")] = 60,
    period_s: Annotated[int, _opt("--period-s", help="Real mode's alarm period (CloudWatch: 60).")] = 60,
    slo_ms: Annotated[float | None, _opt("--slo-ms", help="p99 to keep (default 100, or the report's).")] = None,
    base_p99_ms: Annotated[float, _opt("--base-p99-ms", help="Simple latency model: p99 when idle.")] = 10.0,
    max_queue_s: Annotated[float, _opt("--max-queue-s", help="Queue up to this much capacity; shed the rest.")] = 1.0,
    html: Annotated[str | None, _opt("--html", help="Also write an HTML report with an SVG chart here.")] = None,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What would the policy have done with this traffic? Replays a curve through the control plane's own scaling
    decisions (target tracking, step, scheduled; cooldowns, alarm periods, start-up) with per-step instances,
    utilisation, queue/shed, estimated p99 and cost."""
    from servekit.services.autoscaling.sim_fleet import Fleet, LatencyModel, Policy, SimError, fleet_from_recommendation
    from servekit.services.autoscaling.simulate import compare
    from servekit.services.autoscaling.traffic import TrafficError

    try:
        curve = _traffic(traffic, shape, duration_s, low, high, from_endpoint, variant, hours, url, home, step_s)
        given: dict[str, Any] = {"capacity_rps": capacity_rps, "price_per_hour": price_per_hour, "startup_s": startup_s,
                 "slo_ms": slo_ms, "max_queue_s": max_queue_s}  # fmt: skip
        if report is not None:
            fleet = fleet_from_recommendation(_read_json(report), instance_type, **given)
        else:
            if capacity_rps is None:
                raise SimError("give --capacity-rps (or --recommend-report)")
            if price_per_hour is None:
                price_per_hour = _price(instance_type)
            fleet = Fleet(
                capacity_rps,
                price_per_hour,
                instance_type,
                startup_s or 0.0,
                slo_ms or 100.0,
                max_queue_s,
                LatencyModel(base_ms=base_p99_ms),
            )
        auto = "formula" if cooldown_s == 0 and not fleet.startup_s else "real"
        sched = tuple(_schedule(s) for s in schedules or [])
        steps = tuple(_step_policy(p) for p in step_policies or [])
        outs = cooldown_s if out_cooldown is None else out_cooldown
        ins = cooldown_s if in_cooldown is None else in_cooldown
        policies = [
            Policy(min_capacity, max_capacity, t, scale_out_cooldown_s=outs, scale_in_cooldown_s=ins,
                   disable_scale_in=disable_scale_in, steps=steps, scheduled=sc, mode=m, period_s=period_s)
            for m in modes or [auto] for t in targets or [0.7] for sc in ([sched, ()] if without_schedule else [sched])
        ]  # fmt: skip
        reports = compare(curve, fleet, policies, step_s)
    except (SimError, TrafficError) as exc:
        raise _fail(str(exc), code=2) from None
    if html is not None:
        from pathlib import Path

        Path(html).write_text(_simulation_html(reports))
    if as_json:
        docs = [r.to_json() for r in reports]
        _print_json(docs[0] if len(docs) == 1 else {"scenarios": docs})
        return
    _print_simulation(reports)


def _read_json(path: str) -> Any:
    import json
    from pathlib import Path

    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot read {path}: {exc}", code=2) from None


def _price(instance_type: str | None) -> float:
    if instance_type is None:
        raise _fail("give --price-per-hour or --instance-type (its price from the instance-types table)", code=2)
    from servekit.services.hosting.instance_types import UnknownInstanceType, load_instance_types

    try:
        return load_instance_types()[instance_type].price_per_hour
    except UnknownInstanceType as exc:
        raise _fail(str(exc), code=2) from None


def _print_simulation(reports: list[Any]) -> None:
    out = _console()
    for r in reports:
        doc = r.to_json()
        out.print(f"[bold]{doc['policy']}[/bold] — traffic: {doc['traffic']}", highlight=False)
        rows = [{**s, "p99_ms": f"{s['p99_ms']:.1f}{' !' if s['over_slo'] else ''}",
                 "utilization": f"{s['utilization']:.0%}", "cumulative_cost": f"{s['cumulative_cost']:.4f}",
                 "formula_instances": "-" if s["formula_instances"] is None else s["formula_instances"]}
                for s in doc["steps"]]  # fmt: skip
        columns = [("time_s", "time_s"), ("rps", "rps"), ("desired", "desired"), ("serving", "serving"),
                   ("formula", "formula_instances"), ("util", "utilization"), ("queued", "queued"),
                   ("shed", "shed"), ("p99 ms", "p99_ms"), ("cost so far", "cumulative_cost")]  # fmt: skip
        out.print(_rows_table(rows, columns))
        per_1k = doc["cost_per_1k_requests"]
        typer.echo(
            f"cost per hour (last step): {doc['cost_per_hour']:.4f}; total cost: {doc['total_cost']:.4f}; "
            f"per 1,000 requests: {'-' if per_1k is None else f'{per_1k:.6f}'}; shed: {doc['requests_shed']:g}; "
            f"time over SLO: {doc['time_over_slo_s']:g} s"
        )
        for line in doc["explanation"]:
            typer.echo(f"  - {line}")
        typer.echo("")


def _simulation_html(reports: list[Any]) -> str:
    """One page: per scenario a chart of traffic and capacity (rps), one of instances, one of p99 (the recommend
    report's SVG helpers), and the totals side by side."""
    from html import escape

    from servekit.tools.recommend.svg import PALETTE, Series, line_chart

    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>servekit autoscale simulate</title></head>",
             "<body style='font-family:sans-serif'><h1>Autoscaling what-if</h1><table border='1' cellpadding='4'>",
             "<tr><th>scenario</th><th>cost/hour (last)</th><th>total cost</th><th>per 1k requests</th>"
             "<th>shed</th><th>time over SLO (s)</th></tr>"]  # fmt: skip
    docs = [r.to_json() for r in reports]
    for d in docs:
        parts.append(f"<tr><td>{escape(d['policy'])}</td><td>{d['cost_per_hour']:.4f}</td><td>{d['total_cost']:.4f}"
                     f"</td><td>{d['cost_per_1k_requests']}</td><td>{d['requests_shed']:g}</td>"
                     f"<td>{d['time_over_slo_s']:g}</td></tr>")  # fmt: skip
    parts.append("</table>")
    for d in docs:
        steps = d["steps"]
        cap = d["fleet"]["capacity_rps"]
        traffic = Series("traffic (rps)", [(s["time_s"], s["rps"]) for s in steps], PALETTE[0])
        capacity = Series("serving capacity (rps)", [(s["time_s"], s["serving"] * cap) for s in steps], PALETTE[2])
        desired = Series("desired", [(s["time_s"], s["desired"]) for s in steps], PALETTE[1])
        serving = Series("serving", [(s["time_s"], s["serving"]) for s in steps], PALETTE[2], dashed=True)
        charts = [line_chart("Traffic and capacity", [traffic, capacity], "time (s)", "requests/s"),
                  line_chart("Instances", [desired, serving], "time (s)", "instances")]  # fmt: skip
        if any(s["formula_instances"] is not None for s in steps):
            formula = [(s["time_s"], s["formula_instances"]) for s in steps if s["formula_instances"] is not None]
            charts[1] = line_chart("Instances", [desired, serving, Series("formula", formula, PALETTE[3], True)],
                                   "time (s)", "instances")  # fmt: skip
        p99 = Series("estimated p99 (ms)", [(s["time_s"], s["p99_ms"]) for s in steps], PALETTE[4],
                     hollow={i for i, s in enumerate(steps) if s["over_slo"]})  # fmt: skip
        charts.append(line_chart("Latency", [p99], "time (s)", "ms", hlines=[(d["fleet"]["slo_ms"], "SLO")]))
        notes = "".join(f"<li>{escape(x)}</li>" for x in d["explanation"])
        parts.append(f"<h2>{escape(d['policy'])}</h2><ul>{notes}</ul>{''.join(charts)}")
    parts.append("</body></html>")
    return "".join(parts)
