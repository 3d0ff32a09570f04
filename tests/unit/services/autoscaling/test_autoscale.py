"""The target-tracking scaler as a pure function on a manual clock: proportional scale-out, cooldowns, scale-in,
clamps, DisableScaleIn and missing data."""

from __future__ import annotations

from typing import Any

import pytest

from servekit.services.autoscaling.target_tracking import (
    Decision,
    TargetTrackingPolicy,
    decide,
    parse_resource_id,
)

P = 60
RID = "endpoint/ep/variant/A"


def policy(**kw: Any) -> TargetTrackingPolicy:
    params: dict[str, Any] = {"name": "ipi", "resource_id": RID, "target_value": 100.0, "policy_id": "u1"}
    params.update(kw)
    return TargetTrackingPolicy(**params)


class Sim:
    """A variant under a manual clock: per-minute invocations-per-instance points fed through :func:`decide`."""

    def __init__(self, pol: TargetTrackingPolicy, current: int, lo: int = 1, hi: int = 10) -> None:
        self.pol, self.current, self.lo, self.hi = pol, current, lo, hi
        self.now = 10_000 * P + 1.0
        self.points: list[tuple[float, float]] = []
        self.last_out: float | None = None
        self.last_in: float | None = None

    def minute(self, total_per_minute: float) -> Decision:
        """One minute of ``total_per_minute`` invocations spread over the current fleet, then a decision."""
        start = (self.now // P) * P
        self.points.append((start, total_per_minute / max(self.current, 1)))
        self.now += P
        d = decide(self.pol, self.points, self.current, self.lo, self.hi, self.last_out, self.last_in, self.now)
        if d.scaled:
            if d.desired > self.current:
                self.last_out = self.now
            else:
                self.last_in = self.now
            self.current = d.desired
        return d


def test_resource_id_and_query() -> None:
    assert parse_resource_id(RID) == ("ep", "A")
    with pytest.raises(ValueError, match="endpoint/<endpoint-name>"):
        parse_resource_id("endpoint/ep")
    q = policy().query()
    assert (q.namespace, q.metric_name, q.statistic, q.period_s) == (
        "AWS/SageMaker",
        "InvocationsPerInstance",
        "Sum",
        60,
    )
    assert q.dimensions == (("EndpointName", "ep"), ("VariantName", "A"))
    assert policy().window(100 * P + 5) == (85 * P, 100 * P)


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="TargetValue"):
        policy(target_value=0)
    with pytest.raises(ValueError, match="SageMakerVariantInvocationsPerInstance"):
        policy(metric_type="SageMakerVariantProvisionedConcurrencyUtilization")


def test_scale_out_under_load_is_proportional_with_alarm_cause() -> None:
    s = Sim(policy(), current=2)
    assert not s.minute(500).scaled  # one breaching point: AlarmHigh needs three
    assert not s.minute(500).scaled
    d = s.minute(500)  # 250 per instance against a target of 100 → ceil(2 * 2.5) = 5
    assert d.scaled and d.desired == 5
    assert d.description == "Setting desired instance count to 5."
    assert d.cause == f"monitor alarm TargetTracking-{RID}-AlarmHigh-u1 in state ALARM triggered policy ipi"


def test_seed_sizing_rule() -> None:
    # Q = 10 req/s at T = 0.5 s each with U = 0.5: N = ceil(Q·T/U) = 10. One instance serves 60/T·U = 60
    # invocations per minute at target; the fleet of 4 sees 600/4 = 150 per instance → ceil(4 * 150/60) = 10.
    q, t, u = 10.0, 0.5, 0.5
    target = 60 / t * u
    pts = [(float(m * P), q * 60 / 4) for m in range(3)]
    d = decide(policy(target_value=target), pts, 4, 1, 20, None, None, 3 * P + 1)
    assert d.desired == 10 == -(-q * t // u)


def test_no_flapping_inside_scale_out_cooldown_then_scale_out_again() -> None:
    s = Sim(policy(scale_out_cooldown_s=300), current=1)
    for _ in range(3):
        d = s.minute(300)
    assert d.desired == 3
    # still overloaded (600 over 3 = 200 per instance) but the cooldown holds
    blocked = [s.minute(600) for _ in range(4)]
    assert all(not b.scaled for b in blocked) and s.current == 3
    assert blocked[-1].not_scaled_reason == "AutoScalingAnticipatedFlapping"
    assert "scale-out cooldown" in blocked[-1].cause
    d = s.minute(600)  # 300 s after the scale-out
    assert d.scaled and d.desired == 6


def test_scale_in_waits_for_low_window_and_both_cooldowns() -> None:
    pol = policy(scale_out_cooldown_s=600, scale_in_cooldown_s=300)
    s = Sim(pol, current=1)
    for _ in range(3):
        s.minute(400)
    assert s.current == 4
    # the load is gone: the low alarm needs 15 points under 90 (the window still holds the busy minutes)
    decisions = [s.minute(40) for _ in range(14)]
    assert not any(d.scaled for d in decisions)
    d = s.minute(40)  # 15 quiet points of 10 per instance, 15 min after the scale-out (cooldown 10 min)
    assert d.scaled and d.desired == 1
    assert d.cause == f"monitor alarm TargetTracking-{RID}-AlarmLow-u1 in state ALARM triggered policy ipi"


def test_scale_in_blocked_by_scale_out_cooldown() -> None:
    pts = [(float(m * P), 10.0) for m in range(15)]
    now = 15 * P + 1
    d = decide(policy(scale_out_cooldown_s=600), pts, 4, 1, 10, now - 100, None, now)
    assert not d.scaled and "scale-out cooldown" in d.cause
    d = decide(policy(scale_in_cooldown_s=600), pts, 4, 1, 10, None, now - 100, now)
    assert not d.scaled and "scale-in cooldown" in d.cause
    assert d.not_scaled_reason == "AutoScalingAnticipatedFlapping"
    d = decide(policy(), pts, 4, 1, 10, now - 301, now - 301, now)
    assert d.scaled and d.desired == 1  # ceil(4 * 10/100)


def test_scale_in_uses_highest_point_so_metric_stays_under_target() -> None:
    pts = [(float(m * P), 20.0) for m in range(14)] + [(14.0 * P, 80.0)]
    d = decide(policy(), pts, 5, 1, 10, None, None, 15 * P + 1)
    assert d.desired == 4  # ceil(5 * 80/100), not ceil(5 * 20/100)


def test_clamps_to_min_and_max() -> None:
    hot = [(float(m * P), 1000.0) for m in range(3)]
    d = decide(policy(), hot, 2, 1, 6, None, None, 3 * P + 1)
    assert d.desired == 6
    d = decide(policy(), hot, 6, 1, 6, None, None, 3 * P + 1)
    assert not d.scaled and d.not_scaled_reason == "AlreadyAtMaxCapacity"
    idle = [(float(m * P), 0.0) for m in range(15)]  # idle variants publish zeros and scale in to Min
    d = decide(policy(), idle, 5, 2, 6, None, None, 15 * P + 1)
    assert d.desired == 2
    d = decide(policy(), idle, 2, 2, 6, None, None, 15 * P + 1)
    assert not d.scaled and d.not_scaled_reason == "AlreadyAtMinCapacity"
    with pytest.raises(ValueError, match="MinCapacity"):
        decide(policy(), idle, 2, 7, 6, None, None, 15 * P + 1)


def test_disable_scale_in_never_removes_capacity() -> None:
    idle = [(float(m * P), 0.0) for m in range(15)]
    d = decide(policy(disable_scale_in=True), idle, 5, 1, 10, None, None, 15 * P + 1)
    assert not d.scaled and d.desired == 5 and "scale-in is disabled" in d.cause
    hot = [(float(m * P), 300.0) for m in range(3)]
    assert decide(policy(disable_scale_in=True), hot, 1, 1, 10, None, None, 3 * P + 1).desired == 3


def test_missing_data_never_scales() -> None:
    now = 15 * P + 1
    d = decide(policy(), [], 3, 1, 10, None, None, now)
    assert not d.scaled and d.desired == 3 and "insufficient data" in d.cause
    # two hot points with a gap: AlarmHigh lacks its three; too few for AlarmLow either
    gappy = [(13.0 * P, 900.0), (14.0 * P, 900.0)]
    assert not decide(policy(), gappy, 3, 1, 10, None, None, now).scaled
    # fourteen quiet points of fifteen: no scale-in
    quiet = [(float(m * P), 0.0) for m in range(1, 15)]
    assert not decide(policy(), quiet, 3, 1, 10, None, None, now).scaled
    # points outside the window do not count; the current, incomplete minute does not either
    stale = [(float(m * P), 900.0) for m in range(3)] + [(15.0 * P, 900.0)]
    assert not decide(policy(), stale, 3, 1, 10, None, None, 30 * P + 1).scaled


def test_in_target_range_no_change() -> None:
    pts = [(float(m * P), 95.0) for m in range(15)]
    d = decide(policy(), pts, 3, 1, 10, None, None, 15 * P + 1)
    assert not d.scaled and "within the target range" in d.cause


def test_a_customized_metric_is_tracked_as_it_is() -> None:
    dims = (("VariantName", "A"), ("EndpointName", "ep"))
    pol = policy(target_value=70.0, custom=("/aws/sagemaker/Endpoints", "CPUUtilization", dims, "Average"))
    q = pol.query()
    assert (q.namespace, q.metric_name, q.statistic, q.dimensions) == (
        "/aws/sagemaker/Endpoints",
        "CPUUtilization",
        "Average",
        tuple(sorted(dims)),
    )
    points = [(float(t * P), 140.0) for t in range(9_990, 10_000)]
    assert pol.per_minute(points) == points  # a utilization is not a count: no per-minute scaling
    d = decide(pol, points, 2, 1, 10, None, None, 10_000 * P + 1.0)
    assert d.scaled and d.desired == 4  # ceil(2 * 140 / 70)
