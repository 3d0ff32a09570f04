"""Per-phase measurements: raw samples while the load runs, then percentiles, the report dict and its table.

The JSON report (``--json``) has stable keys; ``SCHEMA`` changes if any key changes meaning::

    {"schema": "servekit.bench/1",
     "interrupted": bool,                   # Ctrl-C ended the run early: the last phase is partial
     "target": {"url", "protocol", "model", "version", "method", "path", "engine", "loop", "rows_per_request",
                "distinct_bodies",
                # only when used: "endpoint_name", "target_model", "payload", "payload_bodies_per_s"
               },
     "phases": [{
        "loop": "closed" | "open",
        "concurrency": int | null,          # closed loop
        "target_rate": float | null,        # open loop, requests/s asked for
        "max_outstanding": int | null,      # open loop bound on requests in flight
        "duration_s": float,                # first send to last response
        "requests": int,                    # answered with any HTTP status, plus connection errors and timeouts
        "ok": int,                          # 2xx
        "dropped": int,                     # open loop: not sent because max_outstanding were in flight
        "errors": {"<status>": int, "connection": int, "timeout": int},   # only non-zero entries
                                            # ("non-2xx" instead of statuses if wrk's script printed nothing)
        "throughput": {"requests_per_s", "ok_per_s", "rows_per_s"},
        "latency_ms": {"mean", "p50", "p90", "p95", "p99", "max"} | null,  # over 2xx responses
        "server_ms": {"samples": int,       # 2xx responses that carried x-servekit-total-ms
                      "queue": {"mean", "p99"}, "model": {...}, "total": {...},
                      "overhead": {...}}    # client latency - server total: network, HTTP, client
                     | null}]}

Percentiles interpolate linearly between the closest ranks (numpy's default ``linear`` method).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from rich.console import Console
from rich.table import Table

from servekit.tools.bench.client import Response

SCHEMA = "servekit.bench/1"
LATENCY_KEYS = ("mean", "p50", "p90", "p95", "p99", "max")
SERVER_PHASES = ("queue", "model", "total", "overhead")
_QUEUE, _MODEL, _TOTAL = b"x-servekit-queue-ms", b"x-servekit-model-ms", b"x-servekit-total-ms"


def percentile(sorted_values: Sequence[float] | npt.NDArray[np.float64], q: float) -> float:
    """The ``q``-th percentile (0..100) of ascending values, interpolating linearly between closest ranks."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    rank = (n - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    low, high = float(sorted_values[lo]), float(sorted_values[hi])
    return low + (high - low) * (rank - lo)


def summarize(values: Iterable[float]) -> dict[str, float] | None:
    """mean, p50, p90, p95, p99 and max of ``values``; None when there are none."""
    arr = np.sort(np.fromiter(values, dtype=np.float64))
    if arr.size == 0:
        return None
    out = {"mean": float(arr.mean())}
    for q in (50, 90, 95, 99):
        out[f"p{q}"] = percentile(arr, q)
    out["max"] = float(arr[-1])
    return out


def _mean_p99(values: Sequence[float]) -> dict[str, float]:
    arr = np.sort(np.asarray(values, dtype=np.float64))
    return {"mean": float(arr.mean()), "p99": percentile(arr, 99)}


@dataclass
class Samples:
    """What one phase's responses measured, appended on the hot path (plain lists: cheapest per append)."""

    latencies_s: list[float] = field(default_factory=list)  # 2xx only
    statuses: dict[int, int] = field(default_factory=dict)
    connection_errors: int = 0
    timeouts: int = 0
    dropped: int = 0
    ok_rows: int = 0
    server: tuple[list[float], list[float], list[float], list[float]] = field(
        default_factory=lambda: ([], [], [], [])  # queue, model, total, overhead (ms)
    )

    @property
    def done(self) -> int:
        return sum(self.statuses.values()) + self.connection_errors + self.timeouts

    @property
    def failed(self) -> int:
        return self.done - len(self.latencies_s)

    def response(self, latency_s: float, resp: Response, rows: int) -> None:
        status = resp.status
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if 200 <= status < 300:
            self.latencies_s.append(latency_s)
            self.ok_rows += rows
            total = resp.headers.get(_TOTAL)
            if total is not None:
                try:
                    t = float(total)
                    q = float(resp.headers.get(_QUEUE, b"nan"))
                    m = float(resp.headers.get(_MODEL, b"nan"))
                except ValueError:  # not servekit's headers: no split for this response
                    return
                queue, model, tot, overhead = self.server
                queue.append(q)
                model.append(m)
                tot.append(t)
                overhead.append(latency_s * 1e3 - t)


@dataclass
class PhaseStats:
    """One phase's final numbers, from raw ``Samples`` or from an engine that reports percentiles itself."""

    loop: str
    concurrency: int | None
    target_rate: float | None
    max_outstanding: int | None
    duration_s: float
    requests: int
    ok: int
    ok_rows: int
    dropped: int
    errors: dict[str, int]
    latency_ms: dict[str, float] | None
    server_ms: dict[str, Any] | None

    @classmethod
    def from_samples(
        cls,
        s: Samples,
        *,
        loop: str,
        duration_s: float,
        concurrency: int | None = None,
        target_rate: float | None = None,
        max_outstanding: int | None = None,
    ) -> PhaseStats:
        errors = {str(k): v for k, v in sorted(s.statuses.items()) if not 200 <= k < 300}
        if s.connection_errors:
            errors["connection"] = s.connection_errors
        if s.timeouts:
            errors["timeout"] = s.timeouts
        lat = summarize(x * 1e3 for x in s.latencies_s)
        server: dict[str, Any] | None = None
        if s.server[2]:
            server = {"samples": len(s.server[2])}
            for name, values in zip(SERVER_PHASES, s.server, strict=True):
                finite = [v for v in values if math.isfinite(v)]
                server[name] = _mean_p99(finite) if finite else None
        return cls(
            loop=loop,
            concurrency=concurrency,
            target_rate=target_rate,
            max_outstanding=max_outstanding,
            duration_s=duration_s,
            requests=s.done,
            ok=len(s.latencies_s),
            ok_rows=s.ok_rows,
            dropped=s.dropped,
            errors=errors,
            latency_ms=lat,
            server_ms=server,
        )

    def to_json(self) -> dict[str, Any]:
        d = max(self.duration_s, 1e-9)
        return {
            "loop": self.loop,
            "concurrency": self.concurrency,
            "target_rate": self.target_rate,
            "max_outstanding": self.max_outstanding,
            "duration_s": round(self.duration_s, 6),
            "requests": self.requests,
            "ok": self.ok,
            "dropped": self.dropped,
            "errors": dict(self.errors),
            "throughput": {
                "requests_per_s": self.requests / d,
                "ok_per_s": self.ok / d,
                "rows_per_s": self.ok_rows / d,
            },
            "latency_ms": dict(self.latency_ms) if self.latency_ms else None,
            "server_ms": self.server_ms,
        }


def build_report(target: dict[str, Any], phases: Sequence[PhaseStats], interrupted: bool = False) -> dict[str, Any]:
    return {"schema": SCHEMA, "interrupted": interrupted, "target": target, "phases": [p.to_json() for p in phases]}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _rate(value: float | None) -> str:
    return "none" if value is None else f"{value:.1f} req/s"


def render(report: dict[str, Any], console: Console) -> None:
    """The report as rich tables: client view per phase, then the server's phase split."""
    t = report["target"]
    version = f" v{t['version']}" if t.get("version") is not None else ""
    what = f"InvokeEndpoint {t['endpoint_name']}" if t.get("endpoint_name") else t["protocol"]
    title = f"{what} {t['model']}{version} @ {t['url']} ({t['engine']}, {t['loop']} loop)"
    client = Table(title=title, title_justify="left")
    client.add_column("load", justify="right")
    for name in ("req/s", "rows/s", "ok", "errors", *("p50", "p90", "p95", "p99", "max")):
        client.add_column(name, justify="right")
    for p in report["phases"]:
        lat = p["latency_ms"] or {}
        load = f"c={p['concurrency']}" if p["loop"] == "closed" else f"{p['target_rate']:g}/s"
        errors = ", ".join(f"{k}: {v}" for k, v in p["errors"].items()) or "0"
        if p["dropped"]:
            errors += f" (dropped {p['dropped']})"
        tp = p["throughput"]
        client.add_row(
            load,
            f"{tp['requests_per_s']:.1f}",
            f"{tp['rows_per_s']:.1f}",
            str(p["ok"]),
            errors,
            *(_ms(lat.get(k)) for k in ("p50", "p90", "p95", "p99", "max")),
        )
    console.print(client)
    note = " (interrupted: the last phase is partial)" if report.get("interrupted") else ""
    console.print(f"latencies in ms, over 2xx responses{note}", style="dim")
    if t.get("payload_bodies_per_s"):
        console.print(f"--payload {t['payload']}: {t['payload_bodies_per_s']:,.0f} bodies/s alone")
    if report.get("knee"):
        k = report["knee"]
        line = f"knee ({k['percentile']} > {k['factor']:g}x its low-load {_ms(k['baseline_ms'])} ms): "
        line += "none" if k["knee_rate"] is None else f"at {k['knee_rate']:.1f} req/s ({_ms(k['knee_latency_ms'])} ms)"
        line += f"; last phase below it {_rate(k['last_good_rate'])}"
        if k["slo_ms"] is not None:
            line += f"; highest rate with {k['percentile']} <= {k['slo_ms']:g} ms: {_rate(k['max_rate_under_slo'])}"
        console.print(line)
    if not any(p["server_ms"] for p in report["phases"]):
        return
    server = Table(title="server phase split, ms mean / p99 (x-servekit-*-ms headers)", title_justify="left")
    server.add_column("load", justify="right")
    for name in SERVER_PHASES:
        server.add_column("network+client" if name == "overhead" else name, justify="right")
    for p in report["phases"]:
        split = p["server_ms"]
        if not split:
            continue
        load = f"c={p['concurrency']}" if p["loop"] == "closed" else f"{p['target_rate']:g}/s"
        cells = []
        for name in SERVER_PHASES:
            part = split.get(name) or {}
            cells.append(f"{_ms(part.get('mean'))} / {_ms(part.get('p99'))}")
        server.add_row(load, *cells)
    console.print(server)
