"""``servekit serve``: serve models over TF Serving REST, KServe V2 and the SageMaker container contract.

Its flags keep TF Serving's underscore names, the only spelling its help shows; dashed spellings and TF Serving's
``--flag=true|false`` booleans are accepted too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

from servekit.config.grpc import DEFAULT_MAX_MESSAGE_BYTES, GrpcConfig
from servekit.config.loading import load_auth_token_file, load_batching_file, load_model_config_file
from servekit.config.models import (
    BatchingConfig,
    CaptureConfig,
    ConnectionLimits,
    DeviceRequest,
    ModelConfig,
    OverloadConfig,
    RuntimeOptions,
    ServerConfig,
)
from servekit.errors import ConfigError
from servekit.launch.http_stack import http_stack

if TYPE_CHECKING:
    from servekit.accelerators.inventory import Gpu

# The command, registered with its flag-rewriting class; servekit.cli.main lists it and builds it from here.
serve_app = typer.Typer(add_completion=False)


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


@serve_app.command(cls=_TfServingFlags)
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
    overload_target_ms: Annotated[
        float,
        _tf(
            "--overload_target_ms",
            help="Admission under overload: while admitted requests keep waiting longer than this (server time less"
            " model time), fewer are let in and the rest get 503 with Retry-After before their body is read"
            " (0: off).",
        ),
    ] = 30.0,
    overload_interval_ms: Annotated[
        float,
        _tf("--overload_interval_ms", help="How long the least wait must stay over --overload_target_ms."),
    ] = 100.0,
    inline_run_limit_micros: Annotated[
        int,
        _tf(
            "--inline_run_limit_micros",
            help="A native model whose runs measure under this runs on the event loop (0: never); with batching, only a"
            " request alone in the server.",
        ),
    ] = 50,
    device: Annotated[
        str,
        _tf(
            "--device",
            help="auto (a GPU when the model's runtime can use one, else the CPU), cpu, or cuda[:N] (refuse to "
            "start without that GPU).",
        ),
    ] = "auto",
    per_process_gpu_memory_fraction: Annotated[
        float,
        _tf(
            "--per_process_gpu_memory_fraction",
            help="Share of each GPU's memory this process may take, 0-1 (0 = grow on demand).",
        ),
    ] = 0.0,
    intra_op: Annotated[
        int,
        _tf(
            "--tensorflow_intra_op_parallelism",
            help="Framework intra-op threads (onnxruntime, torch, XGBoost, LightGBM, TensorFlow); 0: one per CPU, "
            "or each worker's share of the CPUs with --workers.",
        ),
    ] = 0,
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
    capture_flush_seconds: Annotated[
        float,
        _tf(
            "--capture_flush_seconds",
            help="Most seconds a captured record waits before its file is published and readable.",
        ),
    ] = 5.0,
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
            help="jsonl (SageMaker's JSON Lines layout) or parquet (a column per feature; needs servekit\\[monitor]).",
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
            inline_run_limit_micros=inline_run_limit_micros,
            overload=OverloadConfig(target_ms=overload_target_ms, interval_ms=overload_interval_ms),
            runtime=RuntimeOptions(
                intra_op_threads=intra_op,
                inter_op_threads=inter_op,
                device=DeviceRequest.parse(device),
                gpu_memory_fraction=per_process_gpu_memory_fraction,
            ),
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
                capture_flush_seconds,
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
        check_device(config.runtime.device)
    except ConfigError as exc:
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None
    from servekit.launch.serve import run_server

    try:
        run_server(config, log_level, grpc, stack)
    except ConfigError as exc:  # a port another process holds: one line, as for a bad flag
        typer.echo(f"servekit: {exc}", err=True)
        raise typer.Exit(2) from None


def check_device(request: DeviceRequest, gpus: Callable[[], Sequence[Gpu]] | None = None) -> None:
    """At start: an explicit ``cuda[:N]`` needs that GPU on this machine (:class:`ConfigError` otherwise); ``auto``
    on a machine without one says once that it serves on the CPU. Each runtime decides again per model."""
    if request.kind == "cpu":
        return
    from servekit.serving.runtime.devices import machine_gpus

    found = (gpus or machine_gpus)()
    if request.kind == "cuda":
        index = request.index or 0
        if not found:
            raise ConfigError(
                f"--device {request.describe()}: this machine has no GPU (neither NVML nor nvidia-smi lists one, "
                "or CUDA_VISIBLE_DEVICES hides them); use --device auto or --device cpu"
            )
        if index >= len(found):
            raise ConfigError(
                f"--device {request.describe()}: this process sees {len(found)} GPU(s), indices 0-{len(found) - 1}"
            )
    elif not found:
        logging.getLogger("servekit.serve").info("--device auto: no GPU on this machine, serving on the CPU")


def _capture_config(
    destination: str | None,
    percentage: float,
    mode: str,
    buffer: int,
    partition_prefix: str | None = None,
    capture_format: str = "jsonl",
    flush_seconds: float = 5.0,
) -> CaptureConfig | None:
    if destination is None:
        return None
    if mode not in ("input", "output", "both"):
        raise ConfigError(f"--capture_mode must be input, output or both, got {mode!r}")
    if capture_format == "parquet":  # at startup, not on the first captured request
        from servekit.serving.capture.parquet import require_pyarrow

        require_pyarrow()
    return CaptureConfig(
        destination=_abs(destination),
        sampling_percentage=percentage,
        capture_input=mode in ("input", "both"),
        capture_output=mode in ("output", "both"),
        buffer_records=buffer,
        partition_prefix=partition_prefix,
        format=capture_format,
        flush_seconds=flush_seconds,
    )


def _abs(path: str) -> str:
    return path if "://" in path else str(Path(path).resolve())


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
