"""What one recommendation asks for, checked at the edge (the command line and the API both build it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from servekit.errors import ConfigError

DEFAULT_BATCHING = "off,8:1000,32:4000"
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16)


@dataclass(frozen=True, slots=True)
class BatchingChoice:
    """Dynamic batching off, or on with ``max_batch_size`` and ``batch_timeout_micros`` (written ``SIZE:MICROS``)."""

    max_batch_size: int = 0  # 0 = off
    batch_timeout_micros: int = 0

    @property
    def enabled(self) -> bool:
        return self.max_batch_size > 0

    @property
    def label(self) -> str:
        return f"{self.max_batch_size}:{self.batch_timeout_micros}" if self.enabled else "off"

    def describe(self) -> str:
        if not self.enabled:
            return "batching off"
        return f"batching max_batch_size={self.max_batch_size}, batch_timeout_micros={self.batch_timeout_micros}"

    def parameters_text(self, num_batch_threads: int) -> str:
        """TF Serving's BatchingParameters text (``--batching_parameters_file``)."""
        return (
            f"max_batch_size {{ value: {self.max_batch_size} }}\n"
            f"batch_timeout_micros {{ value: {self.batch_timeout_micros} }}\n"
            f"num_batch_threads {{ value: {max(1, num_batch_threads)} }}\n"
        )


def parse_batching(text: str) -> tuple[BatchingChoice, ...]:
    """``off,8:1000,32:4000``: settings to try, each ``off`` or ``MAX_BATCH_SIZE:BATCH_TIMEOUT_MICROS``."""
    choices: list[BatchingChoice] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.lower() == "off":
            choice = BatchingChoice()
        else:
            size, sep, micros = part.partition(":")
            try:
                choice = BatchingChoice(int(size), int(micros) if sep else 1000)
            except ValueError:
                raise ConfigError(
                    f"--batching entry {part!r} is neither 'off' nor MAX_BATCH_SIZE:BATCH_TIMEOUT_MICROS (e.g. 8:1000)"
                ) from None
            if choice.max_batch_size < 1 or choice.batch_timeout_micros < 0:
                raise ConfigError(f"--batching entry {part!r}: the batch size is >= 1 and the timeout >= 0")
        if choice not in choices:
            choices.append(choice)
    if not choices:
        raise ConfigError("--batching names no setting to try (e.g. off,8:1000)")
    return tuple(choices)


@dataclass(frozen=True, slots=True)
class RecommendSpec:
    model_dir: str  # a servekit model base (<dir>/<version>/...)
    model_name: str
    instance_types: tuple[str, ...]
    target_qps: float
    slo_ms: float
    slo_percentile: str = "p99"
    utilization: float = 0.7
    payload: str | None = None  # request bodies, one per line (else generated from the model's signature)
    content_type: str = "application/json"
    rates: tuple[float, ...] = ()  # fixed offered rates instead of the search
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY  # the closed-loop sweep (throughput vs concurrency)
    batching: tuple[BatchingChoice, ...] = (BatchingChoice(),)
    phase_s: float = 5.0
    max_trials: int = 8
    reserve_cpus: int = 1  # CPUs left to the load generator when the machine is small

    def __post_init__(self) -> None:
        if not self.instance_types:
            raise ConfigError("name at least one instance type (--instance-types ml.c5.large,ml.m5.xlarge)")
        for name, value in (("--target-qps", self.target_qps), ("--p99-ms", self.slo_ms)):
            if not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"{name} must be a positive number, not {value!r}")
        if self.slo_percentile not in ("p95", "p99"):
            raise ConfigError(f"the latency percentile is p95 or p99, not {self.slo_percentile!r}")
        if not 0 < self.utilization <= 1:
            raise ConfigError(f"--utilization is a fraction in (0, 1], not {self.utilization!r}")
        if not (self.phase_s > 0 and math.isfinite(self.phase_s)):
            raise ConfigError("--phase-duration must be positive")
        if self.max_trials < 1:
            raise ConfigError("--max-trials must be at least 1")
        if any(not (r > 0 and math.isfinite(r)) for r in self.rates):
            raise ConfigError("--phases are offered rates in requests/s: positive numbers")
        if any(c < 1 for c in self.concurrency):
            raise ConfigError("--concurrency levels are whole numbers >= 1")
        if not self.batching:
            raise ConfigError("name at least one batching setting (off, or SIZE:MICROS)")
        if self.reserve_cpus < 0:
            raise ConfigError("--reserve-cpus cannot be negative")


def check_model_dir(path: str) -> str:
    """``path`` as an absolute model base that has at least one integer version directory; ConfigError otherwise."""
    base = Path(path).expanduser()
    if not base.is_dir():
        raise ConfigError(f"--model {path}: no such directory (a model base holds <version>/ directories)")
    if not any(child.is_dir() and child.name.isdigit() for child in base.iterdir()):
        raise ConfigError(f"--model {path}: no version directory (e.g. {path}/1/) under it")
    return str(base.resolve())
