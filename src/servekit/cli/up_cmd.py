"""``servekit up``: the hosting control plane, SageMaker's model/endpoint API and InvokeEndpoint for boto3;
``servekit logs``, which prints the log groups it keeps (CloudWatch Logs); and ``servekit images``, the images its
jobs may name, mapped to local programs (``<home>/images.yaml``):

- ``images add URI --command 'PROGRAM ARGS'``: an image of your own; a job naming it runs this command in its sandbox
  (``/opt/ml`` as SageMaker's contract has it). SageMaker passes ``train`` to a training container's entrypoint: add
  it to the command if your program expects it.
- ``images add URI --python PATH``: a framework image (``pytorch-training``, ...) whose scripts run with this
  interpreter.
- ``images list``, ``images remove URI``.

``URI`` is an image URI, matched exactly, or a repository name, matching any account, region and tag. ``servekit up``
reads the file at each job, so a change takes effect for the next job without a restart."""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from servekit.errors import ConfigError


def up(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port of the SageMaker control-plane and runtime APIs.")] = 8765,
    home: Annotated[
        str | None,
        typer.Option("--home", help="State, keys and instance logs (default $SERVEKIT_HOME or ./.servekit)."),
    ] = None,
    instance_types: Annotated[
        str | None, typer.Option("--instance-types", help="YAML/TOML file of extra local instance types.")
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning, error.")] = "info",
    metrics_resolution_s: Annotated[
        int,
        typer.Option(
            "--metrics-resolution-s",
            help="Seconds per CloudWatch datapoint: 1, 2, 5, 10, 20, 30 or a multiple of 60 (finer ones allow "
            "alarm and query periods that are multiples of it).",
        ),
    ] = 60,
    backend: Annotated[
        str, typer.Option("--backend", help="Where instances run: local (processes here) or ray (Ray actors).")
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="--backend ray: auto, host:port or ray://host:port (default: a local Ray)."),
    ] = None,
    ray_resources: Annotated[
        str | None,
        typer.Option("--ray-resources", help='--backend ray: JSON of Ray resources per instance, e.g. {"GPU": 1}.'),
    ] = None,
    role: Annotated[
        str,
        typer.Option(
            "--role",
            help="leader: the full control plane (runs the instances); gateway: a replica on the same --home that "
            "serves InvokeEndpoint from the leader's routes and forwards every other call to the leader.",
        ),
    ] = "leader",
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="State in this PostgreSQL database (postgresql://user@host:port/db, needs servekit\\[postgres]) "
            "instead of the home's SQLite file, so that gateway replicas on other hosts share it "
            "(default $SERVEKIT_DATABASE_URL).",
        ),
    ] = None,
    s3_endpoint: Annotated[
        str | None,
        typer.Option(
            "--s3-endpoint",
            help="An external S3-compatible store (MinIO, Ceph, AWS) for s3:// data outside this plane's own "
            "buckets; `servekit env` then points AWS_ENDPOINT_URL_S3 there (default: AWS_ENDPOINT_URL_S3).",
        ),
    ] = None,
    images: Annotated[
        str | None,
        typer.Option(
            "--images",
            help="YAML file mapping job images to local programs or interpreters, besides <home>/images.yaml "
            "(which `servekit images add` writes).",
        ),
    ] = None,
    allow_installs: Annotated[
        bool,
        typer.Option(
            "--allow-installs",
            help="pip install a training script's requirements.txt (from the network, into the job's own folder) "
            "before it runs; without it the job runs with what its interpreter has.",
        ),
    ] = False,
    serverless_idle_s: Annotated[
        float,
        typer.Option(
            "--serverless-idle-s",
            min=0.0,
            help="How long a serverless variant (ServerlessConfig) keeps instances beyond its ProvisionedConcurrency "
            "after its last request.",
        ),
    ] = 300.0,
    sns_webhook: Annotated[
        list[str] | None,
        typer.Option(
            "--sns-webhook",
            help="TOPIC_ARN=URL (repeatable): asynchronous inference's notifications to that SNS topic (an endpoint "
            "config's NotificationConfig SuccessTopic/ErrorTopic) are POSTed to URL as the JSON message SageMaker "
            "publishes; SNS itself is not reached, and a topic without a URL is logged and counted in "
            "NotificationFailures.",
        ),
    ] = None,
    print_systemd_unit: Annotated[
        bool,
        typer.Option(
            "--print-systemd-unit",
            help="Print a systemd unit that runs servekit up with these options (restarted if it dies) and exit; "
            "see docs/supervisor.md.",
        ),
    ] = False,
) -> None:
    """Run the hosting control plane: SageMaker's model/endpoint API and InvokeEndpoint, for boto3."""
    if print_systemd_unit:
        import sys

        from servekit.launch.systemd import systemd_unit
        from servekit.state.home import resolve_home

        options: dict[str, str | None] = {
            "--host": host,
            "--port": str(port),
            "--instance-types": _absolute(instance_types),
            "--log-level": log_level,
            "--metrics-resolution-s": str(metrics_resolution_s),
            "--backend": backend,
            "--ray-address": ray_address,
            "--ray-resources": ray_resources,
            "--role": role,
            "--s3-endpoint": s3_endpoint,
            "--images": _absolute(images),
            "--serverless-idle-s": f"{serverless_idle_s:g}",
        }  # --database-url stays out: it may carry a password (give SERVEKIT_DATABASE_URL in an EnvironmentFile)
        args = [part for flag, value in options.items() if value is not None for part in (flag, value)]
        args += ["--allow-installs"] if allow_installs else []
        args += [part for hook in sns_webhook or () for part in ("--sns-webhook", hook)]
        typer.echo(systemd_unit(args, resolve_home(home, os.environ), sys.executable), nl=False)
        return
    from servekit.backends.ray_actors import config_from_cli
    from servekit.edge.async_notifications import parse_webhooks
    from servekit.launch.up import prepare_gateway_replica, prepare_leader, serve
    from servekit.services.cloudwatch.store import check_resolution
    from servekit.state.home import DATABASE_URL_ENV, resolve_database_url, resolve_home

    url = resolve_database_url(database_url, os.environ)
    if url is not None:  # the runs this plane starts (transform, pipeline executions) record into the same database
        os.environ[DATABASE_URL_ENV] = url
    try:
        check_resolution(metrics_resolution_s)
        ray = config_from_cli(backend, ray_address, ray_resources)
        webhooks = parse_webhooks(sns_webhook or ())
    except ValueError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    if role not in ("leader", "gateway"):
        typer.echo(f"servekit: --role must be leader or gateway, not {role!r}", err=True)
        raise typer.Exit(2)
    _log_to_stderr(log_level)
    if role == "gateway":  # its metrics resolution and backend are the leader's
        try:
            prepared = prepare_gateway_replica(resolve_home(home, os.environ), host, port, instance_types, url)
        except ConfigError as exc:  # no leader has run on this home (or database), or the database is unusable
            typer.echo(f"servekit: {exc}", err=True)
            raise typer.Exit(2) from None
    else:
        try:
            prepared = prepare_leader(
                resolve_home(home, os.environ),
                host,
                port,
                instance_types,
                metrics_resolution_s,
                ray,
                url,
                s3_endpoint,
                images,
                allow_installs,
                serverless_idle_s,
                webhooks,
            )
        except ConfigError as exc:  # the Ray cluster cannot be reached, Ray is not installed, the database is unusable
            typer.echo(f"servekit: {exc}", err=True)
            raise typer.Exit(2) from None
    print(prepared.banner, flush=True)
    try:
        serve(prepared.app, host, port, log_level)
    except ConfigError as exc:  # the port is taken
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None


def _absolute(path: str | None) -> str | None:
    """A file option as a unit needs it: systemd runs the command from another working directory."""
    return None if path is None else str(Path(path).absolute())


def _log_to_stderr(log_level: str) -> None:
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# ---- servekit logs: what servekit up keeps in CloudWatch Logs (docs/logs.md) -----------------------------------------
LOGS_POLL_S = 1.0


def logs(
    group: Annotated[
        str, typer.Argument(help="Log group: /aws/sagemaker/Endpoints/NAME, /aws/sagemaker/TransformJobs, or yours.")
    ],
    stream: Annotated[
        str | None, typer.Argument(help="Log stream (default: every stream of the group, in time order).")
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events until Ctrl-C.")] = False,
    url: Annotated[
        str, typer.Option("--url", envvar="SERVEKIT_URL", show_envvar=False, help="servekit up's address.")
    ] = "http://127.0.0.1:8765",
    home: Annotated[
        str | None, typer.Option("--home", help="servekit home with the keys (default $SERVEKIT_HOME or ./.servekit).")
    ] = None,
) -> None:
    """Print a log group's events (every stream's, each line after its stream's name) or one stream's, from a
    running servekit up; --follow keeps printing what arrives."""
    from pathlib import Path

    from servekit.cli.api_client import api_errors, client

    logs_client = client("logs", url, Path(home) if home else None)
    try:
        with api_errors(url):
            if stream is not None:
                _print_stream(logs_client, group, stream, follow)
            else:
                _print_group(logs_client, group, follow)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _print_stream(logs_client: Any, group: str, stream: str, follow: bool) -> None:
    import time

    token: str | None = None
    while True:
        kwargs = {"nextToken": token} if token else {"startFromHead": True}
        got = logs_client.get_log_events(logGroupName=group, logStreamName=stream, **kwargs)
        for event in got["events"]:
            typer.echo(event["message"])
        if got["nextForwardToken"] == token:  # caught up
            if not follow:
                return
            time.sleep(LOGS_POLL_S)  # polling the plane for what its shipper stores next
        token = got["nextForwardToken"]


def _print_group(logs_client: Any, group: str, follow: bool) -> None:
    import time

    start: int | None = None
    seen: set[str] = set()  # the events at ``start`` already printed (the next search starts at their time)
    while True:
        token: str | None = None
        last = start
        while True:
            kwargs: dict[str, object] = {"logGroupName": group}
            if start is not None:
                kwargs["startTime"] = start
            if token:
                kwargs["nextToken"] = token
            page = logs_client.filter_log_events(**kwargs)
            for event in page["events"]:
                if event["eventId"] in seen:
                    continue
                typer.echo(f"{event['logStreamName']} {event['message']}")
                if last is None or event["timestamp"] > last:
                    last, seen = event["timestamp"], set()
                seen.add(event["eventId"])
            token = page.get("nextToken")
            if not token:
                break
        if not follow:
            return
        start = last
        time.sleep(LOGS_POLL_S)  # polling the plane for what its shipper stores next


# ---- servekit images ----------------------------------------------------------------------------------------
HomeOpt = Annotated[Path | None, typer.Option("--home", help="servekit home (default $SERVEKIT_HOME or ./.servekit).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
images_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Images SageMaker jobs may name, mapped to local programs or interpreters: add, list, remove.",
)

UriArg = Annotated[str, typer.Argument(help="An image URI, or a repository name (any account, region and tag).")]


def _file(home: Path | None) -> Path:
    from servekit.state.home import resolve_home

    return resolve_home(home, os.environ) / "images.yaml"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"servekit: {message}", err=True)
    return typer.Exit(1)


@images_app.command("add")
def add(
    uri: UriArg,
    command: Annotated[
        str | None, typer.Option("--command", help="The program a job of this image runs (shell words).")
    ] = None,
    python: Annotated[
        str | None, typer.Option("--python", help="The interpreter a framework image's scripts run with.")
    ] = None,
    home: HomeOpt = None,
) -> None:
    """Map an image to a program of your own (--command) or a framework image to an interpreter (--python)."""
    from servekit.config.images import image_entry, load_images_file, save_images_file

    path = _file(home)
    raw: dict[str, object] = {"uri": uri}
    if command is not None:
        try:
            raw["command"] = shlex.split(command)
        except ValueError as exc:
            raise _fail(f"--command: {exc}") from None
    if python is not None:
        raw["python"] = os.path.abspath(python)
    try:
        entry = image_entry(raw, "the image")
        entries = [e for e in load_images_file(path) if e.uri != uri]
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    save_images_file(path, (*entries, entry))
    typer.echo(f"{uri}: {'runs ' + shlex.join(entry.command) if entry.command else 'scripts run with ' + str(python)}")


@images_app.command("list")
def list_images(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """The images mapped in the home, with what each runs."""
    from servekit.config.images import load_images_file

    try:
        entries = load_images_file(_file(home))
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    from servekit.cli.hosting_cmd import _console, _print_json, _rows_table

    rows = [e.as_dict() for e in entries]
    if as_json:
        _print_json(rows)
        return
    shown = [{"uri": r["uri"], "runs": shlex.join(r.get("command", [])), "python": r.get("python", "")} for r in rows]
    _console().print(_rows_table(shown, [("IMAGE", "uri"), ("COMMAND", "runs"), ("PYTHON", "python")]))


@images_app.command("remove")
def remove(uri: UriArg, home: HomeOpt = None) -> None:
    """Forget an image's mapping."""
    from servekit.config.images import load_images_file, save_images_file

    path = _file(home)
    try:
        entries = load_images_file(path)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    kept = tuple(e for e in entries if e.uri != uri)
    if len(kept) == len(entries):
        raise _fail(f"no image {uri} is mapped in {path}")
    save_images_file(path, kept)
    typer.echo(f"{uri}: removed")
