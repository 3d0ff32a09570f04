"""The decisions of a recommendation, as pure functions of measurements: whether a phase met the latency SLO, which
rate to offer next, R_max, the resource bounds C/c and M/m, the instance count, the costs and the ranking.

The formulas (the report prints them as written here):

- **R_max** (requests/s one instance sustains): the highest *offered* open-loop rate whose phase answered every
  request with 2xx, dropped none, kept up (answered at least ``KEEP_UP`` of the offered rate) and kept the SLO
  percentile (p99 by default) at or under the target.
- **c** = CPU seconds of the instance's process tree during the R_max phase ÷ requests it answered then.
  **C/c** = the envelope's vCPUs ÷ c: requests/s if every vCPU were busy with nothing but requests.
- **m** = (peak resident memory during the R_max phase - resident memory idle with the model loaded) ÷ the
  throughput of that phase: bytes per request/s of load (memory per request in flight x the seconds each is held,
  by Little's law). **M/m** = (the envelope's memory - the idle footprint) ÷ m. When load adds no measurable
  memory (under ``MEMORY_NOISE_BYTES``) memory does not bind and M/m is None (unbounded).
- **T** = 1 / R_max (seconds of one instance's capacity per request) and **N** = ⌈Q·T/U⌉ = ⌈Q / (U·R_max)⌉
  instances for a target of Q requests/s at utilisation U.
- cost per hour = N x price; cost per 1,000 inferences = cost per hour ÷ (Q x 3600) x 1000, at the target load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

KEEP_UP = 0.9  # a phase that answered under 90% of the offered rate fell behind, whatever its latency
MEMORY_NOISE_BYTES = 1 << 20  # allocator noise: a smaller growth under load is "no memory per request"
_EPS = 1e-9  # Q·T/U that is a whole number up to float error must not round up to one instance more


@dataclass(frozen=True, slots=True)
class Slo:
    percentile: str  # "p99" or "p95": the latency key the SLO holds
    ms: float

    def __post_init__(self) -> None:
        if self.percentile not in ("p95", "p99"):
            raise ValueError(f"the SLO percentile is p95 or p99, not {self.percentile!r}")
        if not (self.ms > 0 and math.isfinite(self.ms)):
            raise ValueError(f"the latency target must be a positive number of ms, not {self.ms!r}")


@dataclass(frozen=True, slots=True)
class Phase:
    """One measured load phase, as the decisions see it."""

    loop: str  # "open" (level = offered requests/s) or "closed" (level = concurrency)
    level: float
    duration_s: float
    requests: int  # answered with any status, plus connection errors and timeouts
    ok: int
    dropped: int  # open loop: not sent because too many were in flight
    latency_ms: dict[str, float] | None  # mean, p50, p90, p95, p99, max over 2xx responses
    cpu_s: float | None = None  # the instance's process tree, during the phase
    rss_peak_bytes: int | None = None

    @property
    def errors(self) -> int:
        return self.requests - self.ok

    @property
    def throughput(self) -> float:
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0


def slo_verdict(phase: Phase, slo: Slo) -> str | None:
    """None when ``phase`` met the SLO, else why not (in words, for the report)."""
    if phase.ok == 0:
        return "no request succeeded"
    if phase.errors:
        return f"{phase.errors} of {phase.requests} requests failed"
    if phase.dropped:
        return f"{phase.dropped} requests dropped (too many in flight)"
    if phase.loop == "open" and phase.throughput < KEEP_UP * phase.level:
        return f"answered {phase.throughput:.1f}/s of {phase.level:g}/s offered"
    value = (phase.latency_ms or {}).get(slo.percentile)
    if value is None:
        return f"no {slo.percentile} latency"
    if value > slo.ms:
        return f"{slo.percentile} {value:.1f} ms > {slo.ms:g} ms"
    return None


@dataclass(frozen=True, slots=True)
class Search:
    """How R_max is searched: grow the offered rate by ``growth`` while the SLO holds, then bisect (geometrically)
    between the last rate that held and the first that did not until they are within ``precision``; at most
    ``max_trials`` phases. A first rate that fails is halved down to ``floor``."""

    start: float
    growth: float = 1.5
    precision: float = 0.1
    max_trials: int = 8
    floor: float = 1.0

    def __post_init__(self) -> None:
        if not (self.start > 0 and self.growth > 1 and self.precision > 0 and self.max_trials >= 1):
            raise ValueError("a search needs start > 0, growth > 1, precision > 0 and at least one trial")


def next_rate(trials: Sequence[tuple[float, bool]], search: Search) -> float | None:
    """The next rate to offer after ``trials`` (rate, SLO met) in the order run; None when the search is done."""
    if not trials:
        return search.start
    if len(trials) >= search.max_trials:
        return None
    good = [r for r, ok in trials if ok]
    bad = [r for r, ok in trials if not ok]
    if not bad:
        return trials[-1][0] * search.growth
    if not good:
        lower = min(bad) / 2
        return lower if lower >= search.floor else None
    lo = max(good)
    hi = min((r for r in bad if r > lo), default=None)
    if hi is None:  # a lower rate failed after a higher one held: noise; keep growing from the best
        return lo * search.growth
    if hi / lo <= 1 + search.precision:
        return None
    return math.sqrt(lo * hi)


def r_max(trials: Sequence[tuple[float, bool]]) -> float | None:
    """The highest offered rate that met the SLO; None when none did."""
    good = [r for r, ok in trials if ok]
    return max(good) if good else None


def per_request_cpu(cpu_s: float | None, ok: int) -> float | None:
    """c: CPU seconds per answered request."""
    if cpu_s is None or ok <= 0 or cpu_s <= 0:
        return None
    return cpu_s / ok


def cpu_bound(vcpus: float, c: float | None) -> float | None:
    """C/c in requests/s."""
    return None if c is None or c <= 0 else vcpus / c


def per_request_memory(rss_peak: int | None, rss_idle: int | None, throughput: float) -> float | None:
    """m: bytes per request/s of load; None when load added no measurable memory (or it was not measured)."""
    if rss_peak is None or rss_idle is None or throughput <= 0:
        return None
    grown = rss_peak - rss_idle
    if grown < MEMORY_NOISE_BYTES:
        return None
    return grown / throughput


def memory_bound(memory_bytes: float, rss_idle: int | None, m: float | None) -> float | None:
    """M/m in requests/s, with M = the envelope's memory less the idle footprint (0 when it does not even fit)."""
    if m is None or rss_idle is None:
        return None
    return max(0.0, memory_bytes - rss_idle) / m


def resource_bound(cpu: float | None, memory: float | None) -> float | None:
    """min(C/c, M/m) over the bounds that are known."""
    known = [b for b in (cpu, memory) if b is not None]
    return min(known) if known else None


def scale_rate(rate: float, vcpus: int, measured_vcpus: int) -> float:
    """A rate measured on ``measured_vcpus`` scaled to the envelope's ``vcpus``: linear in vCPUs (an upper
    estimate: it assumes nothing but CPU limits the model)."""
    return rate * vcpus / measured_vcpus


def instances_needed(q: float, r_max_per_instance: float, utilization: float) -> int:
    """N = ⌈Q·T/U⌉ with T = 1/R_max; at least one instance."""
    if r_max_per_instance <= 0:
        raise ValueError("R_max must be positive to size a fleet")
    if not 0 < utilization <= 1:
        raise ValueError("the target utilisation is in (0, 1]")
    t = 1.0 / r_max_per_instance
    return max(1, math.ceil(q * t / utilization - _EPS))


def cost_per_hour(instances: int, price_per_hour: float) -> float:
    return instances * price_per_hour


def cost_per_1k(hourly: float, q: float) -> float:
    """US dollars per 1,000 inferences when the fleet serves Q requests/s."""
    return hourly / (q * 3600.0) * 1000.0


@dataclass(frozen=True, slots=True)
class Ranked:
    name: str
    meets_slo: bool
    cost_per_1k: float | None
    instances: int | None


def rank(candidates: Sequence[Ranked]) -> list[str]:
    """Names of the candidates that meet the SLO, cheapest per 1,000 inferences first (then fewer instances, then
    by name, so equal costs rank the same way every time). The others are not ranked."""
    fit = [c for c in candidates if c.meets_slo and c.cost_per_1k is not None and c.instances is not None]
    fit.sort(key=lambda c: (c.cost_per_1k, c.instances, c.name))
    return [c.name for c in fit]
