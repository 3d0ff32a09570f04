"""Stepped load and the knee, as pure functions: the schedule, users per rate step, Locust's stats history (in
memory and as CSV rows) to load points, and the knee and SLO rate found from them."""

from __future__ import annotations

import math
from typing import Any

import pytest

from servekit.tools.bench.knee import LoadPoint, find_knee
from servekit.tools.locust.steps import (
    SEED_RATES,
    Snapshot,
    Step,
    histogram_percentile,
    knee_from_history,
    point_between,
    points_from_history,
    step_at,
    steps,
    users_for,
)


def test_schedule_holds_each_step_then_ends() -> None:
    schedule = steps(SEED_RATES, 60)
    assert [s.level for s in schedule] == [100, 500, 1000, 1500]
    assert step_at(schedule, 0) == 0
    assert step_at(schedule, 59.9) == 0
    assert step_at(schedule, 60) == 1
    assert step_at(schedule, 239.9) == 3
    assert step_at(schedule, 240) is None
    with pytest.raises(ValueError):
        Step(0, 10)
    with pytest.raises(ValueError):
        Step(10, math.inf)


def test_users_for_rate_and_user_steps() -> None:
    assert users_for(1500, 10) == 150
    assert users_for(105, 10) == 11
    assert users_for(100, None) == 100
    assert users_for(0.2, 10) == 1
    with pytest.raises(ValueError):
        users_for(10, 0)


def test_knee_is_first_level_past_the_factor() -> None:
    pts = [LoadPoint(100, 5.0), LoadPoint(500, 6.0), LoadPoint(1000, 14.0), LoadPoint(1500, 90.0)]
    knee = find_knee(reversed(pts), factor=2.0, slo_ms=10.0)
    assert knee.baseline_ms == 5.0
    assert knee.knee_rate == 1000 and knee.knee_latency_ms == 14.0
    assert knee.last_good_rate == 500
    assert knee.max_rate_under_slo == 500
    assert "knee at 1000.0 req/s" in knee.summary()
    flat = find_knee(pts[:2], factor=2.0)
    assert flat.knee_rate is None and flat.last_good_rate == 500 and flat.max_rate_under_slo is None
    assert "no knee" in flat.summary()


def test_slo_rate_leaves_out_levels_with_failures_and_unmeasured_ones() -> None:
    pts = [LoadPoint(100, 5.0), LoadPoint(200, 6.0, failed=0.2), LoadPoint(300, math.nan)]
    knee = find_knee(pts, slo_ms=10.0)
    assert knee.max_rate_under_slo == 100
    assert len(knee.points) == 2
    assert find_knee([], slo_ms=1.0).baseline_ms is None
    with pytest.raises(ValueError):
        find_knee(pts, factor=1.0)


def _row(users: int, rps: float, p95: float, fails: float = 0.0) -> dict[str, Any]:
    t = "2025-01-01T00:00:00Z"
    return {
        "user_count": [t, users],
        "current_rps": [t, rps],
        "current_fail_per_sec": [t, fails],
        "response_time_percentile_0.95": [t, p95],
        "response_time_percentile_0.99": [t, p95 * 2],
        "time": t,
    }


def test_history_groups_by_user_count_and_skips_settling_rows() -> None:
    history = [
        _row(10, 50, 500),  # settling: the window still spans the ramp
        _row(10, 100, 5),
        _row(10, 100, 5),
        _row(50, 300, 6),
        _row(50, 500, 6),
        _row(50, 500, 7),
        _row(100, 700, 30),
        _row(100, 900, 40),
        _row(100, 900, 40),
    ]
    points = points_from_history(history)
    assert [(p.label, p.rate, p.latency_ms) for p in points] == [
        ("u=10", 100, 5),
        ("u=50", 500, 7),
        ("u=100", 900, 40),
    ]
    knee = knee_from_history(history, factor=3, slo_ms=10)
    assert knee.knee_rate == 900 and knee.last_good_rate == 500 and knee.max_rate_under_slo == 500
    assert knee_from_history(history, percentile="p99", factor=3).baseline_ms == 10


def test_history_from_locust_csv_rows() -> None:
    header = ["Timestamp", "User Count", "Type", "Name", "Requests/s", "Failures/s", "95%"]
    rows = [
        [1, 5, "", "Aggregated", 40, 0, 4],
        [2, 5, "POST", "InvokeEndpoint credit", 40, 0, 4],
        [3, 5, "", "Aggregated", 50, 0, 4],
        [4, 10, "", "Aggregated", 80, 10, "N/A"],
        [5, 10, "", "Aggregated", 90, 9, 20],
    ]
    points = points_from_history([dict(zip(header, r, strict=True)) for r in rows])
    assert [(p.rate, p.latency_ms) for p in points] == [(50, 4), (90, 20)]
    assert points[1].failed == pytest.approx(0.1)
    with pytest.raises(ValueError):
        points_from_history([], percentile="p42")


def test_a_step_is_measured_between_two_snapshots_of_the_cumulative_histogram() -> None:
    before = Snapshot(10.0, 100, 0, {5: 90, 50: 10})
    after = Snapshot(14.0, 500, 4, {5: 90 + 380, 6: 10, 80: 10})  # the step: 380 x 5 ms, 10 x 6 ms, 10 x 80 ms
    point = point_between(before, after, label="100/s")
    assert point.rate == 100 and point.failed == pytest.approx(0.01) and point.label == "100/s"
    assert point.latency_ms == 5  # 95% of the step's 400 are at 5 ms: the earlier 50 ms ones are not the step's
    assert point_between(before, after, percentile="p99").latency_ms == 80
    assert histogram_percentile({}, 0.95) != histogram_percentile({}, 0.95)  # NaN: nothing measured
    assert histogram_percentile({1: 1, 2: 1, 3: 2}, 0.5) == 2
