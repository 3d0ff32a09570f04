"""``servekit up``: the hosting control plane, SageMaker's model/endpoint API and InvokeEndpoint for boto3."""

from __future__ import annotations

import logging
import os
from typing import Annotated

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
            help="State in this PostgreSQL database (postgresql://user@host:port/db, needs servekit[postgres]) "
            "instead of the home's SQLite file, so that gateway replicas on other hosts share it "
            "(default $SERVEKIT_DATABASE_URL).",
        ),
    ] = None,
) -> None:
    """Run the hosting control plane: SageMaker's model/endpoint API and InvokeEndpoint, for boto3."""
    from servekit.backends.ray_actors import config_from_cli
    from servekit.cloudwatch.store import check_resolution
    from servekit.launch.up import prepare_gateway_replica, prepare_leader, serve
    from servekit.state.home import DATABASE_URL_ENV, resolve_database_url, resolve_home

    url = resolve_database_url(database_url, os.environ)
    if url is not None:  # the runs this plane starts (transform, pipeline executions) record into the same database
        os.environ[DATABASE_URL_ENV] = url
    try:
        check_resolution(metrics_resolution_s)
        ray = config_from_cli(backend, ray_address, ray_resources)
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
                resolve_home(home, os.environ), host, port, instance_types, metrics_resolution_s, ray, url
            )
        except ConfigError as exc:  # the Ray cluster cannot be reached, Ray is not installed, the database is unusable
            typer.echo(f"servekit: {exc}", err=True)
            raise typer.Exit(2) from None
    print(prepared.banner, flush=True)
    serve(prepared.app, host, port, log_level)


def _log_to_stderr(log_level: str) -> None:
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
