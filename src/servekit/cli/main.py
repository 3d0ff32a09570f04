"""The ``servekit`` command line: ``servekit NOUN VERB`` (``serve`` and ``demo`` stand alone).

``serve`` keeps TF Serving's underscore flag names, the only spelling its help shows; dashed spellings and
TF Serving's ``--flag=true|false`` booleans are accepted too. Older spellings stay as aliases for scripts:
``servekit inspect`` (``servekit model inspect``) and ``servekit bench --…`` (``servekit bench run --…``).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from servekit._version import __version__
from servekit.cli.autoscale_cmd import autoscale_app
from servekit.cli.export_cmd import export_app
from servekit.cli.hosting_cmd import deploy, endpoint_app, keys_app, model_describe, model_list
from servekit.cli.http_stack import http_stack
from servekit.cli.inspect_cmd import render_signatures
from servekit.cli.monitor_cmd import monitor_app
from servekit.cli.optimize_cmd import optimize
from servekit.cli.pipeline_cmd import lineage, pipeline_app
from servekit.cli.recommend_cmd import recommend as recommend_command
from servekit.cli.registry_cmd import registry_app
from servekit.cli.transform_cmd import transform_app
from servekit.config.loading import load_auth_token_file, load_batching_file, load_model_config_file
from servekit.config.models import (
    BatchingConfig,
    CaptureConfig,
    ConnectionLimits,
    ModelConfig,
    RuntimeOptions,
    ServerConfig,
)
from servekit.errors import ConfigError
from servekit.protocols.grpc.config import DEFAULT_MAX_MESSAGE_BYTES, GrpcConfig

# Help is rendered at the terminal's width; the option tables are laid out so that every option name shows in
# full from 100 columns up (tests/unit/test_cli.py checks this for every command).
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=(
        "Self-hosted model serving: serve versioned models over TF Serving REST, KServe V2 and SageMaker, "
        "inspect them, load-test a server, run batch transform jobs and data-drift monitoring."
    ),
)
model_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Models: inspect a version on disk; list and describe the models of a servekit up.",
)


class _DefaultsToRun(TyperGroup):
    """A group whose options-first invocation runs its ``run`` command: ``servekit bench --model m`` (the older
    spelling) is ``servekit bench run --model m``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: typer's click Context
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)


bench_app = typer.Typer(
    cls=_DefaultsToRun,
    add_completion=False,
    no_args_is_help=True,
    help="Load-test a model server (any protocol): throughput, latency percentiles, errors.",
)
app.add_typer(model_app, name="model")
app.add_typer(endpoint_app, name="endpoint")
app.add_typer(bench_app, name="bench")
app.add_typer(transform_app, name="transform")
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(monitor_app, name="monitor")
app.add_typer(keys_app, name="keys")
app.add_typer(autoscale_app, name="autoscale")
app.add_typer(registry_app, name="registry")
app.add_typer(export_app, name="export")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"servekit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print servekit's version and exit."),
    ] = False,
) -> None:
    pass


def _opt(*names: str, help: str) -> Any:
    dashed = [n.replace("_", "-") for n in names if "_" in n]
    return typer.Option(*names, *dashed, help=help)


def _tf(name: str, help: str) -> Any:
    """A ``serve`` flag under its TF Serving name only (:class:`_TfServingFlags` accepts the dashed spelling)."""
    return typer.Option(name, help=help)


# TF Serving spells booleans --flag=true / --flag=false. Each is declared as a --flag and a hidden --no-flag (a
# --flag/--no-flag pair would take a help column of its own and squeeze the names).
_BOOL_FLAGS = ("enable_batching", "enable_model_warmup")


class _TfServingFlags(TyperCommand):
    """Declares one spelling per flag (TF Serving's, so help has room for the whole name) and accepts the dashed
    spelling of each, and ``--flag=true|false|1|0`` for booleans, by rewriting them before parsing."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: typer's click Context
        declared = {
            name.lstrip("-").replace("-", "_"): name
            for param in self.params
            for name in (*param.opts, *getattr(param, "secondary_opts", ()))
            if name.startswith("--")
        }
        out = []
        for i, arg in enumerate(args):
            if arg == "--":
                out += args[i:]
                break
            if arg.startswith("--"):
                name, sep, value = arg.partition("=")
                key = name.lstrip("-").replace("-", "_")
                if key in _BOOL_FLAGS and sep and value.lower() in ("true", "false", "1", "0"):
                    arg = f"--{key}" if value.lower() in ("true", "1") else f"--no-{key}"
                    out.append(declared.get(arg.lstrip("-").replace("-", "_"), arg))
                    continue
                elif key in declared:
                    arg = declared[key] + sep + value
            out.append(arg)
        return super().parse_args(ctx, out)


@app.command(cls=_TfServingFlags)
def serve(
    model_name: Annotated[str | None, _tf("--model_name", help="Name of the single model to serve.")] = None,
    model_base_path: Annotated[str | None, _tf("--model_base_path", help="Its base path (versions below).")] = None,
    model_config_file: Annotated[
        str | None, _tf("--model_config_file", help="TF Serving model_config_list (text), YAML or TOML.")
    ] = None,
    rest_api_port: Annotated[int, _tf("--rest_api_port", help="REST port (all protocols).")] = 8501,
    grpc_port: Annotated[
        int | None,
        typer.Option(
            "--port",
            "--grpc_port",
            help="gRPC port (TF Serving's flag; its image uses 8500): TF Serving and KServe V2. Off if unset.",
        ),
    ] = None,
    grpc_max_message_bytes: Annotated[
        int, _tf("--grpc_max_message_bytes", help="Largest gRPC message either way (64 MiB by default).")
    ] = DEFAULT_MAX_MESSAGE_BYTES,
    host: Annotated[
        str, _tf("--host", help="Address to listen on; 0.0.0.0 = every interface (warned about without auth).")
    ] = "127.0.0.1",
    sagemaker_port: Annotated[
        int | None, _tf("--sagemaker_port", help="Also listen here (SageMaker uses 8080).")
    ] = None,
    file_system_poll_wait_seconds: Annotated[
        float, _tf("--file_system_poll_wait_seconds", help="Poll for new versions (0 = at start only).")
    ] = 1.0,
    model_config_file_poll_wait_seconds: Annotated[
        float, _tf("--model_config_file_poll_wait_seconds", help="Re-read the config file (0 = never).")
    ] = 0.0,
    max_num_load_retries: Annotated[int, _tf("--max_num_load_retries", help="Retries of a failed load.")] = 5,
    load_retry_interval_micros: Annotated[
        int, _tf("--load_retry_interval_micros", help="Wait between load retries.")
    ] = 60_000_000,
    max_request_bytes: Annotated[
        int, _tf("--max_request_bytes", help="Larger bodies get 413 (16 MiB by default).")
    ] = 16 * 2**20,
    num_inference_threads: Annotated[int, _tf("--num_inference_threads", help="Model execution threads.")] = 4,
    max_queued_requests: Annotated[
        int,
        _tf(
            "--max_queued_requests",
            help="Without batching: requests per model that may wait for a model thread; more get 503 at once.",
        ),
    ] = 128,
    intra_op: Annotated[int, _tf("--tensorflow_intra_op_parallelism", help="onnxruntime intra-op threads.")] = 0,
    inter_op: Annotated[int, _tf("--tensorflow_inter_op_parallelism", help="onnxruntime inter-op threads.")] = 0,
    enable_batching: Annotated[bool, _tf("--enable_batching", help="Dynamic batching (=false: off).")] = False,
    no_enable_batching: Annotated[bool, typer.Option("--no-enable_batching", hidden=True)] = False,
    batching_parameters_file: Annotated[
        str | None, _tf("--batching_parameters_file", help="TF BatchingParameters text, YAML or TOML.")
    ] = None,
    request_timeout_ms: Annotated[
        int,
        _tf("--request_timeout_ms", help="Longest wait in a batch queue or for a model thread before 504 (0 = none)."),
    ] = 0,
    enable_model_warmup: Annotated[
        bool,
        _tf(
            "--enable_model_warmup",
            help="Replay assets.extra/warmup_requests.jsonl before a version takes traffic "
            "(--no-enable_model_warmup or =false: off).",
        ),
    ] = True,
    no_enable_model_warmup: Annotated[bool, typer.Option("--no-enable_model_warmup", hidden=True)] = False,
    warmup_iterations: Annotated[
        int, _tf("--num_request_iterations_for_warmup", help="Times each warmup record is replayed.")
    ] = 1,
    workers: Annotated[int, _tf("--workers", help="Worker processes sharing the listening sockets.")] = 1,
    capture_destination: Annotated[
        str | None, _tf("--capture_destination", help="Capture requests (SageMaker format) under this URI.")
    ] = None,
    capture_sampling_percentage: Annotated[
        float, _tf("--capture_sampling_percentage", help="Share of requests captured, 0-100.")
    ] = 100.0,
    capture_mode: Annotated[str, _tf("--capture_mode", help="input, output or both.")] = "both",
    capture_buffer_records: Annotated[
        int, _tf("--capture_buffer_records", help="Buffered records before capture drops (and counts).")
    ] = 10_000,
    capture_partition_prefix: Annotated[
        str | None,
        _tf(
            "--capture_partition_prefix",
            help="Capture under <destination>/<prefix>/yyyy/mm/dd/hh instead of <model>/<version>/... "
            "(servekit up passes <endpoint>/<variant>).",
        ),
    ] = None,
    capture_format: Annotated[
        str,
        _tf(
            "--capture_format",
            help="jsonl (SageMaker's JSON Lines layout) or parquet (a column per feature; needs servekit[monitor]).",
        ),
    ] = "jsonl",
    auth_token_file: Annotated[
        str | None,
        _tf(
            "--auth_token_file",
            help="Bearer tokens, one a line: inference:<t>, admin:<t> (status, metrics) or <t> (both). "
            "Health checks stay open.",
        ),
    ] = None,
    idle_timeout_seconds: Annotated[
        float, _tf("--idle_timeout_seconds", help="Close a connection that sends nothing this long (0 = never).")
    ] = 10.0,
    header_timeout_seconds: Annotated[
        float, _tf("--header_timeout_seconds", help="A request head must arrive within this (408; 0 = no limit).")
    ] = 10.0,
    body_timeout_seconds: Annotated[
        float, _tf("--body_timeout_seconds", help="A body must arrive within this after its head (408; 0 = none).")
    ] = 60.0,
    max_connections: Annotated[
        int, _tf("--max_connections", help="Open connections per worker; more get 503 (0 = from the file limit).")
    ] = 0,
    multi_model: Annotated[
        bool,
        _tf(
            "--multi_model",
            help="SageMaker's multi-model container API (POST/GET/DELETE /models, /models/NAME/invoke): start with "
            "no model, load on request.",
        ),
    ] = False,
    multi_model_memory_bytes: Annotated[
        int,
        _tf(
            "--multi_model_memory_bytes",
            help="With --multi_model: resident memory the process may reach; idle models are unloaded (LRU) to fit "
            "a new one (0 = no limit).",
        ),
    ] = 0,
    loop: Annotated[str, _tf("--loop", help="Event loop: auto (uvloop where installed), asyncio or uvloop.")] = "auto",
    http: Annotated[
        str, _tf("--http", help="HTTP/1.1 parser: auto (httptools where installed), h11 or httptools.")
    ] = "auto",
    log_level: Annotated[str, _tf("--log_level", help="debug, info, warning, error.")] = "info",
) -> None:
    """Serve models over TF Serving REST, KServe V2 and the SageMaker container contract."""
    _setup_logging(log_level)
    enable_batching = enable_batching and not no_enable_batching
    enable_model_warmup = enable_model_warmup and not no_enable_model_warmup
    try:
        if model_config_file:
            if model_name or model_base_path:
                raise ConfigError("give either --model_config_file or --model_name/--model_base_path, not both")
            models = load_model_config_file(model_config_file)
        elif model_base_path:
            name = model_name or Path(model_base_path.rstrip("/")).name
            models = (ModelConfig(name=name, base_path=_abs(model_base_path)),)
        elif multi_model:
            models = ()
        else:
            raise ConfigError("nothing to serve: give --model_base_path (and --model_name) or --model_config_file")
        config = ServerConfig(
            models=models,
            model_config_file=model_config_file,
            host=host,
            rest_api_port=rest_api_port,
            sagemaker_port=sagemaker_port,
            file_system_poll_wait_seconds=file_system_poll_wait_seconds,
            model_config_file_poll_wait_seconds=model_config_file_poll_wait_seconds,
            max_num_load_retries=max_num_load_retries,
            load_retry_interval_seconds=load_retry_interval_micros / 1e6,
            max_request_bytes=max_request_bytes,
            num_inference_threads=num_inference_threads,
            max_queued_requests=max_queued_requests,
            runtime=RuntimeOptions(intra_op_threads=intra_op, inter_op_threads=inter_op),
            batching=(
                (load_batching_file(batching_parameters_file) if batching_parameters_file else BatchingConfig())
                if enable_batching or batching_parameters_file
                else None
            ),
            request_timeout_ms=request_timeout_ms,
            enable_model_warmup=enable_model_warmup,
            num_request_iterations_for_warmup=warmup_iterations,
            workers=workers,
            capture=_capture_config(
                capture_destination,
                capture_sampling_percentage,
                capture_mode,
                capture_buffer_records,
                capture_partition_prefix,
                capture_format,
            ),
            connections=ConnectionLimits(
                idle_timeout_seconds=idle_timeout_seconds,
                header_timeout_seconds=header_timeout_seconds,
                body_timeout_seconds=body_timeout_seconds,
                max_connections=max_connections,
            ),
            auth=load_auth_token_file(auth_token_file) if auth_token_file else None,
            multi_model=multi_model,
            multi_model_memory_bytes=multi_model_memory_bytes or None,
        )
        grpc = (
            GrpcConfig(
                port=grpc_port,
                host=host,
                max_message_bytes=grpc_max_message_bytes,
                reuse_port=workers > 1,  # each worker binds the port; the kernel spreads the connections
            )
            if grpc_port is not None
            else None
        )
        stack = http_stack(loop, http)
    except ConfigError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    from servekit.cli.serve import run_server

    run_server(config, log_level, grpc, stack)


@model_app.command("inspect")
@app.command("inspect", hidden=True, help="Alias of servekit model inspect.")
def inspect(version_dir: Annotated[Path, typer.Argument(help="A model version directory.")]) -> None:
    """Print every signature of a model version (like saved_model_cli show --all)."""
    from servekit.runtime.registry import RuntimeRegistry

    try:
        servable = RuntimeRegistry().load(version_dir.resolve())
    except ConfigError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        typer.echo(render_signatures(servable.signatures, servable.platform))
    finally:
        servable.unload()


@app.command()
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
    from servekit.cli.up import run_up
    from servekit.control.metrics import check_resolution
    from servekit.control.ray_backend import config_from_cli
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
    if role == "gateway":  # its metrics resolution and backend are the leader's
        from servekit.cli.up import run_gateway_replica

        try:
            run_gateway_replica(resolve_home(home, os.environ), host, port, log_level, instance_types, url)
        except ConfigError as exc:  # no leader has run on this home (or database), or the database is unusable
            typer.echo(f"servekit: {exc}", err=True)
            raise typer.Exit(2) from None
        return
    try:
        run_up(resolve_home(home, os.environ), host, port, log_level, instance_types, metrics_resolution_s, ray, url)
    except ConfigError as exc:  # the Ray cluster cannot be reached, Ray is not installed, the database is unusable
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None


# Thin clients of servekit up's API (servekit.cli.hosting_cmd): deploy stands alone, beside up.
app.command("deploy")(deploy)
model_app.command("list")(model_list)
model_app.command("describe")(model_describe)


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to build the example models.")] = Path("demo-models"),
    port: Annotated[int, typer.Option("--port", help="REST port.")] = 8501,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    sagemaker_port: Annotated[int, typer.Option("--sagemaker-port", help="SageMaker port.")] = 8080,
    build_only: Annotated[bool, typer.Option("--build-only", help="Build the models and exit.")] = False,
) -> None:
    """Build example models, print copy-paste requests for each protocol, and serve them."""
    from servekit.demo.build import build_demo
    from servekit.demo.tour import tour

    try:
        config_path = build_demo(directory)
    except ImportError as exc:  # the demo's models are trained here, with the demo extra's libraries
        typer.echo(
            f"servekit demo builds its example models with scikit-learn and skl2onnx ({exc.name} is missing): "
            "pip install 'servekit[demo]' (make demo does it)",
            err=True,
        )
        raise typer.Exit(2) from None
    typer.echo(f"built example models under {directory.resolve()} (config: {config_path})\n")
    typer.echo(tour(port, sagemaker_port))
    if build_only:
        return
    serve(model_config_file=str(config_path), rest_api_port=port, sagemaker_port=sagemaker_port, host=host)


# servekit optimize (servekit.cli.optimize_cmd) stands alone like serve: a model directory in, a version out.
app.command("optimize")(optimize)
# servekit recommend (servekit.cli.recommend_cmd) stands alone too: a model directory in, a recommendation out.
app.command("recommend")(recommend_command)
# servekit lineage (servekit.cli.pipeline_cmd): an artifact or model package in, where it came from out.
app.command("lineage")(lineage)


@bench_app.command("run")
def bench(
    model: Annotated[str, _opt("--model", help="Model to send requests to.")],
    url: Annotated[str, _opt("--url", help="Server address.")] = "http://127.0.0.1:8501",
    protocol: Annotated[str, _opt("--protocol", help="tfserving, kserve or sagemaker.")] = "tfserving",
    version: Annotated[int | None, _opt("--version", help="Model version (default: the server's choice).")] = None,
    rows: Annotated[int, _opt("--rows", help="Rows (examples) per generated request.")] = 1,
    concurrency: Annotated[
        int | None, _opt("--concurrency", help="Closed loop: clients sending back-to-back (default 1).")
    ] = None,
    rate: Annotated[float | None, _opt("--rate", help="Open loop: requests/s at fixed intervals.")] = None,
    loop: Annotated[str | None, _opt("--loop", help="closed or open (default: open with --rate, else closed).")] = None,
    duration: Annotated[str | None, _opt("--duration", help="Length of the run, e.g. 10s (default 10s).")] = None,
    requests: Annotated[int | None, _opt("--requests", help="Stop after this many requests (per phase).")] = None,
    phases: Annotated[
        str | None, _opt("--phases", help="Stepped load: rates (open loop) or concurrencies (closed), e.g. 1,8,32.")
    ] = None,
    phase_duration: Annotated[str | None, _opt("--phase_duration", help="Length of each phase.")] = None,
    max_outstanding: Annotated[
        int, _opt("--max_outstanding", help="Open loop: most requests in flight; later ones are dropped.")
    ] = 1024,
    body_file: Annotated[
        str | None, _opt("--body_file", help="Request bodies, one per line, cycled (else from the signature).")
    ] = None,
    seed: Annotated[int, _opt("--seed", help="Seed of the generated request data.")] = 0,
    binary: Annotated[bool, _opt("--binary", help="KServe: send tensors with the binary extension.")] = False,
    csv: Annotated[bool, _opt("--csv", help="SageMaker: send text/csv rows instead of JSON.")] = False,
    header: Annotated[list[str] | None, _opt("--header", help="Extra request header 'Name: value' (repeat).")] = None,
    timeout: Annotated[str, _opt("--timeout", help="Longest wait for one response.")] = "30s",
    engine: Annotated[str, _opt("--engine", help="asyncio, or wrk (closed loop, duration only).")] = "asyncio",
    json_path: Annotated[Path | None, _opt("--json", help="Also write the report here (stable keys).")] = None,
    quiet: Annotated[bool, _opt("--quiet", help="No live progress (it is off anyway when not a terminal).")] = False,
) -> None:
    """Load-test a model server (any protocol): throughput, latency percentiles, errors, the server's own split.

    Also runs as servekit bench with these options (without run).

    Closed loop: --concurrency N clients send back-to-back. Open loop: --rate R requests/s, whatever the answers.

    --phases steps through rates (open) or concurrencies (closed). --json writes the report (servekit.bench.stats).
    """
    import orjson
    from rich.console import Console

    from servekit.bench.runner import run_bench
    from servekit.bench.spec import spec_from_options
    from servekit.bench.stats import render
    from servekit.bench.workload import BenchError

    try:
        spec = spec_from_options(
            url=url,
            protocol=protocol,
            model=model,
            version=version,
            rows=rows,
            concurrency=concurrency,
            rate=rate,
            loop=loop,
            duration=duration,
            requests=requests,
            phases=phases,
            phase_duration=phase_duration,
            max_outstanding=max_outstanding,
            body_file=body_file,
            seed=seed,
            binary=binary,
            csv=csv,
            headers=header or [],
            timeout=timeout,
            engine=engine,
        )
        err = Console(stderr=True)
        report = run_bench(spec, None if quiet or not err.is_terminal else err)
    except ConfigError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    except BenchError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(1) from None
    if json_path is not None:
        json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    out = Console()
    render(report, out if out.is_terminal else Console(width=160))


def _capture_config(
    destination: str | None,
    percentage: float,
    mode: str,
    buffer: int,
    partition_prefix: str | None = None,
    capture_format: str = "jsonl",
) -> CaptureConfig | None:
    if destination is None:
        return None
    if mode not in ("input", "output", "both"):
        raise ConfigError(f"--capture_mode must be input, output or both, got {mode!r}")
    if capture_format == "parquet":  # at startup, not on the first captured request
        from servekit.capture.parquet import require_pyarrow

        require_pyarrow()
    return CaptureConfig(
        destination=_abs(destination),
        sampling_percentage=percentage,
        capture_input=mode in ("input", "both"),
        capture_output=mode in ("output", "both"),
        buffer_records=buffer,
        partition_prefix=partition_prefix,
        format=capture_format,
    )


def _abs(path: str) -> str:
    return path if "://" in path else str(Path(path).resolve())


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
