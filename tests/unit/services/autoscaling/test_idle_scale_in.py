"""An idle variant publishes zeros and scales in (issue 30, item 6), on a manual clock: the metrics store fills the
buckets of a live variant that ended without traffic, a target-tracking policy reading the real store then scales
an idle variant of 2 in to its MinCapacity of 1, and its two alarms are listed by DescribeAlarms as AWS lists
them (and go with the policy)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.aws.names import Account
from servekit.services.autoscaling.api import AutoscalingApi
from servekit.services.autoscaling.runner import Autoscaler
from servekit.services.autoscaling.store import Autoscaling
from servekit.services.cloudwatch.alarms import AlarmService
from servekit.services.cloudwatch.evaluation import AlarmState
from servekit.services.cloudwatch.source import MetricQuery
from servekit.services.cloudwatch.store import IDLE_ZERO_METRICS, NAMESPACE, MetricsStore
from servekit.services.database import StateDB

T0 = 1_000_000 * 60  # a minute boundary
DIMS = (("EndpointName", "ep"), ("VariantName", "A"))
RID = "endpoint/ep/variant/A"
TARGET = {
    "ServiceNamespace": "sagemaker",
    "ResourceId": RID,
    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
}


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    with StateDB.open(tmp_path / "home") as d:
        yield d


def q(metric: str, stat: str, period: int = 5, dims: tuple[tuple[str, str], ...] = DIMS) -> MetricQuery:
    return MetricQuery(NAMESPACE, metric, dims, period, stat)


def test_an_idle_live_variant_publishes_zeros_and_a_busy_bucket_keeps_its_own_samples(db: StateDB) -> None:
    clock = Clock(T0 + 1)
    live: list[tuple[str, str, str | None]] = [("ep", "A", "cfg")]
    store = MetricsStore(db.metrics, clock, resolution_s=5, live_variants=lambda: live)
    store.flush()  # first seen in bucket T0: nothing before it is filled
    store.record_invocation("ep", "A", instances=2, model_us=100.0, overhead_us=5.0)  # bucket T0 is busy
    clock.t = T0 + 17  # buckets T0 (busy), T0+5 and T0+10 (idle) have ended
    store.flush()
    for metric in IDLE_ZERO_METRICS:
        assert store.datapoints(q(metric, "Sum"), T0 - 60, T0 + 15) == [
            (T0, 1.0 if metric == "Invocations" else 0.5 if metric == "InvocationsPerInstance" else 0.0),
            (T0 + 5, 0.0),
            (T0 + 10, 0.0),
        ], metric
    # idle buckets hold no sample: SampleCount counts requests, an Average stays a per-request ratio
    assert store.datapoints(q("Invocations", "SampleCount", 15), T0, T0 + 15) == [(T0, 1.0)]
    assert store.datapoints(q("Invocation5XXErrors", "Average"), T0 + 5, T0 + 10) == [(T0 + 5, 0.0)]
    assert store.datapoints(q("InvocationsPerInstance", "Maximum"), T0 + 5, T0 + 10) == [(T0 + 5, 0.0)]
    # the endpoint config's series too; no latency for an idle bucket
    with_config = tuple(sorted((*DIMS, ("EndpointConfigName", "cfg"))))
    assert store.datapoints(q("Invocations", "Sum", dims=with_config), T0 + 5, T0 + 15) == [
        (T0 + 5, 0.0),
        (T0 + 10, 0.0),
    ]
    assert store.datapoints(q("ModelLatency", "Sum"), T0 + 5, T0 + 15) == []
    # a query sees the bucket that just ended at once, before the next flush writes it
    clock.t = T0 + 21
    assert store.datapoints(q("InvocationsPerInstance", "Sum"), T0 + 15, T0 + 20) == [(T0 + 15, 0.0)]
    # a variant that is gone publishes nothing more
    live.clear()
    clock.t = T0 + 40
    store.flush()
    assert store.datapoints(q("Invocations", "Sum"), T0 + 20, T0 + 40) == []


def test_a_store_without_live_variants_leaves_missing_periods_absent(db: StateDB) -> None:
    clock = Clock(T0)
    store = MetricsStore(db.metrics, clock, resolution_s=5)
    clock.t = T0 + 60
    assert store.flush() == 0
    assert store.datapoints(q("Invocations", "Sum"), T0, T0 + 60) == []


class Endpoint:
    """Variant A of endpoint ep: an update applies at once."""

    def __init__(self, count: int) -> None:
        self.count = count

    async def describe_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        variant = {"VariantName": "A", "CurrentInstanceCount": self.count, "DesiredInstanceCount": self.count}
        return {"EndpointName": "ep", "EndpointStatus": "InService", "ProductionVariants": [variant]}

    async def update_endpoint_weights_and_capacities(self, p: dict[str, Any]) -> dict[str, Any]:
        self.count = p["DesiredWeightsAndCapacities"][0]["DesiredInstanceCount"]
        return {"EndpointArn": "arn"}


def call(handler: Any, **p: Any) -> dict[str, Any]:
    result: dict[str, Any] = asyncio.run(handler(p))
    return result


def test_an_idle_variant_of_two_scales_in_and_its_target_tracking_alarms_are_listed(db: StateDB) -> None:
    clock = Clock(T0)
    period = 5
    store = MetricsStore(db.metrics, clock, resolution_s=period, live_variants=lambda: [("ep", "A", None)])
    endpoint = Endpoint(2)
    repo = Autoscaling(db.conn, clock)
    api = AutoscalingApi(repo, Account(), clock).handlers()
    scaler = Autoscaler(repo, endpoint, store, clock, period_s=period, tick_s=period)
    alarms = AlarmService(db.alarms, store, clock=clock, resolution_s=period)
    scaler.alarms = alarms
    call(api["RegisterScalableTarget"], MinCapacity=1, MaxCapacity=4, **TARGET)
    arn = call(api["PutScalingPolicy"], PolicyName="ipi", PolicyType="TargetTrackingScaling", **TARGET,
               TargetTrackingScalingPolicyConfiguration={
                   "TargetValue": 60.0,
                   "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
               })["PolicyARN"]  # fmt: skip
    policy_id = arn.split(":")[6]
    # no traffic at all: 15 periods of zeros later (the low alarm's window) the variant is at 1
    for _ in range(16 * period):
        clock.t += 1
        store.flush()
        asyncio.run(scaler.tick())
    assert endpoint.count == 1
    listed = call(alarms.describe_alarms)["MetricAlarms"]
    names = [a["AlarmName"] for a in listed]
    assert names == [f"TargetTracking-{RID}-AlarmHigh-{policy_id}", f"TargetTracking-{RID}-AlarmLow-{policy_id}"]
    high, low = listed
    assert (high["MetricName"], high["Namespace"], high["Statistic"]) == ("InvocationsPerInstance", NAMESPACE, "Sum")
    assert high["Dimensions"] == [{"Name": k, "Value": v} for k, v in DIMS]
    assert (high["EvaluationPeriods"], high["ComparisonOperator"]) == (3, "GreaterThanThreshold")
    assert (low["EvaluationPeriods"], low["ComparisonOperator"]) == (15, "LessThanThreshold")
    # per period: TargetValue is per minute, the alarm reads 5-second Sums
    assert (high["Threshold"], low["Threshold"]) == (5.0, pytest.approx(4.5))
    assert high["AlarmActions"] == low["AlarmActions"] == [arn]
    assert re.fullmatch(r"DO NOT EDIT OR DELETE\. For TargetTrackingScaling policy .+", low["AlarmDescription"])
    assert "ServekitManagedBy" not in low
    # the low alarm reads the zeros: ALARM, not INSUFFICIENT_DATA
    alarms.evaluate_due(clock.t)
    assert call(alarms.describe_alarms, AlarmNames=[low["AlarmName"]])["MetricAlarms"][0]["StateValue"] == (
        AlarmState.ALARM
    )
    # a user's alarm of a like name is not the scaler's; the policy's alarms go with it
    call(alarms.put_metric_alarm, AlarmName=f"TargetTracking-{RID}-AlarmHigh-mine", Namespace=NAMESPACE,
         MetricName="Invocations", Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=1.0,
         ComparisonOperator="GreaterThanThreshold")  # fmt: skip
    call(api["DeleteScalingPolicy"], PolicyName="ipi", **TARGET)
    asyncio.run(scaler.tick())
    assert [a["AlarmName"] for a in call(alarms.describe_alarms)["MetricAlarms"]] == [
        f"TargetTracking-{RID}-AlarmHigh-mine"
    ]
