"""The metrics store at a resolution finer than a minute, on a manual clock: buckets, allowed periods, flushing,
roll-up of old sub-minute buckets, the EndpointConfigName series, ModelSetupTime, published data, and alarms whose
periods follow the resolution."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.services.cloudwatch.evaluation import AlarmConfigError, AlarmDefinition
from servekit.services.cloudwatch.source import MetricQuery
from servekit.services.cloudwatch.store import (
    HIGH_RESOLUTION_RETENTION_S,
    NAMESPACE,
    MetricsStore,
    StatisticError,
    check_resolution,
)
from servekit.services.database import StateDB

T0 = 1_000_000 * 60  # a minute boundary
DIMS = (("EndpointName", "ep"), ("VariantName", "A"))
GREEN = (("EndpointConfigName", "cfg-green"), ("EndpointName", "ep"), ("VariantName", "A"))


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    with StateDB.open(tmp_path / "home") as d:
        yield d


def q(metric: str, stat: str, period: int, dims: tuple[tuple[str, str], ...] = DIMS) -> MetricQuery:
    return MetricQuery(NAMESPACE, metric, dims, period, stat)


@pytest.mark.parametrize("good", [1, 2, 5, 10, 20, 30, 60, 120, 300])
def test_resolutions_that_divide_a_minute_or_are_whole_minutes(good: int) -> None:
    assert check_resolution(good) == good


@pytest.mark.parametrize("bad", [0, -1, 3, 7, 15, 45, 90, 61])
def test_other_resolutions_are_refused(db: StateDB, bad: int) -> None:
    with pytest.raises(ValueError, match="1, 2, 5, 10, 20, 30 or a multiple of 60"):
        MetricsStore(db.metrics, resolution_s=bad)


def test_samples_fall_in_resolution_buckets_and_periods_are_multiples_of_it(db: StateDB) -> None:
    clock = Clock(T0)
    store = MetricsStore(db.metrics, clock, resolution_s=2)
    assert store.resolution_s == 2
    for t, v in ((0.5, 1.0), (1.9, 3.0), (2.0, 5.0), (5.5, 7.0), (13.0, 9.0)):
        store.record(NAMESPACE, "ModelLatency", DIMS, v, at=T0 + t)
    clock.t = T0 + 13  # buckets 0, 2 and 4 are finished; 12 is the current one
    assert store.flush() == 3  # buckets T0, T0+2, T0+4 written; T0+12 still open
    assert store.datapoints(q("ModelLatency", "Sum", 2), T0, T0 + 20) == [
        (T0, 4.0),
        (T0 + 2, 5.0),
        (T0 + 4, 7.0),
        (T0 + 12, 9.0),
    ]
    assert store.datapoints(q("ModelLatency", "Maximum", 4), T0, T0 + 20) == [(T0, 5.0), (T0 + 4, 7.0), (T0 + 12, 9.0)]
    assert store.datapoints(q("ModelLatency", "SampleCount", 10), T0, T0 + 20) == [(T0, 4.0), (T0 + 10, 1.0)]
    assert store.datapoints(q("ModelLatency", "Sum", 60), T0, T0 + 60) == [(T0, 25.0)]
    # not a multiple of the resolution: no datapoints for an alarm, an error for a direct period query
    assert store.datapoints(q("ModelLatency", "Sum", 3), T0, T0 + 20) == []
    with pytest.raises(StatisticError, match="multiple of 2 seconds"):
        store.periods(NAMESPACE, "ModelLatency", DIMS, 5, T0, T0 + 20)


def test_one_minute_default_keeps_high_resolution_periods_empty(db: StateDB) -> None:
    store = MetricsStore(db.metrics, Clock(T0 + 5))
    store.record(NAMESPACE, "Invocations", DIMS, 1.0)
    assert store.datapoints(q("Invocations", "Sum", 10), T0, T0 + 60) == []
    assert store.datapoints(q("Invocations", "Sum", 60), T0, T0 + 60) == [(T0, 1.0)]
    ten = MetricsStore(db.metrics, Clock(T0 + 5), resolution_s=10)
    ten.record(NAMESPACE, "Invocations", DIMS, 1.0, at=T0 + 25)
    assert ten.datapoints(q("Invocations", "Sum", 10), T0 + 20, T0 + 60) == [(T0 + 20, 1.0)]


def test_latest_is_each_series_newest_flushed_bucket(db: StateDB) -> None:
    clock = Clock(T0)
    store = MetricsStore(db.metrics, clock, resolution_s=5)
    store.record(NAMESPACE, "Invocations", DIMS, 1.0, at=T0 + 1)
    store.record(NAMESPACE, "Invocations", DIMS, 1.0, at=T0 + 6)
    store.record(NAMESPACE, "Invocations", DIMS, 1.0, at=T0 + 7)
    assert store.latest() == []  # nothing finished yet
    clock.t = T0 + 11
    store.flush()
    [row] = store.latest(NAMESPACE)
    assert (row.minute, row.sum) == (T0 + 5, 2.0)
    assert store.latest("Other") == []


def test_old_sub_minute_buckets_roll_up_into_minutes(db: StateDB) -> None:
    clock = Clock(T0)
    store = MetricsStore(db.metrics, clock, resolution_s=1)
    for s in (0, 1, 30, 59, 60):
        store.record(NAMESPACE, "ModelLatency", DIMS, float(s + 1), at=T0 + s)
    clock.t = T0 + 61
    store.flush()
    assert db.metrics.count() == 5  # one row per second at first
    clock.t = T0 + HIGH_RESOLUTION_RETENTION_S + 120  # both minutes are past three hours now
    store.flush()
    rows = db.metrics.minutes(NAMESPACE, "ModelLatency", DIMS, T0, T0 + 120)
    assert [(r.minute, r.count, r.sum, r.min, r.max) for r in rows] == [
        (T0, 4, 1.0 + 2.0 + 31.0 + 60.0, 1.0, 60.0),
        (T0 + 60, 1, 61.0, 61.0, 61.0),
    ]
    # the minute's statistics are unchanged by the roll-up
    assert store.datapoints(q("ModelLatency", "p100", 60), T0, T0 + 60) == [(T0, 60.0)]


def test_invocations_are_recorded_with_and_without_the_endpoint_config(db: StateDB) -> None:
    store = MetricsStore(db.metrics, Clock(T0 + 1))
    store.record_invocation("ep", "A", instances=2, model_us=100.0, overhead_us=5.0, config_name="cfg-blue")
    store.record_invocation("ep", "A", instances=2, model_us=300.0, overhead_us=5.0, config_name="cfg-green")
    store.record_invocation("ep", "A", instances=2, model_us=500.0, overhead_us=5.0, error=5, config_name="cfg-green")
    assert store.datapoints(q("Invocations", "Sum", 60), T0, T0 + 60) == [(T0, 3.0)]
    assert store.datapoints(q("Invocations", "Sum", 60, GREEN), T0, T0 + 60) == [(T0, 2.0)]
    assert store.datapoints(q("Invocation5XXErrors", "Average", 60, GREEN), T0, T0 + 60) == [(T0, 0.5)]
    assert store.datapoints(q("ModelLatency", "Maximum", 60, GREEN), T0, T0 + 60) == [(T0, 500.0)]
    blue = (("EndpointConfigName", "cfg-blue"), *DIMS)
    assert store.datapoints(q("ModelLatency", "Average", 60, blue), T0, T0 + 60) == [(T0, 100.0)]
    configs = sorted(dict(d).get("EndpointConfigName", "") for _, _, d in store.series(NAMESPACE, "Invocations"))
    assert configs == ["", "cfg-blue", "cfg-green"]


def test_model_setup_time(db: StateDB) -> None:
    store = MetricsStore(db.metrics, Clock(T0 + 1))
    store.record_setup_time("ep", "A", "cfg-green", 2.5e6)
    store.record_setup_time("ep", "A", "cfg-green", 3.5e6)
    assert store.datapoints(q("ModelSetupTime", "Average", 60), T0, T0 + 60) == [(T0, 3.0e6)]
    assert store.datapoints(q("ModelSetupTime", "SampleCount", 60, GREEN), T0, T0 + 60) == [(T0, 2.0)]
    assert store.unit("ModelSetupTime") == "Microseconds"


def test_published_values_counts_and_statistic_sets(db: StateDB) -> None:
    clock = Clock(T0 + 10)
    store = MetricsStore(db.metrics, clock, resolution_s=5)
    store.put("app", "Size", DIMS, T0 + 1, values=[(2.0, 3.0), (10.0, 1.0)], unit="Bytes")
    store.put("app", "Size", DIMS, T0 + 2, statistics=(4.0, 40.0, 5.0, 15.0), unit="Kilobytes")
    query = MetricQuery("app", "Size", DIMS, 5, "SampleCount")
    assert store.datapoints(query, T0, T0 + 10) == [(T0, 8.0)]
    # the set's four samples count at its average (10) for percentiles: 2 2 2 10 10 10 10 10
    for stat, want in (("Sum", 56.0), ("Minimum", 2.0), ("Maximum", 15.0), ("p25", 2.0), ("p75", 10.0)):
        [(_, got)] = store.datapoints(MetricQuery("app", "Size", DIMS, 5, stat), T0, T0 + 10)
        assert got == pytest.approx(want, rel=0.01), stat
    assert store.unit("Size", "app") == "Bytes"  # the first unit published stays
    assert store.unit("Size") == "None"  # another namespace's metric of that name is not affected
    # data older than the high-resolution retention goes into its minute, as CloudWatch would have rolled it up
    old = T0 + 10 - HIGH_RESOLUTION_RETENTION_S - 37
    store.put("app", "Size", DIMS, old, values=[(1.0, 1.0)])
    [(start, _)] = store.datapoints(MetricQuery("app", "Size", DIMS, 60, "Sum"), old - 60, old + 60)
    assert start == old // 60 * 60


def test_alarm_periods_follow_the_resolution() -> None:
    params = {
        "AlarmName": "a",
        "Namespace": NAMESPACE,
        "MetricName": "Invocations",
        "Statistic": "Sum",
        "Period": 2,
        "EvaluationPeriods": 1,
        "Threshold": 1.0,
        "ComparisonOperator": "GreaterThanThreshold",
    }
    assert AlarmDefinition.from_params(params, resolution_s=2).period_s == 2
    assert AlarmDefinition.from_params(params, resolution_s=1).period_s == 2
    with pytest.raises(AlarmConfigError, match="multiple of 60"):
        AlarmDefinition.from_params(params)  # one-minute data: CloudWatch's periods only
    with pytest.raises(AlarmConfigError, match="or of 5, the metrics resolution"):
        AlarmDefinition.from_params(params, resolution_s=5)
    assert AlarmDefinition.from_params({**params, "Period": 10}).period_s == 10  # CloudWatch's own
