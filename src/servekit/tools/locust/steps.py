"""Stepped load, without Locust: a list of levels (users, or a target request rate) each held for a duration,
the seed's ``100 → 500 → 1,000 → 1,500`` requests/s, and the knee of the run from Locust's stats history.

A rate step becomes users: each user of a rate-stepped test paces itself to ``per_user_rate`` requests/s (Locust's
``constant_throughput(per_user_rate)``), so ``ceil(rate / per_user_rate)`` users send ``rate`` requests/s as long
as the server answers within ``1 / per_user_rate`` s; beyond that the rate achieved falls short, which the history
shows and the knee reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servekit.tools.bench.knee import Knee, LoadPoint, find_knee

SEED_RATES = (100.0, 500.0, 1000.0, 1500.0)  # the production-pipeline seed's steps, requests/s


@dataclass(frozen=True)
class Step:
    """Hold ``level`` (users, or requests/s with a per-user rate) for ``duration_s`` seconds."""

    level: float
    duration_s: float

    def __post_init__(self) -> None:
        if not (self.level > 0 and math.isfinite(self.level)):
            raise ValueError(f"a step's level must be positive, not {self.level}")
        if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise ValueError(f"a step's duration must be positive, not {self.duration_s}")


def steps(levels: Iterable[float], duration_s: float) -> tuple[Step, ...]:
    """Each level held for the same ``duration_s``."""
    return tuple(Step(float(lv), duration_s) for lv in levels)


def users_for(level: float, per_user_rate: float | None) -> int:
    """Users that make ``level``: the level itself for user steps, else the rate over each user's pace."""
    if per_user_rate is None:
        return max(1, round(level))
    if not per_user_rate > 0:
        raise ValueError(f"per_user_rate must be positive, not {per_user_rate}")
    return max(1, math.ceil(level / per_user_rate - 1e-9))


def step_at(schedule: Sequence[Step], run_time: float) -> int | None:
    """The index of the step running at ``run_time`` seconds into the test; None once all are done."""
    end = 0.0
    for i, step in enumerate(schedule):
        end += step.duration_s
        if run_time < end:
            return i
    return None


def _value(row: Mapping[str, Any], *keys: str) -> float | None:
    for key in keys:
        if key in row:
            raw = row[key]
            if isinstance(raw, list | tuple):  # Locust's in-memory history: [timestamp, value]
                raw = raw[-1]
            try:
                return float(raw)
            except (TypeError, ValueError):
                return math.nan
    return None


_PERCENTILE_KEYS = {
    "p50": ("response_time_percentile_0.5", "50%"),
    "p95": ("response_time_percentile_0.95", "95%"),
    "p99": ("response_time_percentile_0.99", "99%"),
}


def points_from_history(
    history: Iterable[Mapping[str, Any]], *, percentile: str = "p95", settle_rows: int = 1
) -> list[LoadPoint]:
    """One load point per stretch of equal user count in Locust's stats history: ``environment.stats.history``
    (rows of ``[timestamp, value]``) or the rows of ``--csv``'s ``*_stats_history.csv`` (its ``Aggregated`` rows;
    ``csv.DictReader`` gives them). The first ``settle_rows`` rows of each stretch are left out (the users are still
    starting and the current percentile still spans the step before); the point is the median of the remaining
    rows' percentile and their mean requests/s."""
    if percentile not in _PERCENTILE_KEYS:
        raise ValueError(f"percentile {percentile!r} is not one of {', '.join(_PERCENTILE_KEYS)}")
    groups: list[tuple[int, list[tuple[float, float, float]]]] = []
    for row in history:
        if row.get("Name", "Aggregated") != "Aggregated":
            continue
        users = _value(row, "user_count", "User Count")
        rate = _value(row, "current_rps", "Requests/s")
        lat = _value(row, *_PERCENTILE_KEYS[percentile])
        fails = _value(row, "current_fail_per_sec", "Failures/s") or 0.0
        if users is None or rate is None or lat is None or not users > 0:
            continue
        if not groups or groups[-1][0] != int(users):
            groups.append((int(users), []))
        groups[-1][1].append((rate, lat, fails))
    points = []
    for users, rows in groups:
        kept = rows[settle_rows:] or rows[-1:]
        lats = sorted(r[1] for r in kept if math.isfinite(r[1]) and r[1] > 0)
        if not lats:
            continue
        rate = sum(r[0] for r in kept) / len(kept)
        fail = sum(r[2] for r in kept) / len(kept)
        points.append(
            LoadPoint(
                rate=rate, latency_ms=lats[len(lats) // 2], failed=fail / rate if rate else 0.0, label=f"u={users}"
            )
        )
    return points


def knee_from_history(
    history: Iterable[Mapping[str, Any]],
    *,
    factor: float = 2.0,
    slo_ms: float | None = None,
    percentile: str = "p95",
    settle_rows: int = 1,
    max_failed: float = 0.0,
) -> Knee:
    """The knee of a stepped Locust run: the rate at which ``percentile`` leaves its low-load level by more than
    ``factor``, and the highest rate that met ``slo_ms``."""
    points = points_from_history(history, percentile=percentile, settle_rows=settle_rows)
    return find_knee(points, factor=factor, slo_ms=slo_ms, max_failed=max_failed, percentile=percentile)


@dataclass(frozen=True)
class Snapshot:
    """Locust's cumulative totals at one moment: ``stats.total``'s request and failure counts and its response-time
    histogram (rounded ms → count)."""

    t: float
    requests: int
    failures: int
    response_times: Mapping[int, int]


def histogram_percentile(counts: Mapping[int, int], q: float) -> float:
    """The ``q`` (0..1) percentile of a histogram of rounded milliseconds, as Locust reads its own."""
    total = sum(n for n in counts.values() if n > 0)
    if total == 0:
        return math.nan
    rank = q * total
    seen = 0
    for value in sorted(counts):
        seen += max(counts[value], 0)
        if seen >= rank:
            return float(value)
    return float(max(counts))


def point_between(before: Snapshot, after: Snapshot, *, percentile: str = "p95", label: str = "") -> LoadPoint:
    """The load point of the stretch between two snapshots: its rate and percentile exactly, not Locust's
    10-second moving windows."""
    q = {"p50": 0.5, "p95": 0.95, "p99": 0.99}[percentile]
    elapsed = max(after.t - before.t, 1e-9)
    diff = {k: n - before.response_times.get(k, 0) for k, n in after.response_times.items()}
    requests = after.requests - before.requests
    failures = after.failures - before.failures
    return LoadPoint(
        rate=requests / elapsed,
        latency_ms=histogram_percentile(diff, q),
        failed=failures / requests if requests else 0.0,
        label=label,
    )
