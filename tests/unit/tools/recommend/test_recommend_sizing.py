"""The recommendation's decisions as pure functions: SLO verdicts, the R_max search, bounds, sizing, costs, ranking."""

from __future__ import annotations

import math

import pytest

from servekit.tools.recommend.sizing import (
    MEMORY_NOISE_BYTES,
    Phase,
    Ranked,
    Search,
    Slo,
    cost_per_1k,
    cost_per_hour,
    cpu_bound,
    instances_needed,
    memory_bound,
    next_rate,
    per_request_cpu,
    per_request_memory,
    r_max,
    rank,
    resource_bound,
    scale_rate,
    slo_verdict,
)

SLO = Slo("p99", 50.0)


def phase(
    level: float = 100.0,
    *,
    ok: int = 100,
    requests: int | None = None,
    p99: float = 10.0,
    dropped: int = 0,
    loop: str = "open",
) -> Phase:
    return Phase(
        loop=loop,
        level=level,
        duration_s=1.0,
        requests=ok if requests is None else requests,
        ok=ok,
        dropped=dropped,
        latency_ms={"p50": p99 / 2, "p95": p99 * 0.9, "p99": p99},
    )


@pytest.mark.parametrize(
    ("p", "verdict"),
    [
        (phase(), None),
        (phase(p99=50.0), None),  # at the target holds
        (phase(p99=50.1), "p99 50.1 ms > 50 ms"),
        (phase(requests=101), "1 of 101 requests failed"),
        (phase(dropped=3), "3 requests dropped (too many in flight)"),
        (phase(ok=0, requests=5), "no request succeeded"),
        (phase(100, ok=80), "answered 80.0/s of 100/s offered"),  # fell behind, even with a good p99
        (phase(100, ok=80, loop="closed"), None),  # a closed loop offers no rate to fall behind
    ],
)
def test_slo_verdict(p: Phase, verdict: str | None) -> None:
    assert slo_verdict(p, SLO) == verdict


def test_the_p95_slo_reads_p95() -> None:
    assert slo_verdict(phase(p99=100.0), Slo("p95", 95.0)) is None  # p95 is 90 ms here, p99 100 ms
    assert slo_verdict(phase(p99=100.0), Slo("p95", 89.0)) == "p95 90.0 ms > 89 ms"


def run_search(capacity: float, search: Search) -> list[tuple[float, bool]]:
    """Drive the search against an instance that keeps the SLO up to ``capacity`` requests/s."""
    trials: list[tuple[float, bool]] = []
    while (rate := next_rate(trials, search)) is not None:
        trials.append((rate, rate <= capacity))
        assert len(trials) <= search.max_trials
    return trials


@pytest.mark.parametrize("capacity", [37.0, 100.0, 999.0, 5000.0])
def test_the_search_brackets_the_capacity_within_its_precision(capacity: float) -> None:
    search = Search(start=50.0, growth=1.5, precision=0.1, max_trials=30)
    trials = run_search(capacity, search)
    found = r_max(trials)
    assert found is not None and found <= capacity
    first_bad = min(r for r, ok in trials if not ok)
    assert first_bad > capacity and first_bad / found <= 1 + search.precision


def test_the_search_stops_at_its_trial_budget() -> None:
    trials = run_search(1e9, Search(start=10.0, max_trials=4))
    assert [r for r, _ in trials] == pytest.approx([10.0, 15.0, 22.5, 33.75])
    assert r_max(trials) == pytest.approx(33.75)


def test_a_first_rate_that_fails_is_halved_down_to_the_floor() -> None:
    trials = run_search(0.5, Search(start=8.0, floor=1.0, max_trials=30))
    assert [r for r, _ in trials] == [8.0, 4.0, 2.0, 1.0]
    assert r_max(trials) is None


def test_a_lower_rate_failing_after_a_higher_one_held_keeps_growing_from_the_best() -> None:
    search = Search(start=100.0, growth=2.0)
    assert next_rate([(100.0, True), (200.0, True), (150.0, False)], search) == 400.0


def test_per_request_cpu_and_its_bound() -> None:
    c = per_request_cpu(2.0, 4000)
    assert c == pytest.approx(0.0005)
    assert cpu_bound(2, c) == pytest.approx(4000.0)
    assert per_request_cpu(None, 10) is None and per_request_cpu(1.0, 0) is None and cpu_bound(4, None) is None


def test_per_request_memory_and_its_bound() -> None:
    idle, grown = 100 << 20, 20 << 20
    m = per_request_memory(idle + grown, idle, 1000.0)
    assert m is not None and m == pytest.approx(grown / 1000.0)
    # M/m with M the envelope less the idle footprint
    assert memory_bound(1 << 30, idle, m) == pytest.approx(((1 << 30) - idle) / m)
    assert memory_bound(idle // 2, idle, m) == 0.0  # the model alone does not fit
    assert per_request_memory(idle + MEMORY_NOISE_BYTES - 1, idle, 1000.0) is None  # noise: memory does not bind
    assert memory_bound(1 << 30, idle, None) is None


def test_resource_bound_is_the_smaller_known_bound() -> None:
    assert resource_bound(100.0, 50.0) == 50.0
    assert resource_bound(100.0, None) == 100.0
    assert resource_bound(None, None) is None


def test_scaling_is_linear_in_vcpus() -> None:
    assert scale_rate(1000.0, 4, 1) == 4000.0
    assert scale_rate(1000.0, 2, 2) == 1000.0


@pytest.mark.parametrize(
    ("q", "r", "u", "n"),
    [
        (500, 1000, 0.7, 1),
        (700, 1000, 0.7, 1),  # exactly at the target utilisation: no extra instance for float error
        (701, 1000, 0.7, 2),
        (500, 100, 0.7, 8),  # 500 / 70 = 7.14
        (1, 1e6, 0.7, 1),  # at least one
        (10_000, 1234.5, 0.5, 17),
    ],
)
def test_instances_needed(q: float, r: float, u: float, n: int) -> None:
    assert instances_needed(q, r, u) == n
    assert n == max(1, math.ceil(round(q / (u * r), 9)))


def test_instances_needed_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        instances_needed(10, 0, 0.7)
    with pytest.raises(ValueError):
        instances_needed(10, 10, 1.5)


def test_costs() -> None:
    hourly = cost_per_hour(3, 0.23)
    assert hourly == pytest.approx(0.69)
    # 500 req/s for an hour = 1.8M inferences; $0.69 / 1800 thousands
    assert cost_per_1k(hourly, 500) == pytest.approx(0.69 / 1800)


def test_rank_orders_by_cost_per_1k_among_those_meeting_the_slo() -> None:
    ranked = rank(
        [
            Ranked("ml.c5.large", True, 0.002, 3),
            Ranked("ml.m5.xlarge", True, 0.001, 1),
            Ranked("ml.t2.medium", False, None, None),
            Ranked("ml.r5.large", True, 0.002, 2),  # ties on cost: fewer instances first
            Ranked("ml.c6i.large", True, 0.002, 2),  # then by name
        ]
    )
    assert ranked == ["ml.m5.xlarge", "ml.c6i.large", "ml.r5.large", "ml.c5.large"]
    assert rank([Ranked("a", False, 0.1, 1)]) == []


def test_slo_and_search_refuse_bad_settings() -> None:
    with pytest.raises(ValueError):
        Slo("p90", 10)
    with pytest.raises(ValueError):
        Slo("p99", 0)
    with pytest.raises(ValueError):
        Search(start=10, growth=1.0)
