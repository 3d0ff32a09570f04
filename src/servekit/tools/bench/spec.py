"""What one ``servekit bench`` run asks for: the parsed, checked options, independent of the command line."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal, cast
from urllib.parse import urlsplit

from servekit.errors import ConfigError

Protocol = Literal["tfserving", "kserve", "sagemaker"]
Loop = Literal["closed", "open"]
Engine = Literal["asyncio", "wrk"]
PROTOCOLS: tuple[Protocol, ...] = ("tfserving", "kserve", "sagemaker")
LOOPS: tuple[Loop, ...] = ("closed", "open")
ENGINES: tuple[Engine, ...] = ("asyncio", "wrk")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``"10s"``, ``"500ms"``, ``"2m"``, ``"1h"`` or bare seconds, as seconds."""
    m = _DURATION.match(text)
    if m is None:
        raise ConfigError(f"duration {text!r} is not a number with an optional unit (ms, s, m, h), e.g. 10s")
    return float(m[1]) * _UNIT_S[m[2]]


def parse_levels(text: str) -> tuple[float, ...]:
    """``"100,500,1000"`` as positive numbers (rates or concurrencies, one per phase)."""
    levels: list[float] = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise ConfigError(f"--phases entry {part.strip()!r} is not a number") from None
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"--phases entry {part.strip()!r} must be positive")
        levels.append(value)
    return tuple(levels)


@dataclass(frozen=True)
class Target:
    """Where requests go: scheme, host, port and the Host header value."""

    host: str
    port: int
    tls: bool

    @classmethod
    def from_url(cls, url: str) -> Target:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--url {url!r} must look like http://host:port")
        if parts.path not in ("", "/"):
            raise ConfigError(f"--url {url!r} must not have a path; the protocol decides it")
        tls = parts.scheme == "https"
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls)

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == (443 if self.tls else 80) else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.authority}"


@dataclass(frozen=True)
class BenchSpec:
    """One benchmark: a workload (protocol, model, bodies) driven through one or more load phases."""

    url: str = "http://127.0.0.1:8501"
    protocol: Protocol = "tfserving"
    model: str = ""
    version: int | None = None
    rows: int = 1
    loop: Loop = "closed"
    levels: tuple[float, ...] = (1.0,)  # concurrency (closed) or requests/s (open), one per phase
    duration_s: float | None = 10.0  # per phase; None with ``requests`` means "until that many are done"
    requests: int | None = None  # per phase
    max_outstanding: int = 1024  # open loop: requests in flight at most; later ones are dropped, not queued
    timeout_s: float = 30.0
    body_file: str | None = None
    seed: int = 0
    binary: bool = False
    csv: bool = False
    headers: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    engine: Engine = "asyncio"
    endpoint_name: str | None = None  # InvokeEndpoint on servekit up (or AWS), signed per request
    target_model: str | None = None
    target_variant: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    region: str = "us-east-1"
    payload: str | None = None  # PY_FILE:FUNCTION, called for each request's body
    knee_factor: float = 2.0  # --phases: the knee is where p95 exceeds this times its low-load level
    slo_ms: float | None = None  # --phases: the highest rate whose p95 met this

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"--protocol {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if self.loop not in LOOPS:
            raise ConfigError(f"--loop {self.loop!r} is not one of {', '.join(LOOPS)}")
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        if not self.model and not self.endpoint_name:
            raise ConfigError("--model (or --endpoint-name) is required")
        if (self.endpoint_name or self.payload) and self.engine == "wrk":
            raise ConfigError("--endpoint-name and --payload build each request as it is sent: use --engine asyncio")
        if (self.target_model or self.target_variant) and not self.endpoint_name:
            raise ConfigError("--target-model/--target-variant go with --endpoint-name")
        if not self.knee_factor > 1:
            raise ConfigError("--knee-factor must exceed 1")
        if self.slo_ms is not None and not self.slo_ms > 0:
            raise ConfigError("--slo-ms must be positive")
        if self.rows < 1:
            raise ConfigError("--rows must be at least 1")
        if self.version is not None and self.version < 0:
            raise ConfigError("--version must be a non-negative integer")
        if not self.levels:
            raise ConfigError("no load level given")
        if self.loop == "closed" and any(lv != int(lv) for lv in self.levels):
            raise ConfigError("closed-loop levels are concurrencies: whole numbers")
        if self.duration_s is None and self.requests is None:
            raise ConfigError("give --duration or --requests")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ConfigError("--duration must be positive")
        if self.requests is not None and self.requests < 1:
            raise ConfigError("--requests must be at least 1")
        if self.max_outstanding < 1:
            raise ConfigError("--max_outstanding must be at least 1")
        if self.timeout_s <= 0:
            raise ConfigError("--timeout must be positive")
        if self.binary and self.protocol != "kserve":
            raise ConfigError("--binary is KServe V2's binary tensor extension: use it with --protocol kserve")
        if self.binary and self.body_file:
            raise ConfigError("--binary generates its bodies from the model's metadata; drop --body_file")
        if self.csv and self.protocol != "sagemaker" and not self.endpoint_name:  # an endpoint speaks SageMaker
            raise ConfigError(
                "--csv sends SageMaker text/csv bodies: use it with --protocol sagemaker or --endpoint-name"
            )
        if self.engine == "wrk":
            if self.loop != "closed":
                raise ConfigError("--engine wrk drives a closed loop only (wrk has no fixed-rate mode); drop --rate")
            if self.duration_s is None:
                raise ConfigError("--engine wrk runs for a duration; give --duration, not only --requests")
            if self.requests is not None:
                raise ConfigError("--engine wrk cannot stop after N requests; drop --requests")
        Target.from_url(self.url)

    @property
    def target(self) -> Target:
        return Target.from_url(self.url)


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ConfigError(f"--header {text!r} must look like 'Name: value'")
    return name.strip(), value.strip()


def spec_from_options(
    *,
    url: str,
    protocol: str,
    model: str,
    version: int | None,
    rows: int,
    concurrency: int | None,
    rate: float | None,
    loop: str | None,
    duration: str | None,
    requests: int | None,
    phases: str | None,
    phase_duration: str | None,
    max_outstanding: int,
    body_file: str | None,
    seed: int,
    binary: bool,
    csv: bool,
    headers: list[str],
    timeout: str,
    engine: str,
    **more: object,
) -> BenchSpec:
    """The command line's options as a spec. The loop is open with --rate (or --loop open), else closed;
    --phases lists rates (open) or concurrencies (closed), each run for --phase_duration (or --duration)."""
    mode = loop or ("open" if rate is not None else "closed")
    if mode == "closed" and rate is not None:
        raise ConfigError("--rate sets an open loop's request rate; drop --loop closed or --rate")
    if mode == "open" and concurrency is not None:
        raise ConfigError(
            "--concurrency is the closed loop's; an open loop bounds requests in flight by --max_outstanding"
        )
    if phases:
        if rate is not None or concurrency is not None:
            raise ConfigError("give the load levels either as --phases or as --rate/--concurrency, not both")
        levels = parse_levels(phases)
        length = phase_duration or duration
    else:
        if phase_duration:
            raise ConfigError("--phase_duration goes with --phases; use --duration for a single phase")
        if mode == "open" and rate is None:
            raise ConfigError("an open loop needs --rate (requests/s) or --phases")
        if rate is not None and not (rate > 0 and math.isfinite(rate)):
            raise ConfigError("--rate must be a positive number of requests/s")
        if concurrency is not None and concurrency < 1:
            raise ConfigError("--concurrency must be at least 1")
        levels = (rate,) if rate is not None else (float(concurrency or 1),)
        length = duration
    return BenchSpec(
        url=url,
        protocol=cast(Protocol, protocol),
        model=model,
        version=version,
        rows=rows,
        loop=cast(Loop, mode),
        levels=levels,
        duration_s=parse_duration(length) if length else (None if requests is not None else 10.0),
        requests=requests,
        max_outstanding=max_outstanding,
        timeout_s=parse_duration(timeout),
        body_file=body_file,
        seed=seed,
        binary=binary,
        csv=csv,
        headers=tuple(parse_header(h) for h in headers),
        engine=cast(Engine, engine),
        **more,  # type: ignore[arg-type]
    )
