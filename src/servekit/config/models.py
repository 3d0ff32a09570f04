"""Frozen configuration objects. Built and validated at the edge (``loading``), passed down by hand."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from servekit.errors import ConfigError

LABEL_RE = re.compile(r"^[a-zA-Z0-9_]+$")
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclass(frozen=True, slots=True)
class VersionPolicy:
    """TF Serving's model_version_policy: ``latest{num_versions}``, ``all{}`` or ``specific{versions}``."""

    kind: Literal["latest", "all", "specific"] = "latest"
    num_versions: int = 1
    versions: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.kind == "latest" and self.num_versions < 1:
            raise ConfigError(f"latest{{num_versions}} must be >= 1, got {self.num_versions}")
        if self.kind == "specific" and not self.versions:
            raise ConfigError("specific{versions} needs at least one version")

    def describe(self) -> str:
        if self.kind == "latest":
            return f"latest{{{self.num_versions}}}"
        if self.kind == "all":
            return "all{}"
        return "specific{" + ",".join(str(v) for v in sorted(self.versions)) + "}"


_DEVICE_RE = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """``servekit serve --device``: ``auto`` (a GPU when the runtime can use one, else the CPU), ``cpu``, or
    ``cuda``/``cuda:N`` (that visible GPU, refusing to start without it). ``index`` None = the first GPU."""

    kind: Literal["auto", "cpu", "cuda"] = "auto"
    index: int | None = None

    def __post_init__(self) -> None:
        if self.index is not None and (self.kind != "cuda" or self.index < 0):
            raise ConfigError(f"only cuda takes a device index (cuda:N, N >= 0), got {self.describe()}")

    @classmethod
    def parse(cls, text: str) -> DeviceRequest:
        match = _DEVICE_RE.match(text.strip().lower())
        if match is None or (match.group(2) is not None and match.group(1) != "cuda"):
            raise ConfigError(f"--device must be auto, cpu, cuda or cuda:N (N a GPU index), got {text!r}")
        kind = match.group(1)
        index = int(match.group(2)) if match.group(2) is not None else None
        return cls("auto" if kind == "auto" else "cpu" if kind == "cpu" else "cuda", index)

    def describe(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """Knobs handed to runtimes when they load a version (thread pools, device, GPU memory)."""

    intra_op_threads: int = 0  # 0 = runtime default
    inter_op_threads: int = 0
    # onnxruntime's pool threads busy-wait between runs by default; on a server that shares its cores with
    # the event loop that spinning steals the CPU the HTTP side needs, so it is off unless asked for.
    allow_spinning: bool = False
    device: DeviceRequest = field(default_factory=DeviceRequest)
    # TF Serving's --per_process_gpu_memory_fraction: the share of each GPU's memory this process may take;
    # 0 = grow on demand (TensorFlow's memory growth, onnxruntime's arena growing as needed).
    gpu_memory_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.gpu_memory_fraction <= 1.0:  # also refuses NaN
            raise ConfigError(
                f"per_process_gpu_memory_fraction must be within 0..1 (0 = grow on demand), "
                f"got {self.gpu_memory_fraction}"
            )


@dataclass(frozen=True, slots=True)
class BatchingConfig:
    """TF Serving's BatchingParameters plus servekit's latency target (adaptive mode).

    ``max_enqueued_batches`` bounds the queue at ``max_enqueued_batches * max_batch_size`` rows; a request that
    does not fit is refused at once (503). ``target_p99_ms`` turns on the adaptive mode: the wait before a
    batch is released is chosen from a learned cost model so the target holds, ``batch_timeout_micros``
    remaining the upper bound.
    """

    max_batch_size: int = 64
    batch_timeout_micros: int = 1000
    max_enqueued_batches: int = 64
    num_batch_threads: int = 2
    allowed_batch_sizes: tuple[int, ...] = ()
    enable_large_batch_splitting: bool = True
    max_execution_batch_size: int = 0  # 0 = max_batch_size
    target_p99_ms: float | None = None

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.batch_timeout_micros < 0:
            raise ConfigError("batch_timeout_micros must be >= 0")
        if self.max_enqueued_batches < 1:
            raise ConfigError("max_enqueued_batches must be >= 1")
        if self.num_batch_threads < 1:
            raise ConfigError("num_batch_threads must be >= 1")
        sizes = self.allowed_batch_sizes
        if sizes:
            if list(sizes) != sorted(set(sizes)) or sizes[0] < 1:
                raise ConfigError(f"allowed_batch_sizes must be increasing positive integers, got {list(sizes)}")
            if sizes[-1] != self.execution_batch_size:
                raise ConfigError(
                    f"the last allowed_batch_sizes entry ({sizes[-1]}) must equal the maximum execution batch size "
                    f"({self.execution_batch_size})"
                )
        if self.target_p99_ms is not None and self.target_p99_ms <= 0:
            raise ConfigError("target_p99_ms must be > 0")

    @property
    def execution_batch_size(self) -> int:
        """The most rows one model call gets."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size:
            return self.max_execution_batch_size
        return self.max_batch_size

    @property
    def queue_capacity_rows(self) -> int:
        return self.max_enqueued_batches * self.max_batch_size


@dataclass(frozen=True, slots=True)
class CaptureConfig:
    """Data capture in SageMaker's format: which requests, what of them, where, and how much to buffer."""

    destination: str
    enabled: bool = True
    sampling_percentage: float = 100.0
    capture_input: bool = True
    capture_output: bool = True
    buffer_records: int = 10_000  # beyond this, records are dropped and counted, never blocking a request
    # the most a captured record waits before it is readable: its file is sealed and published within this
    flush_seconds: float = 5.0
    seed: int | None = None  # sampling RNG seed, for tests
    # When set, partitions are ``<destination>/<prefix>/yyyy/mm/dd/hh`` instead of ``<model>/<version>/...``:
    # an endpoint's instances capture under ``<endpoint>/<variant>`` as SageMaker lays it out.
    partition_prefix: str | None = None
    format: str = "jsonl"  # "jsonl": SageMaker's JSON Lines layout; "parquet": a column per feature (pyarrow)

    def __post_init__(self) -> None:
        if self.format not in ("jsonl", "parquet"):
            raise ConfigError(f"capture format must be jsonl or parquet, got {self.format!r}")
        if self.partition_prefix is not None:
            parts = self.partition_prefix.split("/")
            if any(part in ("", ".", "..") for part in parts) or "\\" in self.partition_prefix:
                raise ConfigError(
                    "capture partition_prefix must be relative folder names separated by '/' "
                    f"(no empty, '.' or '..' parts), got {self.partition_prefix!r}"
                )
        if not 0.0 <= self.sampling_percentage <= 100.0:
            raise ConfigError(f"sampling_percentage must be within 0..100, got {self.sampling_percentage}")
        if not (self.capture_input or self.capture_output):
            raise ConfigError("capture needs at least one of input and output")
        if self.buffer_records < 1:
            raise ConfigError("buffer_records must be >= 1")
        if self.flush_seconds <= 0:
            raise ConfigError("flush_seconds must be > 0")
        if not self.destination:
            raise ConfigError("capture needs a destination")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    base_path: str
    platform: str = ""  # "" = choose from the files in the version directory
    version_policy: VersionPolicy = field(default_factory=VersionPolicy)
    version_labels: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    batching: BatchingConfig | None = None  # None = the server's batching settings

    def __reduce__(self) -> tuple[type[ModelConfig], tuple[object, ...]]:
        # MappingProxyType does not pickle; worker processes receive configs pickled.
        return (
            ModelConfig,
            (self.name, self.base_path, self.platform, self.version_policy, dict(self.version_labels), self.batching),
        )

    def __post_init__(self) -> None:
        if not self.name or not MODEL_NAME_RE.match(self.name):
            raise ConfigError(f"model name {self.name!r} must match {MODEL_NAME_RE.pattern}")
        if not self.base_path:
            raise ConfigError(f"model {self.name!r} needs a base_path")
        for label, version in self.version_labels.items():
            if not LABEL_RE.match(label):
                raise ConfigError(f"model {self.name!r}: label {label!r} must match {LABEL_RE.pattern}")
            if version < 0:
                raise ConfigError(f"model {self.name!r}: label {label!r} points at negative version")
        object.__setattr__(self, "version_labels", MappingProxyType(dict(self.version_labels)))


@dataclass(frozen=True, slots=True)
class AuthTokens:
    """Bearer tokens for ``serve``: ``inference`` ones may call the inference endpoints, ``admin`` ones the
    status, metadata and metrics endpoints; a token in both sets may call both. Health checks need none.

    The tokens never appear in a repr (configs are logged and pickled to worker processes)."""

    inference: frozenset[str] = field(default=frozenset(), repr=False)
    admin: frozenset[str] = field(default=frozenset(), repr=False)
    source: str = ""  # where they came from, for messages

    def __post_init__(self) -> None:
        where = f"{self.source}: " if self.source else ""
        if not (self.inference or self.admin):
            raise ConfigError(f"{where}no bearer tokens given")
        for token in self.inference | self.admin:
            if not token or not token.isprintable() or any(c.isspace() for c in token) or not token.isascii():
                raise ConfigError(f"{where}a bearer token must be printable ASCII without spaces")
            if len(token) < 16:
                raise ConfigError(f"{where}a bearer token must be at least 16 characters long")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a connection may take to send a request, and how many may be open (per worker process).

    A timeout of 0 turns it off; ``max_connections`` 0 means derived from the process's file limit. Between
    requests on a kept-alive connection uvicorn's keep-alive timeout (5 s) applies."""

    idle_timeout_seconds: float = 10.0  # connection open, first byte of the first request not yet sent
    header_timeout_seconds: float = 10.0  # first byte of a request to the end of its head
    body_timeout_seconds: float = 60.0  # end of the head to the end of the body (16 MiB in 60 s is 280 KB/s)
    max_connections: int = 0

    def __post_init__(self) -> None:
        for name in ("idle_timeout_seconds", "header_timeout_seconds", "body_timeout_seconds"):
            value = getattr(self, name)
            if not value >= 0:  # also refuses NaN
                raise ConfigError(f"{name} must be >= 0 (0 = no timeout), got {value}")
        if self.max_connections < 0:
            raise ConfigError(f"max_connections must be >= 0 (0 = from the file limit), got {self.max_connections}")


@dataclass(frozen=True, slots=True)
class OverloadConfig:
    """Admission under overload (inference/overload.py): inference requests a worker lets in at once, a limit
    that shrinks while admitted requests wait longer than ``target_ms`` (least wait over ``interval_ms``,
    CoDel-style), grows back while it refuses requests and they do not, and falls toward twice its use (not under
    ``burst_limit``) while mostly unused. Past it a request is answered 503 with Retry-After before its
    body is read. ``target_ms`` 0 turns the limit off (only ``max_queued_requests`` / ``max_enqueued_batches``
    refuse, after the body is decoded)."""

    # A standing wait longer than this (server time less model time) is overload. 30 rather than 50: the MLP's p99
    # at c=400 fell by 15-25% with goodput kept (benchmarks/OVERLOAD_RESULTS.md, 2026-12-02 15:05)
    target_ms: float = 30.0
    interval_ms: float = 100.0  # CoDel's interval: how long the least wait must stay over the target
    min_limit: int = 4  # requests always let in: enough to keep the model threads and batches busy
    max_limit: int = 1024  # the limit's start and ceiling
    burst_limit: int = 64  # the least a mostly unused limit falls to: what a quiet server takes at once
    # ... nor under what the answer rate brings in this long: a burst's headroom, kept apart from the target so that
    # a tighter target does not refuse more of a jump from idle on a fast model (benchmarks/burst_bench.py)
    burst_ms: float = 50.0

    def __post_init__(self) -> None:
        if not self.target_ms >= 0:
            raise ConfigError(f"overload target_ms must be >= 0 (0 = off), got {self.target_ms}")
        if not self.interval_ms > 0:
            raise ConfigError(f"overload interval_ms must be > 0, got {self.interval_ms}")
        if self.burst_limit < 1:
            raise ConfigError(f"overload burst_limit must be >= 1, got {self.burst_limit}")
        if not self.burst_ms >= 0:
            raise ConfigError(f"overload burst_ms must be >= 0, got {self.burst_ms}")
        if not 1 <= self.min_limit <= self.max_limit:
            raise ConfigError(
                f"overload limits need 1 <= min_limit <= max_limit, got {self.min_limit} and {self.max_limit}"
            )

    @property
    def enabled(self) -> bool:
        return self.target_ms > 0


@dataclass(frozen=True, slots=True)
class ServerConfig:
    models: tuple[ModelConfig, ...] = ()
    model_config_file: str | None = None
    # Loopback unless asked: anything else is reachable from the network (and warned about without auth).
    host: str = "127.0.0.1"
    rest_api_port: int = 8501
    sagemaker_port: int | None = None
    file_system_poll_wait_seconds: float = 1.0  # 0 = only at start, < 0 = never
    model_config_file_poll_wait_seconds: float = 0.0  # 0 = read once
    max_num_load_retries: int = 5
    load_retry_interval_seconds: float = 60.0
    # A JSON body takes tens of times its size in memory while it is decoded; 16 MiB is 2.5x SageMaker's 6 MB.
    max_request_bytes: int = 16 * 1024 * 1024
    num_inference_threads: int = 4
    # Without a batch queue: requests per model that may wait for a model thread; more answer 503 at once.
    max_queued_requests: int = 128
    # Without batching: a request whose model runs are measured shorter than this runs on the event loop instead
    # of a model thread, whose hand-off costs more than such a run (runtime/inline.py); 0 = always a thread.
    inline_run_limit_micros: int = 50
    runtime: RuntimeOptions = field(default_factory=RuntimeOptions)
    sagemaker_default_accept: str = "application/json"
    batching: BatchingConfig | None = None  # None = batching off (TF Serving's --enable_batching=false)
    request_timeout_ms: int = 0  # 0 = no deadline; requests may set x-servekit-timeout-ms
    workers: int = 1
    metrics_multiprocess_dir: str | None = None  # set by the worker supervisor
    # > 0: a worker accepts connections only once its models are loaded (or this long has passed), so a
    # worker that is starting or replacing a dead one never answers 503 for a model its siblings serve.
    wait_for_models_seconds: float = 0.0
    enable_model_warmup: bool = True
    num_request_iterations_for_warmup: int = 1
    capture: CaptureConfig | None = None
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    overload: OverloadConfig = field(default_factory=OverloadConfig)
    auth: AuthTokens | None = None  # None = no authentication

    multi_model: bool = False  # SageMaker's multi-model container API: models loaded on request
    multi_model_memory_bytes: int | None = None  # resident memory the process may reach with its models

    def __post_init__(self) -> None:
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"model names must be unique; repeated: {', '.join(dupes)}")
        if self.max_num_load_retries < 0:
            raise ConfigError("max_num_load_retries must be >= 0")
        if self.max_request_bytes <= 0:
            raise ConfigError("max_request_bytes must be > 0")
        if self.workers < 1:
            raise ConfigError("workers must be >= 1")
        if self.request_timeout_ms < 0:
            raise ConfigError("request_timeout_ms must be >= 0")
        if self.num_request_iterations_for_warmup < 1:
            raise ConfigError("num_request_iterations_for_warmup must be >= 1")
        if self.num_inference_threads < 1:
            raise ConfigError("num_inference_threads must be >= 1")
        if self.multi_model and self.workers != 1:
            raise ConfigError("--multi_model needs --workers 1: each worker would hold its own copy of every model")
        if self.multi_model_memory_bytes is not None and self.multi_model_memory_bytes <= 0:
            raise ConfigError("multi_model_memory_bytes must be > 0")
        if self.max_queued_requests < 0:
            raise ConfigError("max_queued_requests must be >= 0")
        if self.inline_run_limit_micros < 0:
            raise ConfigError("inline_run_limit_micros must be >= 0 (0 = always run on a model thread)")
        for port in (self.rest_api_port, self.sagemaker_port):
            if port is not None and not 0 <= port <= 65535:
                raise ConfigError(f"port {port} is out of range")
