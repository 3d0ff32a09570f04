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
        "--max 4 --target 100; describe, activities, off."
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
