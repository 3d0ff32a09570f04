"""Thin clients of ``servekit up``'s SageMaker API: ``servekit deploy``, ``servekit endpoint list|describe|delete``,
``servekit model list|describe``, and ``servekit keys list|create`` (the home's access keys).

Every API call is signed (SigV4) with the home's admin key through :func:`servekit.aws.client`, the same
botocore client boto3 returns. An error the API answers prints one line, ``servekit: <Code>: <Message>``, and
exits 1; bad flags exit 2. Tables by default, ``--json`` for scripts (the API's own shapes, times in ISO 8601).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from servekit.cli.api_client import DEFAULT_URL as DEFAULT_URL  # re-exported for the other API commands
from servekit.cli.api_client import REGION as REGION
from servekit.cli.api_client import URL_ENV as URL_ENV
from servekit.cli.api_client import api_errors, client, credentials, fail, home_dir

UrlOpt = Annotated[
    str,
    typer.Option("--url", envvar=URL_ENV, show_envvar=False, help=f"servekit up's address (or ${URL_ENV})."),
]
HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", help="servekit home with the keys (default $SERVEKIT_HOME or ./.servekit)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (the API's shapes) instead of a table.")]

endpoint_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Endpoints of a running servekit up: list, describe, scale, delete.",
)
keys_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Access keys of a servekit home (SigV4): list them, create an admin or invoke-only key.",
)


class KeyScope(StrEnum):
    invoke = "invoke"
    admin = "admin"


# ---- plumbing (shared with the other API commands: servekit.cli.api_client) ------------------------------------
_home = home_dir
_fail = fail
_credentials = credentials
_client = client
_api_errors = api_errors


def _plain(value: Any) -> Any:
    """A response as JSON-ready data: datetimes in ISO 8601, no ResponseMetadata."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "ResponseMetadata"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(_plain(value), indent=2))


def _console() -> Any:
    from rich.console import Console

    out = Console()
    return out if out.is_terminal else Console(width=160)


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


def _cell(value: Any) -> str:
    if isinstance(value, datetime):
        return _when(value)
    if isinstance(value, dict | list):
        return json.dumps(_plain(value))
    return str(value)


def _fields_table(record: dict[str, Any], skip: tuple[str, ...] = ()) -> Any:
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for key, value in record.items():
        if key in skip or key == "ResponseMetadata":
            continue
        table.add_row(key, _cell(value))
    return table


def _rows_table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> Any:
    from rich.table import Table

    table = Table(show_edge=False)
    for title, _ in columns:
        table.add_column(title)
    for row in rows:
        table.add_row(*(_cell(row.get(key, "")) for _, key in columns))
    return table


def _all_pages(sm: Any, operation: str, key: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in sm.get_paginator(operation).paginate(**{k: v for k, v in params.items() if v is not None}):
        items.extend(page.get(key, []))
    return items


# ---- servekit endpoint ---------------------------------------------------------------------------------------------
@endpoint_app.command("list")
def endpoint_list(
    name_contains: Annotated[str | None, typer.Option("--name-contains", help="Only names with this.")] = None,
    status: Annotated[str | None, typer.Option("--status", help="Only endpoints in this status.")] = None,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the endpoints (newest first) with their status."""
    sm = _client("sagemaker", url, home)
    with _api_errors(url):
        endpoints = _all_pages(sm, "list_endpoints", "Endpoints", NameContains=name_contains, StatusEquals=status)
    if as_json:
        _print_json({"Endpoints": endpoints})
        return
    if not endpoints:
        typer.echo("no endpoints (servekit deploy MODEL_DIR --name NAME creates one)")
        return
    columns = [
        ("Name", "EndpointName"),
        ("Status", "EndpointStatus"),
        ("Created", "CreationTime"),
        ("Last modified", "LastModifiedTime"),
    ]
    _console().print(_rows_table(endpoints, columns))


@endpoint_app.command("describe")
def endpoint_describe(
    name: Annotated[str, typer.Argument(help="The endpoint's name.")],
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show an endpoint: status, failure reason, config, and each variant's weights and instance counts."""
    sm = _client("sagemaker", url, home)
    with _api_errors(url):
        desc = sm.describe_endpoint(EndpointName=name)
    if as_json:
        _print_json(desc)
        return
    out = _console()
    out.print(_fields_table(desc, skip=("ProductionVariants", "ServekitModelCache")))
    cache = desc.get("ServekitModelCache") or []
    if cache:
        out.print()
        out.print(
            _rows_table(
                cache,
                [("Target model", "TargetModel"), ("Hits", "Hits"), ("Misses", "Misses"), ("Hit ratio", "HitRatio")],
            )
        )
    variants = desc.get("ProductionVariants") or []
    if variants:
        columns = [
            ("Variant", "VariantName"),
            ("Weight", "CurrentWeight"),
            ("Desired weight", "DesiredWeight"),
            ("Instances", "CurrentInstanceCount"),
            ("Desired instances", "DesiredInstanceCount"),
        ]
        out.print()
        out.print(_rows_table(variants, columns))


@endpoint_app.command("scale")
def endpoint_scale(
    name: Annotated[str, typer.Argument(help="The endpoint's name.")],
    variant: Annotated[str, typer.Option("--variant", help="The production variant to change.")],
    count: Annotated[int | None, typer.Option("--count", help="Its new instance count.", min=1)] = None,
    weight: Annotated[float | None, typer.Option("--weight", help="Its new traffic weight.", min=0.0)] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for InService.")] = True,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a variant's instance count and/or weight in place (UpdateEndpointWeightsAndCapacities)."""
    if count is None and weight is None:
        raise _fail("give --count, --weight or both", code=2)
    change: dict[str, Any] = {"VariantName": variant}
    if count is not None:
        change["DesiredInstanceCount"] = count
    if weight is not None:
        change["DesiredWeight"] = weight
    sm = _client("sagemaker", url, home)
    with _api_errors(url):
        sm.update_endpoint_weights_and_capacities(EndpointName=name, DesiredWeightsAndCapacities=[change])
        if not wait:
            typer.echo(f"endpoint {name} is Updating; follow it with: servekit endpoint describe {name}")
            return
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 900})
        desc = sm.describe_endpoint(EndpointName=name)
    [now] = [v for v in desc.get("ProductionVariants") or [] if v["VariantName"] == variant] or [{}]
    if as_json:
        _print_json(now)
        return
    if count is not None and now.get("CurrentInstanceCount") != count:
        raise _fail(
            f"endpoint {name} is InService but variant {variant} has {now.get('CurrentInstanceCount')} of {count} "
            "instances serving (servekit up's log says why)"
        )
    typer.echo(
        f"endpoint {name} variant {variant}: {now.get('CurrentInstanceCount')} instance(s), "
        f"weight {now.get('CurrentWeight')}"
    )


@endpoint_app.command("delete")
def endpoint_delete(
    name: Annotated[str, typer.Argument(help="The endpoint's name.")],
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until it is gone.")] = True,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
) -> None:
    """Delete an endpoint and stop its instances (its endpoint config and models stay)."""
    sm = _client("sagemaker", url, home)
    with _api_errors(url):
        sm.delete_endpoint(EndpointName=name)
        if wait:
            sm.get_waiter("endpoint_deleted").wait(EndpointName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 600})
    typer.echo(f"deleted endpoint {name}" if wait else f"deleting endpoint {name}")


@endpoint_app.command("shadow-report")
def endpoint_shadow_report(
    name: Annotated[str, typer.Argument(help="The endpoint's name.")],
    variant: Annotated[str | None, typer.Option("--variant", help="Only this shadow variant.")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare an endpoint's shadow variant with production on the requests copied to it: latency p50/p99 of both,
    shadow errors, label agreement and numeric differences (read from the home's shadow records)."""
    from servekit.gateway.shadow import read_records, summarise

    directory = _home(home) / "shadow"
    base = directory / name
    variants = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    if variant is not None:
        variants = [v for v in variants if v == variant]
    if not variants:
        raise _fail(f"no shadow records for endpoint {name}{f' variant {variant}' if variant else ''} in {directory}")
    reports = {v: summarise(read_records(directory, name, v)) for v in variants}
    if as_json:
        _print_json(reports)
        return
    for v, r in reports.items():
        lat, out = r["latency_ms"], r["outputs"]

        def ms(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f} ms"

        def num(x: float | None, fmt: str = "{:.6g}") -> str:
            return "-" if x is None else fmt.format(x)

        typer.echo(f"shadow variant {v} of endpoint {name}: {r['requests']} requests copied")
        typer.echo(f"  latency p50: production {ms(lat['production']['p50'])}, shadow {ms(lat['shadow']['p50'])}")
        typer.echo(f"  latency p99: production {ms(lat['production']['p99'])}, shadow {ms(lat['shadow']['p99'])}")
        typer.echo(f"  shadow errors: {r['shadow_errors']} (production errors: {r['production_errors']})")
        typer.echo(
            f"  outputs compared: {out['compared']}, label agreement {num(out['label_agreement'], '{:.1%}')}, "
            f"max abs diff {num(out['max_abs_diff'])}, mean abs diff {num(out['mean_abs_diff'])}, "
            f"different shape {out['different_shape']}"
        )


@endpoint_app.command("update")
def endpoint_update(
    name: Annotated[str, typer.Argument(help="The endpoint's name.")],
    model_dir: Annotated[
        str | None,
        typer.Option(
            "--model-dir", help="Deploy this model (directory, file:// or s3:// URL) on the current variants."
        ),
    ] = None,
    config: Annotated[str | None, typer.Option("--config", help="Deploy this existing endpoint config.")] = None,
    canary: Annotated[float | None, typer.Option("--canary", help="Canary: this % of traffic first.")] = None,
    linear: Annotated[float | None, typer.Option("--linear", help="Linear: this % of traffic per step.")] = None,
    steps: Annotated[
        str | None, typer.Option("--steps", help='Traffic % per step, e.g. "5,20,50,100" (needs --model-dir).')
    ] = None,
    wait_interval: Annotated[int, typer.Option("--wait-interval", help="Seconds each step bakes.", min=0)] = 60,
    bake: Annotated[int, typer.Option("--bake", help="Final bake with all traffic (TerminationWait).", min=0)] = 0,
    alarms: Annotated[
        list[str] | None, typer.Option("--alarm", help="Roll back when this CloudWatch alarm fires (repeatable).")
    ] = None,
    max_time: Annotated[
        int | None, typer.Option("--max-time", help="MaximumExecutionTimeoutInSeconds (600-28800).")
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow the rollout to its end.")] = True,
) -> None:
    """Roll a new model or endpoint config out to a live endpoint: all at once, canary, linear or a list of traffic
    steps, each baked while the named alarms are watched; an alarm rolls everything back (UpdateEndpoint with a
    DeploymentConfig). Exits 1 when the rollout was rolled back."""
    import time
    from datetime import UTC
    from datetime import datetime as dt

    from servekit.services.hosting.api import STEPS_TAG

    if (model_dir is None) == (config is None):
        raise _fail("give one of --model-dir (a new model) or --config (an existing endpoint config)", code=2)
    if sum(x is not None for x in (canary, linear, steps)) > 1:
        raise _fail("--canary, --linear and --steps are alternatives: give one", code=2)
    if steps is not None and model_dir is None:
        raise _fail("--steps needs --model-dir (the steps travel as a tag of the endpoint config it creates)", code=2)
    routing: dict[str, Any] = {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": wait_interval}
    if canary is not None:
        size = {"Type": "CAPACITY_PERCENT", "Value": round(canary)}
        routing = {"Type": "CANARY", "WaitIntervalInSeconds": wait_interval, "CanarySize": size}
    elif linear is not None:
        size = {"Type": "CAPACITY_PERCENT", "Value": round(linear)}
        routing = {"Type": "LINEAR", "WaitIntervalInSeconds": wait_interval, "LinearStepSize": size}
    blue_green: dict[str, Any] = {"TrafficRoutingConfiguration": routing, "TerminationWaitInSeconds": bake}
    if max_time is not None:
        blue_green["MaximumExecutionTimeoutInSeconds"] = max_time
    deployment: dict[str, Any] = {"BlueGreenUpdatePolicy": blue_green}
    if alarms:
        deployment["AutoRollbackConfiguration"] = {"Alarms": [{"AlarmName": a} for a in alarms]}

    sm = _client("sagemaker", url, home)
    with _api_errors(url):
        live = sm.describe_endpoint(EndpointName=name)
        if model_dir is not None:
            if "://" in model_dir:
                data_url = model_dir
            else:
                path = Path(model_dir).expanduser().resolve()
                if not path.is_dir():
                    raise _fail(f"{model_dir} is not a directory", code=2)
                data_url = str(path)
            stamp = dt.now(UTC).strftime("%Y%m%d%H%M%S")
            model, config = f"{name}-{stamp}", f"{name}-config-{stamp}"
            current = sm.describe_endpoint_config(EndpointConfigName=live["EndpointConfigName"])
            sm.create_model(ModelName=model, PrimaryContainer={"Image": "servekit", "ModelDataUrl": data_url})
            variants = [
                {
                    k: v[k]
                    for k in ("VariantName", "InitialInstanceCount", "InstanceType", "InitialVariantWeight")
                    if k in v
                }
                | {"ModelName": model}
                for v in current["ProductionVariants"]
            ]
            # tag values allow no commas: "5,20,50,100" travels as "5 20 50 100"
            tag = " ".join(x for x in steps.replace(",", " ").split()) if steps else ""
            extra: dict[str, Any] = {"Tags": [{"Key": STEPS_TAG, "Value": tag}]} if tag else {}
            if current.get("DataCaptureConfig"):
                extra["DataCaptureConfig"] = current["DataCaptureConfig"]
            sm.create_endpoint_config(EndpointConfigName=config, ProductionVariants=variants, **extra)
            typer.echo(f"created model {model} and endpoint config {config}", err=True)
        assert config is not None
        sm.update_endpoint(EndpointName=name, EndpointConfigName=config, DeploymentConfig=deployment)
    typer.echo(f"updating endpoint {name} to {config}", err=True)
    if not wait:
        return
    last = ""
    with _api_errors(url):
        while True:
            desc = sm.describe_endpoint(EndpointName=name)
            status = desc["EndpointStatus"]
            pending = desc.get("PendingDeploymentSummary", {}).get("ProductionVariants", [])
            message = next((s.get("StatusMessage", "") for v in pending for s in v.get("VariantStatus", [])), "")
            line = f"{status}: {message}" if message else status
            if line != last:
                typer.echo(line, err=True)
                last = line
            if status not in ("Updating", "RollingBack"):
                break
            time.sleep(0.5)  # following another process's progress
    if desc.get("EndpointConfigName") == config and status == "InService":
        typer.echo(f"endpoint {name} now runs {config}")
        return
    raise _fail(f"endpoint {name} stayed on {desc.get('EndpointConfigName')}: {desc.get('FailureReason', status)}")


# ---- servekit model (list, describe: registered on main's model group) ---------------------------------------------
def model_list(
    name_contains: Annotated[str | None, typer.Option("--name-contains", help="Only names with this.")] = None,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the models created in servekit up (CreateModel), newest first."""
    sm = _client("sagemaker", url, home)
    with _api_errors(url):
        models = _all_pages(sm, "list_models", "Models", NameContains=name_contains)
    if as_json:
        _print_json({"Models": models})
        return
    if not models:
        typer.echo("no models (servekit deploy MODEL_DIR --name NAME creates one)")
        return
    _console().print(_rows_table(models, [("Name", "ModelName"), ("Created", "CreationTime"), ("ARN", "ModelArn")]))


def model_describe(
    name: Annotated[str, typer.Argument(help="The model's name (CreateModel's ModelName).")],
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a model created in servekit up: its container (ModelDataUrl, environment) and ARN."""
    sm = _client("sagemaker", url, home)
    with _api_errors(url):
        desc = sm.describe_model(ModelName=name)
    if as_json:
        _print_json(desc)
        return
    record = dict(desc)
    container = record.pop("PrimaryContainer", None) or (record.pop("Containers", None) or [None])[0]
    if isinstance(container, dict):
        record.update({f"Container.{k}": v for k, v in container.items()})
    _console().print(_fields_table(record))


# ---- servekit deploy -----------------------------------------------------------------------------------------------
def deploy(
    model_dir: Annotated[str, typer.Argument(help="Model directory (versions below it), file:// or s3:// URL.")],
    name: Annotated[str, typer.Option("--name", help="Endpoint name; also the model's (config: NAME-config).")],
    instance_type: Annotated[str, typer.Option("--instance-type", help="An ml.* instance type.")] = "ml.t2.medium",
    instance_count: Annotated[int, typer.Option("--instance-count", help="Instances to run.", min=1)] = 1,
    url: UrlOpt = DEFAULT_URL,
    home: HomeOpt = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for InService (or Failed).")] = True,
) -> None:
    """Deploy a model directory as endpoint NAME in one step, wait for InService, print how to invoke it.

    Creates model NAME, endpoint config NAME-config (one variant, AllTraffic) and endpoint NAME.
    """
    import botocore.exceptions as bx

    if "://" in model_dir:
        data_url = model_dir
    else:
        path = Path(model_dir).expanduser().resolve()
        if not path.is_dir():
            raise _fail(f"{model_dir} is not a directory", code=2)
        data_url = str(path)
    config_name = f"{name}-config"
    sm = _client("sagemaker", url, home)
    with _api_errors(url):
        taken = _existing(sm, name, config_name)
    if taken:
        listed = taken[0] if len(taken) == 1 else f"{', '.join(taken[:-1])} and {taken[-1]}"
        raise _fail(
            f"{listed} already exist{'s' if len(taken) == 1 else ''}: choose another --name, or delete "
            f"{'them' if len(taken) > 1 else 'it'} first (servekit endpoint delete NAME; boto3's "
            "delete_endpoint_config and delete_model for the rest)"
        )

    created: list[tuple[str, str]] = []  # what this run made, undone if a later step is refused
    with _api_errors(url):
        try:
            sm.create_model(ModelName=name, PrimaryContainer={"Image": "servekit", "ModelDataUrl": data_url})
            created.append(("model", name))
            sm.create_endpoint_config(
                EndpointConfigName=config_name,
                ProductionVariants=[
                    {
                        "VariantName": "AllTraffic",
                        "ModelName": name,
                        "InitialInstanceCount": instance_count,
                        "InstanceType": instance_type,
                        "InitialVariantWeight": 1.0,
                    }
                ],
            )
            created.append(("config", config_name))
            sm.create_endpoint(EndpointName=name, EndpointConfigName=config_name)
        except bx.ClientError:
            _undo(sm, created)
            raise
    typer.echo(
        f"created model {name}, endpoint config {config_name} ({instance_count} x {instance_type}) and endpoint {name}",
        err=True,
    )
    if not wait:
        typer.echo(f"endpoint {name} is Creating; follow it with: servekit endpoint describe {name}")
        return
    typer.echo(f"waiting for endpoint {name} to be InService...", err=True)
    with _api_errors(url):
        try:
            sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 900})
        except bx.WaiterError:
            desc = sm.describe_endpoint(EndpointName=name)
            status = desc.get("EndpointStatus", "?")
            if status == "Failed":
                raise _fail(
                    f"endpoint {name} Failed: {desc.get('FailureReason') or 'no reason given'} "
                    f"(servekit endpoint delete {name} removes it)"
                ) from None
            raise _fail(f"endpoint {name} is still {status} after 15 minutes") from None
        except KeyboardInterrupt:
            raise _fail(
                f"stopped waiting; endpoint {name} carries on (servekit endpoint describe {name} shows it)", code=130
            ) from None
    key = _credentials(_home(home)).admin
    body = example_body(Path(data_url.removeprefix("file://")))
    typer.echo(how_to_invoke(name, url.rstrip("/"), key.access_key_id, _home(home) / "credentials.json", body))


def example_body(base: Path) -> str | None:
    """A JSON body that fits the model at ``base`` (its newest version's first signature), or None when servekit
    cannot tell: not a local directory, a Python handler model (its code decides; running it here would run the
    user's model_fn in the CLI), or a model that does not load here."""
    from servekit.serving.codecs.sagemaker import example_json_body
    from servekit.serving.runtime.registry import RuntimeRegistry

    versions = [p for p in base.iterdir() if p.is_dir() and p.name.isdigit()] if base.is_dir() else []
    if not versions and not base.is_dir():
        return None
    # a flat directory (a SageMaker model.tar.gz's files: model.joblib at its top) is the model itself
    newest = max(versions, key=lambda p: int(p.name)) if versions else base
    registry = RuntimeRegistry()
    try:
        if registry.choose(newest).name == "python":
            return None
        servable = registry.load(newest)
    except Exception:  # the endpoint has loaded it or said why; the example just falls back
        return None
    try:
        signatures = list(servable.signatures.values())
        usable = [s for s in signatures if s.inputs and s.validate]
        return example_json_body(usable[0].inputs) if usable else None
    finally:
        servable.unload()


def _existing(sm: Any, name: str, config_name: str) -> list[str]:
    import botocore.exceptions as bx

    checks: list[tuple[str, str, dict[str, str]]] = [
        (f"model {name}", "describe_model", {"ModelName": name}),
        (f"endpoint config {config_name}", "describe_endpoint_config", {"EndpointConfigName": config_name}),
        (f"endpoint {name}", "describe_endpoint", {"EndpointName": name}),
    ]
    taken = []
    for what, operation, params in checks:
        try:
            getattr(sm, operation)(**params)
        except bx.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ValidationException":
                raise
            continue
        taken.append(what)
    return taken


def _undo(sm: Any, created: list[tuple[str, str]]) -> None:
    import botocore.exceptions as bx

    for kind, name in reversed(created):
        with contextlib.suppress(bx.ClientError, bx.BotoCoreError):
            if kind == "config":
                sm.delete_endpoint_config(EndpointConfigName=name)
            else:
                sm.delete_model(ModelName=name)


def how_to_invoke(name: str, url: str, access_key_id: str, credentials_file: Path, body: str | None = None) -> str:
    """The printout after a deploy; ``body`` one row of the model's inputs (None: the model's signature is unknown,
    a placeholder is shown and said so)."""
    invocations = f"{url}/endpoints/{name}/invocations"
    note = (
        ""
        if body is not None
        else "\n(servekit cannot tell this model's inputs: send the JSON your inference.py reads)\n"
    )
    body = body if body is not None else '["<your input>"]'
    home = credentials_file.parent
    return f"""endpoint {name} is InService: {invocations}
{note}
In your shell, once (the plane's address, and the key {access_key_id} from {credentials_file}):
  eval "$(servekit env --home {shlex.quote(str(home))} --url {url})"

curl (7.75 or later signs requests with SigV4):
  curl --aws-sigv4 "aws:amz:{REGION}:sagemaker" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \\
       -H 'Content-Type: application/json' -d '{body}' {invocations}

boto3 (the same environment):
  import boto3
  runtime = boto3.client("sagemaker-runtime")
  response = runtime.invoke_endpoint(EndpointName="{name}", ContentType="application/json", Body=b'{body}')
  print(response["Body"].read())

An application needs only an invoke key: servekit keys create --scope invoke --name my-app"""


# ---- servekit keys -------------------------------------------------------------------------------------------------
@keys_app.command("list")
def keys_list(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """List the access keys (ids, names and scopes; never the secrets)."""
    root = _home(home)
    keys = _credentials(root).keys
    rows = [{"AccessKeyId": k.access_key_id, "Name": k.name, "Scope": k.scope} for k in keys]
    if as_json:
        _print_json({"Keys": rows})
        return
    table = _rows_table(rows, [("Access key id", "AccessKeyId"), ("Name", "Name"), ("Scope", "Scope")])
    _console().print(table)
    typer.echo(f"(secrets are in {root / 'credentials.json'}, mode 0600)")


@keys_app.command("create")
def keys_create(
    scope: Annotated[
        KeyScope, typer.Option("--scope", help="invoke: InvokeEndpoint only; admin: every operation.")
    ] = KeyScope.invoke,
    name: Annotated[str, typer.Option("--name", help="A label for the key (default: its scope).")] = "",
    home: HomeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the key as JSON instead.")] = False,
) -> None:
    """Create an access key and print its id and secret once, as export lines (servekit up sees it at once).

    eval "$(servekit keys create --scope invoke --name my-app)" sets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    """
    root = _home(home)
    credentials = _credentials(root)
    try:
        key = credentials.add_key(scope.value, name)
    except OSError as exc:
        raise _fail(f"cannot write {credentials.path}: {exc}") from None
    if as_json:
        _print_json(
            {
                "AccessKeyId": key.access_key_id,
                "SecretAccessKey": key.secret_access_key,
                "Scope": key.scope,
                "Name": key.name,
            }
        )
        return
    # stdout is shell, for eval "$(servekit keys create ...)"; the notice goes to stderr.
    typer.echo(f"created {key.scope} key {key.name!r}; its secret is not shown again", err=True)
    sys.stdout.write(
        f"export AWS_ACCESS_KEY_ID={key.access_key_id}\nexport AWS_SECRET_ACCESS_KEY={key.secret_access_key}\n"
    )
