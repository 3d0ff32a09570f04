"""The guarded-deployment step function on a manual clock: DeploymentConfig → plan, the seed's 5→20→50→100 rollout
that completes, the same plan rolled back by an alarm mid-way, time limits, and SageMaker's refusals."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import pytest

from servekit.errors import IllegalTransition
from servekit.services.hosting import rollout
from servekit.services.hosting.rollout import RolloutPhase, RolloutPolicy, RolloutState, TrafficStep


def run(
    policy: RolloutPolicy,
    alarms_at: Mapping[float, Mapping[str, str]] | None = None,
    tick: float = 1.0,
    limit: float = 10_000.0,
) -> list[tuple[float, RolloutPhase, float]]:
    """Drive a rollout as the controller does (apply each step at once), recording (time, phase, green share)
    each time the phase or share changes. ``alarms_at``: from that time on, the alarms' states."""
    now = 1_000.0
    state = rollout.launched(rollout.start(now), now)
    seen: list[tuple[float, RolloutPhase, float]] = []
    alarms: Mapping[str, str] = {}

    def note(s: RolloutState) -> None:
        entry = (now - 1_000.0, s.phase, s.green_share(policy))
        if not seen or seen[-1][1:] != entry[1:]:
            seen.append(entry)

    while not state.phase.final and now < 1_000.0 + limit:
        for at, states in (alarms_at or {}).items():
            if now - 1_000.0 >= at:
                alarms = states
        note(state)
        if state.phase is RolloutPhase.ROLLING_BACK:
            state = rollout.rolled_back(state, now)
        elif state.phase is RolloutPhase.DELETING:
            state = rollout.finished(state, now)
        elif not state.applied:
            state = rollout.applied(state, now)
        else:
            now += tick
            state = rollout.advance(policy, state, alarms, now)
    note(state)
    return seen


def shares(trace: list[tuple[float, RolloutPhase, float]]) -> list[float]:
    return [round(s, 4) for _, p, s in trace if p is RolloutPhase.ACTIVATING]


def test_the_seed_plan_goes_5_20_50_100_then_bakes_and_finishes() -> None:
    policy = rollout.custom_policy([5, 20, 50, 100], wait_s=60, termination_wait_s=30, alarms=["p99", "errors"])
    trace = run(policy, {0: {"p99": "OK", "errors": "INSUFFICIENT_DATA"}})
    assert shares(trace) == [0.05, 0.2, 0.5, 1.0]
    phases = [p for _, p, _ in trace]
    assert phases[-3:] == [RolloutPhase.BAKING, RolloutPhase.DELETING, RolloutPhase.DONE]
    step_starts = [t for t, p, _ in trace if p is RolloutPhase.ACTIVATING]
    assert [b - a for a, b in itertools.pairwise(step_starts)] == [60, 60, 60]
    baking = next(t for t, p, _ in trace if p is RolloutPhase.BAKING)
    deleting = next(t for t, p, _ in trace if p is RolloutPhase.DELETING)
    assert baking - step_starts[-1] == 60 and deleting - baking == 30


def test_an_alarm_during_the_20_percent_step_rolls_everything_back() -> None:
    policy = rollout.custom_policy([5, 20, 50, 100], wait_s=60, alarms=["p99"])
    trace = run(policy, {0: {"p99": "OK"}, 90: {"p99": "ALARM"}})  # the 20% step runs from t=60 to t=120
    assert shares(trace) == [0.05, 0.2]
    _last_t, last_phase, last_share = trace[-1]
    assert last_phase is RolloutPhase.ROLLED_BACK and last_share == 0.0
    back = next(t for t, p, _ in trace if p is RolloutPhase.ROLLING_BACK)
    assert back == 91  # at the first poll (1 s ticks) after the alarm fired at 90, not at the end of the bake


def test_the_rollback_reason_names_the_alarm_and_the_step() -> None:
    policy = rollout.custom_policy([5, 100], wait_s=10, alarms=["latency-p99", "errors"])
    state = rollout.applied(rollout.launched(rollout.start(0.0), 0.0), 0.0)
    after = rollout.advance(policy, state, {"latency-p99": "ALARM", "errors": "OK"}, 1.0)
    assert after.phase is RolloutPhase.ROLLING_BACK
    assert "latency-p99" in after.reason and "errors" not in after.reason and "5%" in after.reason


def test_alarms_not_watched_before_traffic_moves_and_unknown_alarms_ignored() -> None:
    policy = rollout.custom_policy([50, 100], wait_s=10, alarms=["a"])
    launching = rollout.start(0.0)
    assert rollout.advance(policy, launching, {"a": "ALARM"}, 5.0) == launching
    unapplied = rollout.launched(launching, 1.0)
    assert rollout.advance(policy, unapplied, {"a": "ALARM"}, 5.0) == unapplied
    live = rollout.applied(unapplied, 1.0)
    assert rollout.advance(policy, live, {"b": "ALARM"}, 2.0).phase is RolloutPhase.ACTIVATING


def test_alarm_during_the_final_bake_still_rolls_back() -> None:
    policy = rollout.custom_policy([100], wait_s=0, termination_wait_s=120, alarms=["a"])
    trace = run(policy, {100: {"a": "ALARM"}})
    assert [p for _, p, _ in trace][-3:] == [RolloutPhase.BAKING, RolloutPhase.ROLLING_BACK, RolloutPhase.ROLLED_BACK]


def test_the_time_limit_rolls_back_even_while_launching() -> None:
    policy = rollout.custom_policy([10, 100], wait_s=100, max_execution_s=150)
    state = rollout.start(0.0)
    assert rollout.advance(policy, state, {}, 149.0).phase is RolloutPhase.LAUNCHING
    late = rollout.advance(policy, state, {}, 150.0)
    assert late.phase is RolloutPhase.ROLLING_BACK and "MaximumExecutionTimeoutInSeconds" in late.reason


def test_next_change_is_the_nearest_of_bake_end_and_time_limit() -> None:
    policy = rollout.custom_policy([10, 100], wait_s=100, max_execution_s=1_000)
    state = rollout.applied(rollout.launched(rollout.start(0.0), 0.0), 10.0)
    assert rollout.next_change_s(policy, state, 30.0) == 80.0
    assert rollout.next_change_s(policy, state, 500.0) == 0.0
    assert rollout.next_change_s(rollout.custom_policy([100], wait_s=0), rollout.start(0.0), 5.0) is None


def test_illegal_moves_raise() -> None:
    done = rollout.finished(
        rollout.RolloutState(RolloutPhase.DELETING, started=0.0, since=0.0),
        1.0,
    )
    with pytest.raises(IllegalTransition):
        rollout.launched(done, 2.0)
    with pytest.raises(IllegalTransition):
        rollout.rolled_back(rollout.start(0.0), 1.0)
    assert rollout.advance(rollout.custom_policy([100], wait_s=0), done, {"x": "ALARM"}, 9.0) == done


# ---- DeploymentConfig ---------------------------------------------------------------------------------------------
def blue_green(routing: dict[str, object], **extra: object) -> dict[str, object]:
    return {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": routing, **extra}}


def test_no_config_is_all_at_once_without_a_bake() -> None:
    p = rollout.policy_from(None, 2)
    assert p.kind == "ALL_AT_ONCE" and p.steps == (TrafficStep(1.0, 0.0),) and p.alarms == ()


def test_canary_percent_and_count() -> None:
    p = rollout.policy_from(
        blue_green(
            {"Type": "CANARY", "WaitIntervalInSeconds": 300, "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 5}},
            TerminationWaitInSeconds=60,
        )
        | {"AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "a"}, {"AlarmName": "b"}]}},
        4,
    )
    assert [(s.green_share, s.bake_s) for s in p.steps] == [(0.05, 300.0), (1.0, 0.0)]
    assert p.termination_wait_s == 60 and p.alarms == ("a", "b")
    by_count = rollout.policy_from(
        blue_green(
            {"Type": "CANARY", "WaitIntervalInSeconds": 1, "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 1}}
        ),
        4,
    )
    assert by_count.steps[0].green_share == 0.25


def test_linear_steps_cover_the_fleet() -> None:
    p = rollout.policy_from(
        blue_green(
            {"Type": "LINEAR", "WaitIntervalInSeconds": 30, "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 30}}
        ),
        3,
    )
    assert [round(s.green_share, 6) for s in p.steps] == [0.3, 0.6, 0.9, 1.0]
    assert all(s.bake_s == 30 for s in p.steps)


def test_rolling_batches_swap_instances() -> None:
    p = rollout.policy_from(
        {
            "RollingUpdatePolicy": {
                "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 2},
                "WaitIntervalInSeconds": 5,
            }
        },
        4,
    )
    assert [(s.green_fraction, s.blue_fraction) for s in p.steps] == [(0.5, 0.5), (1.0, 0.0)]
    state = RolloutState(RolloutPhase.ACTIVATING, started=0.0, since=0.0, step=0, applied=True)
    assert state.fractions(p) == (0.5, 0.5) and state.green_share(p) == 0.5
    assert rollout.start(0.0).fractions(p) == (0.5, 1.0)  # the first batch starts before blue shrinks


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (blue_green({"Type": "CANARY", "WaitIntervalInSeconds": 1}), "CanarySize is required"),
        (
            blue_green(
                {"Type": "CANARY", "WaitIntervalInSeconds": 1, "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 60}}
            ),
            "between 1% and 50%",
        ),
        (
            blue_green(
                {"Type": "CANARY", "WaitIntervalInSeconds": 1, "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 3}}
            ),
            "more than 50%",
        ),
        (
            blue_green(
                {
                    "Type": "LINEAR",
                    "WaitIntervalInSeconds": 1,
                    "LinearStepSize": {"Type": "CAPACITY_PERCENT", "Value": 5},
                }
            ),
            "between 10% and 50%",
        ),
        (
            blue_green({"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 600}, MaximumExecutionTimeoutInSeconds=600),
            "greater than the sum",
        ),
        (
            blue_green({"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 1})
            | {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1}}},
            "not both",
        ),
    ],
)
def test_refusals(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rollout.policy_from(config, 4)


def test_shares_must_grow_to_all_traffic() -> None:
    with pytest.raises(ValueError, match="last step"):
        rollout.custom_policy([5, 50], wait_s=1)
    with pytest.raises(ValueError, match="grow"):
        rollout.custom_policy([50, 20, 100], wait_s=1)
