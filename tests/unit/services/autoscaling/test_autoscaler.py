"""The autoscaler loop on a manual clock, against a fake endpoint and a fake metric source: target tracking,
several policies, clamps, suspension, step scaling through an alarm, scheduled actions, activities and their
statuses, cooldowns that survive a restart. No sleeps: each test calls ``tick()`` and moves the clock."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.names import Account
from servekit.services.autoscaling.api import AutoscalingApi
from servekit.services.autoscaling.runner import Autoscaler, success_message
from servekit.services.autoscaling.store import Autoscaling
from servekit.services.cloudwatch.alarms import AlarmAction, AlarmService
from servekit.services.cloudwatch.evaluation import AlarmState
from servekit.services.cloudwatch.source import MetricQuery
from servekit.services.database import StateDB

RID = "endpoint/ep/variant/A"
DIM = "sagemaker:variant:DesiredInstanceCount"
TARGET = {"ServiceNamespace": "sagemaker", "ResourceId": RID, "ScalableDimension": DIM}
T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class FakeEndpoint:
    """One endpoint with variant A: UpdateEndpointWeightsAndCapacities moves it to Updating; ``finish`` brings it
    back InService with ``serving`` instances (default: the desired count)."""

    def __init__(self, count: int = 1) -> None:
        self.status = "InService"
        self.desired = count
        self.serving = count
        self.updates: list[int] = []
        self.exists = True

    async def describe_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        if not self.exists or p["EndpointName"] != "ep":
            raise validation_exception(f'Could not find endpoint "{p["EndpointName"]}".')
        variant = {"VariantName": "A", "CurrentInstanceCount": self.serving, "DesiredInstanceCount": self.desired}
        return {"EndpointName": "ep", "EndpointStatus": self.status, "ProductionVariants": [variant]}

    async def update_endpoint_weights_and_capacities(self, p: dict[str, Any]) -> dict[str, Any]:
        if self.status != "InService":
            raise validation_exception(f'Cannot update in-progress endpoint "ep" ({self.status}).')
        [change] = p["DesiredWeightsAndCapacities"]
        assert change["VariantName"] == "A"
        self.status = "Updating"
        self.desired = change["DesiredInstanceCount"]
        self.updates.append(self.desired)
        return {"EndpointArn": "arn"}

    def finish(self, serving: int | None = None) -> None:
        self.status = "InService"
        self.serving = self.desired if serving is None else serving


class Load:
    """InvocationsPerInstance as the store would answer it: per period, the Sum of 1/N per request, for a total
    request rate (per minute) that the test sets over time."""

    def __init__(self, endpoint: FakeEndpoint) -> None:
        self.endpoint = endpoint
        self.per_minute = 0.0  # total invocations per minute across the variant
        self.history: dict[float, float] = {}  # period start -> Sum
        self.queries: list[MetricQuery] = []

    def advance(self, clock: Clock, seconds: float, period: int) -> None:
        """Let ``seconds`` pass with the current load, recording each period that starts meanwhile."""
        end = clock.now + seconds
        t = math.floor(clock.now / period) * period
        while t < end:
            per_instance = self.per_minute / max(self.endpoint.serving, 1)
            self.history[t] = per_instance * period / 60.0
            t += period
        clock.now = end

    def datapoints(self, query: MetricQuery, start: float, end: float) -> list[tuple[float, float]]:
        self.queries.append(query)
        return sorted((t, v) for t, v in self.history.items() if start <= t < end)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    d = StateDB.open(tmp_path / "home")
    yield d
    d.close()


class World:
    def __init__(self, db: StateDB, count: int = 1, period: int = 60) -> None:
        self.clock = Clock()
        self.repo = Autoscaling(db.conn, self.clock)
        self.api = AutoscalingApi(self.repo, Account(), self.clock)
        self.endpoint = FakeEndpoint(count)
        self.load = Load(self.endpoint)
        self.period = period
        self.scaler = self.new_scaler()

    def new_scaler(self) -> Autoscaler:
        return Autoscaler(self.repo, self.endpoint, self.load, self.clock, period_s=self.period)

    def call(self, op: str, **p: Any) -> dict[str, Any]:
        result: dict[str, Any] = asyncio.run(self.api.handlers()[op]({**TARGET, **p}))
        return result

    def register(self, lo: int, hi: int, **kw: Any) -> None:
        self.call("RegisterScalableTarget", MinCapacity=lo, MaxCapacity=hi, **kw)

    def target_tracking(self, name: str = "ipi", target: float = 100.0, **config: Any) -> str:
        tt = {
            "TargetValue": target,
            "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
            **config,
        }
        out = self.call(
            "PutScalingPolicy", PolicyName=name, PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration=tt,
        )  # fmt: skip
        return str(out["PolicyARN"])

    def tick(self) -> None:
        asyncio.run(self.scaler.tick())

    def run(self, seconds: float, step: float = 10.0) -> None:
        """Tick every ``step`` seconds for ``seconds``, the fake endpoint finishing each update before the next."""
        for _ in range(int(seconds / step)):
            self.load.advance(self.clock, step, self.period)
            if self.endpoint.status == "Updating":
                self.endpoint.finish()
            self.tick()

    def activities(self) -> list[dict[str, Any]]:
        return list(self.call("DescribeScalingActivities")["ScalingActivities"])


def test_target_tracking_scales_out_and_the_activity_follows_the_endpoint(db: StateDB) -> None:
    w = World(db)
    w.register(1, 5)
    w.target_tracking(target=100.0, ScaleOutCooldown=60, ScaleInCooldown=60)
    w.load.per_minute = 80.0
    w.run(300)
    assert w.endpoint.updates == []  # under the target: nothing
    assert w.activities() == []

    w.load.per_minute = 350.0  # 3.5x the target on one instance
    for _ in range(40):
        w.load.advance(w.clock, 10, 60)
        w.tick()
        if w.endpoint.updates:
            break
    assert w.endpoint.updates == [4]  # ceil(1 * 350 / 100)
    [activity] = w.activities()
    assert activity["StatusCode"] == "InProgress"
    assert activity["Description"] == "Setting desired instance count to 4."
    assert activity["Cause"].startswith(f"monitor alarm TargetTracking-{RID}-AlarmHigh-")
    assert activity["Cause"].endswith("in state ALARM triggered policy ipi")
    assert "EndTime" not in activity

    w.load.advance(w.clock, 10, 60)
    w.tick()  # still Updating: the scaler waits and changes nothing
    assert w.endpoint.updates == [4] and w.activities()[0]["StatusCode"] == "InProgress"
    w.endpoint.finish()
    w.tick()
    [activity] = w.activities()
    assert activity["StatusCode"] == "Successful"
    assert activity["StatusMessage"] == success_message(4)
    assert activity["EndTime"] > activity["StartTime"]


def test_period_compression_keeps_target_value_per_minute(db: StateDB) -> None:
    w = World(db, period=2)
    w.register(1, 10)
    w.target_tracking(target=60.0, ScaleOutCooldown=1, ScaleInCooldown=1)
    w.load.per_minute = 150.0  # 2.5 requests a second: 5 per 2 s period, 150 a minute
    w.run(8, step=1)
    assert w.endpoint.updates[:1] == [3]  # ceil(150 / 60), not ceil(5 / 60)
    assert all(q.period_s == 2 for q in w.load.queries)


def test_scale_in_waits_for_its_cooldown_even_across_a_restart(db: StateDB) -> None:
    w = World(db, count=1)
    w.register(1, 4)
    w.target_tracking(target=100.0, ScaleOutCooldown=1800, ScaleInCooldown=60)
    w.load.per_minute = 300.0
    w.run(300)
    assert w.endpoint.updates == [3]
    done = w.activities()[0]["EndTime"].timestamp()  # cooldowns run from when the activity completed

    w.load.per_minute = 0.0  # idle variants publish zeros: they scale in, once the scale-out cooldown is over
    w.scaler = w.new_scaler()  # a restart: the cooldown comes back from the state
    w.run(1500)  # 15 low minutes have long passed
    assert w.endpoint.updates == [3]
    w.run(600)
    assert w.endpoint.updates == [3, 1]
    scaled_in = w.activities()[0]
    assert scaled_in["Cause"].startswith(f"monitor alarm TargetTracking-{RID}-AlarmLow-")
    assert scaled_in["StartTime"].timestamp() >= done + 1800
    flapping = w.call("DescribeScalingActivities", IncludeNotScaledActivities=True)["ScalingActivities"]
    assert any(r["Code"] == "AutoScalingAnticipatedFlapping" for a in flapping for r in a.get("NotScaledReasons", []))


def test_scale_in_needs_every_policy_and_the_largest_scale_out_wins(db: StateDB) -> None:
    w = World(db, count=4)
    w.register(1, 10)
    w.target_tracking("loose", target=100.0, ScaleOutCooldown=0, ScaleInCooldown=0)
    w.target_tracking("tight", target=50.0, ScaleOutCooldown=0, ScaleInCooldown=0)
    w.load.per_minute = 4 * 70.0  # 70 per instance: under loose's low alarm (90), over tight's target
    w.run(1200)
    assert w.endpoint.updates[0] == 6  # tight: ceil(4 * 70 / 50); loose wanted fewer, and cannot scale in
    [first] = [a for a in w.activities() if a["Description"] == "Setting desired instance count to 6."]
    assert first["Cause"].endswith("triggered policy tight")
    assert min(w.endpoint.updates) >= 6  # loose never removed capacity tight needed


def test_disable_scale_in_policy_does_not_block_the_others(db: StateDB) -> None:
    w = World(db, count=3)
    w.register(1, 10)
    w.target_tracking("keep", target=100.0, DisableScaleIn=True, ScaleInCooldown=0, ScaleOutCooldown=0)
    w.target_tracking("trim", target=100.0, ScaleInCooldown=0, ScaleOutCooldown=0)
    w.load.per_minute = 60.0  # 20 per instance
    w.run(1200)
    assert w.endpoint.updates and w.endpoint.updates[-1] == 1
    assert w.activities()[-1]["Cause"].endswith("triggered policy trim")


def test_min_max_changes_move_the_count_at_once_ignoring_cooldowns(db: StateDB) -> None:
    w = World(db, count=1)
    w.register(1, 4)
    w.target_tracking(target=100.0, ScaleOutCooldown=3600, ScaleInCooldown=3600)
    w.load.per_minute = 50.0
    w.run(30)
    w.register(3, 4)  # Min above the count
    w.run(20)
    assert w.endpoint.updates == [3]
    assert w.activities()[0]["Cause"] == "minimum capacity was set to 3"
    w.register(1, 2)  # Max below it, within the scale-out cooldown's hour
    w.run(20)
    assert w.endpoint.updates == [3, 2]
    assert w.activities()[0]["StatusCode"] == "Successful"


def test_suspended_dynamic_scaling_out(db: StateDB) -> None:
    w = World(db, count=1)
    w.register(1, 4, SuspendedState={"DynamicScalingOutSuspended": True})
    w.target_tracking(target=100.0, ScaleOutCooldown=0)
    w.load.per_minute = 500.0
    w.run(600)
    assert w.endpoint.updates == []
    w.register(1, 4, SuspendedState={"DynamicScalingOutSuspended": False})
    w.run(60)
    assert w.endpoint.updates == [4]


def test_a_change_the_fleet_cannot_fulfil_or_the_endpoint_refuses_is_failed(db: StateDB) -> None:
    w = World(db, count=1)
    w.register(1, 4)
    w.target_tracking(target=100.0, ScaleOutCooldown=0)
    w.load.per_minute = 300.0
    for _ in range(30):
        w.load.advance(w.clock, 10, 60)
        w.tick()
        if w.endpoint.updates:
            break
    w.endpoint.finish(serving=2)  # one instance never came up
    w.tick()
    failed = w.activities()[0]
    assert failed["StatusCode"] == "Failed"
    assert failed["StatusMessage"].startswith("Failed to set desired instance count to 3. Reason: variant A has 2")

    async def refuse(p: dict[str, Any]) -> dict[str, Any]:
        raise ApiError("ValidationException", 'Cannot update in-progress endpoint "ep".', 400)

    w.endpoint.update_endpoint_weights_and_capacities = refuse  # type: ignore[method-assign]
    w.endpoint.serving = w.endpoint.desired = 1
    w.load.advance(w.clock, 300, 60)
    w.tick()
    refused = w.activities()[0]
    assert refused["StatusCode"] == "Failed" and "Cannot update in-progress endpoint" in refused["StatusMessage"]


def test_deleted_endpoint_deregisters_its_target(db: StateDB) -> None:
    w = World(db)
    w.register(1, 4)
    w.target_tracking()
    w.endpoint.exists = False
    w.tick()
    assert w.call("DescribeScalableTargets")["ScalableTargets"] == []
    assert w.call("DescribeScalingPolicies")["ScalingPolicies"] == []


STEPS = {
    "AdjustmentType": "ChangeInCapacity",
    "Cooldown": 120,
    "StepAdjustments": [
        {"MetricIntervalLowerBound": 0.0, "MetricIntervalUpperBound": 50.0, "ScalingAdjustment": 1},
        {"MetricIntervalLowerBound": 50.0, "ScalingAdjustment": 3},
    ],
}


def put_step(w: World, name: str = "step", config: dict[str, Any] = STEPS) -> str:
    out = w.call("PutScalingPolicy", PolicyName=name, PolicyType="StepScaling", StepScalingPolicyConfiguration=config)
    assert out["Alarms"] == []
    return str(out["PolicyARN"])


def fire(w: World, arn: str, values: tuple[float, ...], threshold: float = 100.0, repeat: bool = False) -> None:
    w.scaler.alarm_action(AlarmAction(arn, "busy", AlarmState.ALARM, threshold, values, w.clock.now, repeat))


def test_step_policy_runs_from_its_alarm_with_its_cooldown(db: StateDB) -> None:
    w = World(db, count=2)
    w.register(1, 10)
    arn = put_step(w)
    fire(w, arn, (120.0, 130.0))  # average 125: offset 25, the [0, 50) step
    w.tick()
    assert w.endpoint.updates == [3]
    act = w.activities()[0]
    assert act["Cause"] == "monitor alarm busy in state ALARM triggered policy step"
    w.endpoint.finish()
    w.clock.now += 30
    fire(w, arn, (125.0,), repeat=True)  # same step within the cooldown: the capacity added counts
    w.tick()
    assert w.endpoint.updates == [3]
    fire(w, arn, (170.0,), repeat=True)  # a bigger step within the cooldown: from the base (2) + 3 = 5
    w.tick()
    assert w.endpoint.updates == [3, 5]
    w.endpoint.finish()
    w.clock.now += 200
    fire(w, arn, (110.0,), repeat=True)  # cooldown over: +1 on the current count
    w.tick()
    assert w.endpoint.updates == [3, 5, 6]


def test_step_percent_and_exact_adjustments(db: StateDB) -> None:
    w = World(db, count=4)
    w.register(2, 10)
    pct = put_step(w, "pct", {
        "AdjustmentType": "PercentChangeInCapacity", "MinAdjustmentMagnitude": 2, "Cooldown": 0,
        "StepAdjustments": [{"MetricIntervalUpperBound": 0.0, "ScalingAdjustment": -30}],
    })  # fmt: skip
    exact = put_step(w, "exact", {
        "AdjustmentType": "ExactCapacity", "Cooldown": 0,
        "StepAdjustments": [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 7}],
    })  # fmt: skip
    fire(w, pct, (10.0,), threshold=50.0)  # 30% of 4 rounds toward 0 (1), raised to the magnitude 2
    w.tick()
    assert w.endpoint.updates == [2]
    w.endpoint.finish()
    fire(w, exact, (60.0,), threshold=50.0)
    w.tick()
    assert w.endpoint.updates == [2, 7]


def test_an_alarm_runs_a_step_policy_on_entering_alarm_and_again_while_it_stays(db: StateDB) -> None:
    w = World(db, count=1)
    w.register(1, 10)
    arn = put_step(w, config={**STEPS, "Cooldown": 0})
    values = {"v": 130.0}

    class Source:
        def datapoints(self, query: MetricQuery, start: float, end: float) -> list[tuple[float, float]]:
            first = math.floor(start / 60) * 60
            return [(t, values["v"]) for t in range(int(first), int(end), 60)]

    alarms = AlarmService(
        db.alarms, Source(), clock=w.clock, action_handlers={"arn:aws:autoscaling:": w.scaler.alarm_action}
    )
    asyncio.run(alarms.put_metric_alarm({
        "AlarmName": "busy", "Namespace": "AWS/SageMaker", "MetricName": "Invocations", "Statistic": "Sum",
        "Period": 60, "EvaluationPeriods": 1, "Threshold": 100.0, "ComparisonOperator": "GreaterThanThreshold",
        "Dimensions": [{"Name": "EndpointName", "Value": "ep"}], "AlarmActions": [arn],
    }))  # fmt: skip
    assert alarms.evaluate_due(w.clock.now) == [("busy", AlarmState.INSUFFICIENT_DATA, AlarmState.ALARM)]
    w.tick()
    assert w.endpoint.updates == [2]  # offset 30: +1
    history = db.alarms.history(name="busy", item_type="Action", max_records=10).items
    assert [h.summary for h in history] == [f"Successfully executed action {arn}"]
    w.endpoint.finish()
    values["v"] = 180.0
    w.clock.now += 60
    assert alarms.evaluate_due(w.clock.now) == []  # no transition, but the action runs again
    w.tick()
    assert w.endpoint.updates == [2, 5]  # offset 80: +3


def test_scheduled_actions_set_min_max_and_the_count_follows(db: StateDB) -> None:
    w = World(db, count=2)
    w.register(1, 10)
    w.target_tracking(target=100.0, ScaleOutCooldown=3600, ScaleInCooldown=3600)
    w.load.per_minute = 190.0  # 95 per instance: within range, no dynamic change
    w.call(
        "PutScheduledAction", ScheduledActionName="morning", Schedule="cron(0 9 ? * MON-FRI *)",
        ScalableTargetAction={"MinCapacity": 4},
    )  # fmt: skip
    w.call(
        "PutScheduledAction", ScheduledActionName="evening", Schedule="at(2023-11-14T23:00:00)",
        Timezone="Europe/Paris", ScalableTargetAction={"MinCapacity": 1, "MaxCapacity": 3},
    )  # fmt: skip
    listed = {a["ScheduledActionName"]: a for a in w.call("DescribeScheduledActions")["ScheduledActions"]}
    morning, evening = listed["morning"], listed["evening"]
    assert morning["ScheduledActionARN"].startswith("arn:aws:autoscaling:us-east-1:")
    assert ":scheduledActionName/morning" in morning["ScheduledActionARN"]
    assert evening["Timezone"] == "Europe/Paris"
    # T0 is Tuesday 2023-11-14 22:13:20 UTC; 09:00 UTC Wednesday is 10h47m away, 23:00 Paris (22:00 UTC) passed
    w.run(3600)
    assert w.endpoint.updates == []
    w.clock.now = 1_700_038_800.0 - 30  # 2023-11-15 09:00 UTC, less 30 s
    w.run(60)
    assert w.endpoint.updates == [4]
    [moved, bounds] = w.activities()[:2]
    assert bounds["Description"] == "Setting min capacity to 4 and max capacity to 10"
    assert bounds["Cause"] == moved["Cause"] == "scheduled action name morning was triggered"
    [target] = w.call("DescribeScalableTargets")["ScalableTargets"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (4, 10)
    w.run(3600)
    assert w.endpoint.updates == [4]  # fired once
    w.call("DeleteScheduledAction", ScheduledActionName="morning")
    assert [a["ScheduledActionName"] for a in w.call("DescribeScheduledActions")["ScheduledActions"]] == ["evening"]


def test_scheduled_scaling_suspended_skips_the_fire(db: StateDB) -> None:
    w = World(db, count=1)
    w.register(1, 10, SuspendedState={"ScheduledScalingSuspended": True})
    w.call("PutScheduledAction", ScheduledActionName="soon", Schedule="rate(1 minute)",
           ScalableTargetAction={"MinCapacity": 2})  # fmt: skip
    w.run(180)
    assert w.endpoint.updates == []
    w.register(1, 10, SuspendedState={"ScheduledScalingSuspended": False})
    w.run(120)
    assert w.endpoint.updates == [2]


def test_scheduled_action_validation(db: StateDB) -> None:
    w = World(db)
    w.register(1, 4)
    for schedule, message in [
        ("cron(0 9 * * MON *)", "exactly one of day-of-month and day-of-week"),
        ("cron(0 9 * *)", "six fields"),
        ("rate(0 minutes)", "positive"),
        ("every day", "is not valid"),
    ]:
        with pytest.raises(ApiError) as err:
            w.call("PutScheduledAction", ScheduledActionName="x", Schedule=schedule,
                   ScalableTargetAction={"MinCapacity": 1})  # fmt: skip
        assert err.value.code == "ValidationException" and message in err.value.message, err.value.message
    with pytest.raises(ApiError) as err:
        w.call("PutScheduledAction", ScheduledActionName="x", Schedule="rate(1 hour)",
               ScalableTargetAction={"MinCapacity": 3, "MaxCapacity": 2})  # fmt: skip
    assert "cannot be greater" in err.value.message
    with pytest.raises(ApiError) as err:
        w.call("DeleteScheduledAction", ScheduledActionName="nope")
    assert err.value.code == "ObjectNotFoundException"
