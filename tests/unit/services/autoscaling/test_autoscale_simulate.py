"""The autoscaling what-if on the control plane's own Autoscaler: the seed's formula case exactly (counts and bill),
the real policy's lag with its reasons, start-up time, scheduled floors, step policies, queueing and shedding,
a fleet from a recommend report, and clear errors for inputs that cannot be simulated."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from servekit.services.autoscaling.sim_fleet import (
    Fleet,
    LatencyModel,
    Policy,
    ScheduledSpec,
    SimError,
    StepSpec,
    fleet_from_recommendation,
)
from servekit.services.autoscaling.simulate import compare, simulate
from servekit.services.autoscaling.traffic import Curve

SEED = (50, 90, 150, 300, 500, 300, 120, 50, 80, 200)


def curve(rates: Sequence[float], step: float = 60.0) -> Curve:
    return Curve(tuple((i * step, float(r)) for i, r in enumerate(rates)))


def seed_formula(rates: Sequence[float], lo: int = 2, hi: int = 8) -> list[int]:
    return [min(max(math.ceil(r / (100 * 0.7)), lo), hi) for r in rates]


def formula_policy(**kw: object) -> Policy:
    return Policy(2, 8, 0.7, scale_out_cooldown_s=0, scale_in_cooldown_s=0, mode="formula", **kw)  # type: ignore[arg-type]


def test_the_seed_case_gives_the_formula_counts_and_bill_exactly() -> None:
    report = simulate(curve(SEED), Fleet(100, 0.75), formula_policy(), step_s=60)
    counts = seed_formula(SEED)
    assert counts == [2, 2, 3, 5, 8, 5, 2, 2, 2, 3]
    assert [s.desired for s in report.steps] == counts
    assert [s.serving for s in report.steps] == counts
    assert [s.formula for s in report.steps] == counts
    bill = sum(n * 0.75 * 60 / 3600 for n in counts)
    assert report.total_cost == pytest.approx(bill, abs=1e-12)
    doc = report.to_json()
    assert doc["total_cost"] == 0.425 and doc["cost_per_hour"] == 2.25
    assert [s["instances"] for s in doc["steps"]] == counts
    assert [s["time_s"] for s in doc["steps"]] == [i * 60.0 for i in range(10)]
    assert doc["steps_below_formula"] == doc["steps_above_formula"] == 0
    assert doc["mode"] == "formula" and "N = ceil(rps / (capacity x target))" in doc["explanation"][0]
    # each change is a scaling activity of the real scaler, with AAS's cause
    assert doc["activities"][0]["description"] == "Setting desired instance count to 3."
    assert "AlarmHigh" in doc["activities"][0]["cause"]


@pytest.mark.parametrize("rates", [(140, 210, 560, 70, 0, 350), (1, 700, 69, 71, 139, 141)])
def test_the_formula_holds_at_exact_multiples_and_jumps(rates: tuple[float, ...]) -> None:
    report = simulate(curve(rates), Fleet(100, 0.75), formula_policy(), step_s=60)
    assert [s.desired for s in report.steps] == seed_formula(rates)


def test_the_real_policy_lags_and_says_why() -> None:
    report = simulate(curve(SEED), Fleet(100, 0.75), Policy(2, 8, 0.7), step_s=60)
    desired = [s.desired for s in report.steps]
    # AlarmHigh needs 3 one-minute periods over target (minutes 2, 3, 4 exceed 140 rps on 2 instances): it fires at
    # t=300 s, sized on the newest period (500 rps / 2 per instance -> 8); AlarmLow needs 15 periods, never here
    assert desired == [2, 2, 2, 2, 2, 8, 8, 8, 8, 8]
    under, over = report.lag
    assert (under, over) == (3, 5)
    doc = report.to_json()
    assert doc["mode"] == "real"
    assert any("AlarmHigh needs 3 periods" in x for x in doc["explanation"])
    assert any("3 step(s) asked for fewer instances" in x for x in doc["explanation"])
    assert doc["total_cost"] > 0.425  # the lag costs more here: 8 instances kept
    # at 500 rps on 2 instances of 100 rps the queue overflows: requests are shed and the SLO is missed
    assert report.steps[4].shed > 0 and report.steps[4].over_slo
    assert doc["requests_shed"] > 0 and doc["time_over_slo_s"] >= 60


def test_start_up_time_delays_serving_capacity() -> None:
    rates = [50, 500, 500, 500, 500, 500, 500, 500]
    fleet = Fleet(100, 1.0, startup_s=120)
    report = simulate(curve(rates), fleet, Policy(1, 8, 0.7, scale_out_cooldown_s=0, scale_in_cooldown_s=0))
    desired = [s.desired for s in report.steps]
    serving = [s.serving for s in report.steps]
    first = desired.index(8)
    assert serving[first] < 8  # asked for, still starting
    assert serving[first + 2] == 8  # 120 s later it serves
    # billed while starting: the cost follows the desired count
    assert report.steps[first + 1].cost == pytest.approx(8 * 1.0 * 60 / 3600)


def test_several_policies_side_by_side() -> None:
    policies = [formula_policy(), Policy(2, 8, 1.0, scale_out_cooldown_s=0, scale_in_cooldown_s=0, mode="formula")]
    r70, r100 = compare(curve(SEED), Fleet(100, 0.75), policies)
    assert [s.desired for s in r100.steps] == [min(max(math.ceil(r / 100), 2), 8) for r in SEED]
    assert r100.total_cost < r70.total_cost
    assert r70.policy.label != r100.policy.label


def test_a_scheduled_floor_raises_the_minimum_on_the_clock() -> None:
    floor = ScheduledSpec("morning", "cron(2 0 * * ? *)", min_capacity=4)  # 00:02 UTC, 120 s into the curve
    with_floor = simulate(curve(SEED), Fleet(100, 0.75), formula_policy(scheduled=(floor,)))
    desired = [s.desired for s in with_floor.steps]
    assert desired[:2] == [2, 2]
    assert desired[2:] == [max(4, n) for n in seed_formula(SEED)[2:]]
    assert any("scheduled action" in (a["cause"] or "") for a in with_floor.activities)


def test_a_step_policy_runs_from_its_alarm() -> None:
    step = StepSpec(
        "add-two",
        {"AdjustmentType": "ChangeInCapacity", "Cooldown": 0,
         "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 2}]},
        {"MetricName": "Invocations", "ComparisonOperator": "GreaterThanThreshold", "Threshold": 6000,
         "EvaluationPeriods": 1},
    )  # fmt: skip
    policy = Policy(1, 8, None, steps=(step,), mode="formula", scale_out_cooldown_s=0, scale_in_cooldown_s=0)
    report = simulate(curve([50, 150, 150, 150, 50]), Fleet(100, 0.75), policy)
    # over 100 rps (6000 a minute) the alarm runs the policy each period: +2 each step while it stays over
    assert [s.desired for s in report.steps] == [1, 3, 5, 7, 7]


def test_a_measured_latency_curve_is_used_and_labelled() -> None:
    report = {
        "target": {"slo": {"percentile": "p99", "ms": 50}},
        "ranking": ["ml.m5.large"],
        "types": [{
            "name": "ml.m5.large", "r_max": 40.0, "price_per_hour": 0.115, "setup_s": 3.5,
            "sweep": [
                {"loop": "open", "level": 10, "throughput_rps": 10, "latency_ms": {"p99": 5.0}},
                {"loop": "open", "level": 40, "throughput_rps": 40, "latency_ms": {"p99": 45.0}},
            ],
        }],
    }  # fmt: skip
    fleet = fleet_from_recommendation(report)
    assert (fleet.capacity_rps, fleet.price_per_hour, fleet.startup_s, fleet.slo_ms) == (40.0, 0.115, 3.5, 50.0)
    assert fleet.latency.p99_ms(25, 40) == pytest.approx(25.0)
    assert "measured p99-vs-load curve" in fleet.latency.label
    sim = simulate(curve([40, 40]), fleet, Policy(1, 4, 0.5))
    assert (
        "measured p99-vs-load curve (servekit recommend, ml.m5.large, p99)" in sim.to_json()["fleet"]["latency_model"]
    )
    with pytest.raises(SimError, match=r"no instance type 'ml\.c5\.xlarge'"):
        fleet_from_recommendation(report, "ml.c5.xlarge")


def test_the_simple_latency_model() -> None:
    model = LatencyModel(base_ms=10)
    assert model.p99_ms(0, 100) == 10
    assert model.p99_ms(50, 100) == pytest.approx(20)
    assert model.p99_ms(500, 100) == pytest.approx(200)  # capped at utilisation 0.95
    assert "simple model" in model.label


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Policy(5, 2, 0.7), "--min 5 is more than --max 2"),
        (lambda: Fleet(0, 0.75), "capacity must be greater than 0"),
        (lambda: Fleet(-3, 0.75), "capacity must be greater than 0"),
        (lambda: Policy(0, 2, 0.7), "--min must be at least 1"),
        (lambda: Policy(1, 2, 0.0), "target utilisation must be greater than 0"),
        (lambda: Policy(1, 2, 0.7, mode="fast"), "mode must be one of"),
        (lambda: simulate(curve([1]), Fleet(1, 1, startup_s=5), formula_policy()), "formula mode"),
    ],
)
def test_inputs_that_cannot_be_simulated(make: object, message: str) -> None:
    with pytest.raises(SimError, match=message):
        make()  # type: ignore[operator]
