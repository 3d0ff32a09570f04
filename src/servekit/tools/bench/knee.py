"""Where latency bends: the knee of a stepped load test, and the highest rate that met a latency SLO.

A stepped test holds each load level for a while and records, per level, the rate the server actually answered
and a latency percentile (P95 by default). The *low-load level* is the percentile at the lowest rate measured; the
*knee* is the first level (in increasing rate) whose percentile exceeds ``factor`` times that level. Below the knee
the server keeps up with its own unloaded latency; past it requests queue. Independently, with an SLO in
milliseconds, the report names the highest rate whose percentile met it (and had no failures above ``max_failed``).

Pure functions over ``(rate, latency)`` points: ``servekit bench --phases`` feeds its phases, ``servekit.tools.locust``
feeds Locust's stats history.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoadPoint:
    """One load level: the rate answered (requests/s), its latency percentile (ms) and the share that failed."""

    rate: float
    latency_ms: float
    failed: float = 0.0  # failures / requests at this level, 0..1
    label: str = ""


@dataclass(frozen=True)
class Knee:
    """The knee analysis of a stepped run (``None`` fields: not found among the levels measured)."""

    percentile: str
    factor: float
    baseline_ms: float | None  # the percentile at the lowest rate
    knee_rate: float | None  # the first rate whose percentile exceeds factor x baseline
    knee_latency_ms: float | None
    last_good_rate: float | None  # the highest rate before the knee (all levels, if there is no knee)
    slo_ms: float | None
    max_rate_under_slo: float | None  # the highest rate whose percentile met the SLO (and failures within bounds)
    points: tuple[LoadPoint, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "percentile": self.percentile,
            "factor": self.factor,
            "baseline_ms": self.baseline_ms,
            "knee_rate": self.knee_rate,
            "knee_latency_ms": self.knee_latency_ms,
            "last_good_rate": self.last_good_rate,
            "slo_ms": self.slo_ms,
            "max_rate_under_slo": self.max_rate_under_slo,
            "points": [
                {"label": p.label, "rate": p.rate, "latency_ms": p.latency_ms, "failed": p.failed} for p in self.points
            ],
        }

    def summary(self) -> str:
        """One line for a terminal."""
        if self.baseline_ms is None:
            return f"knee: no level with a {self.percentile} to judge"
        parts = [f"low-load {self.percentile} {self.baseline_ms:.2f} ms"]
        if self.knee_rate is None:
            parts.append(f"no knee (no level above {self.factor:g}x)")
        else:
            parts.append(
                f"knee at {self.knee_rate:.1f} req/s ({self.percentile} {self.knee_latency_ms:.2f} ms > "
                f"{self.factor:g}x); last level below it {_rate(self.last_good_rate)}"
            )
        if self.slo_ms is not None:
            parts.append(f"highest rate with {self.percentile} <= {self.slo_ms:g} ms: {_rate(self.max_rate_under_slo)}")
        return "; ".join(parts)


def _rate(value: float | None) -> str:
    return "none" if value is None else f"{value:.1f} req/s"


def find_knee(
    points: Iterable[LoadPoint],
    *,
    factor: float = 2.0,
    slo_ms: float | None = None,
    max_failed: float = 0.0,
    percentile: str = "p95",
) -> Knee:
    """The knee of ``points`` (any order; sorted by rate here). Levels with no latency (NaN) or no rate are left
    out. ``factor`` must exceed 1."""
    if not factor > 1:
        raise ValueError(f"the knee factor must exceed 1, not {factor}")
    if slo_ms is not None and not slo_ms > 0:
        raise ValueError(f"the latency SLO must be positive, not {slo_ms}")
    usable = sorted(
        (p for p in points if math.isfinite(p.latency_ms) and math.isfinite(p.rate) and p.rate > 0),
        key=lambda p: p.rate,
    )
    if not usable:
        return Knee(percentile, factor, None, None, None, None, slo_ms, None, ())
    baseline = usable[0].latency_ms
    knee: LoadPoint | None = None
    last_good: LoadPoint | None = None
    for p in usable:
        if p.latency_ms > factor * baseline:
            knee = p
            break
        last_good = p
    under = [p.rate for p in usable if slo_ms is not None and p.latency_ms <= slo_ms and p.failed <= max_failed]
    return Knee(
        percentile=percentile,
        factor=factor,
        baseline_ms=baseline,
        knee_rate=knee.rate if knee else None,
        knee_latency_ms=knee.latency_ms if knee else None,
        last_good_rate=last_good.rate if last_good else None,
        slo_ms=slo_ms,
        max_rate_under_slo=max(under) if under else None,
        points=tuple(usable),
    )
