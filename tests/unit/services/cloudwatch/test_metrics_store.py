"""The endpoint metrics store on a manual clock: accumulate, flush, query by period (open minutes included),
percentiles within the documented bound, retention, missing periods absent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servekit.services.cloudwatch.metric_store import MinuteRow
from servekit.services.cloudwatch.source import MetricQuery
from servekit.services.cloudwatch.store import (
    ALPHA,
    NAMESPACE,
    MetricsStore,
    StatisticError,
    bucket_of,
    bucket_value,
    statistic,
)
from servekit.services.database import StateDB

T0 = 1_000_000 * 60  # a minute boundary
DIMS = (("EndpointName", "ep"), ("VariantName", "A"))


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    with StateDB.open(tmp_path / "home") as d:
        yield d


def q(metric: str, stat: str, period: int = 60) -> MetricQuery:
    return MetricQuery(NAMESPACE, metric, DIMS, period, stat)


def test_accumulates_in_memory_then_flushes_finished_minutes_only(db: StateDB) -> None:
    clock = Clock(T0 + 5)
    store = MetricsStore(db.metrics, clock)
    for _ in range(3):
        store.record_invocation("ep", "A", instances=2, model_us=1000.0, overhead_us=50.0)
    assert db.metrics.count() == 0  # no write per request
    assert store.datapoints(q("Invocations", "Sum"), T0, T0 + 60) == [(T0, 3.0)]  # the open minute is visible
    assert store.flush() == 0  # the current minute is not finished
    clock.t = T0 + 61
    store.record_invocation("ep", "A", instances=2, model_us=3000.0, overhead_us=50.0, error=5)
    assert store.flush() == 6  # six series of minute T0 (Invocations, PerInstance, 4XX, 5XX, two latencies)
    assert db.metrics.count() == 6
    assert store.datapoints(q("Invocations", "Sum"), T0, T0 + 120) == [(T0, 3.0), (T0 + 60, 1.0)]
    assert store.datapoints(q("InvocationsPerInstance", "Sum"), T0, T0 + 60) == [(T0, 1.5)]
    assert store.datapoints(q("Invocation5XXErrors", "Average"), T0, T0 + 120) == [(T0, 0.0), (T0 + 60, 1.0)]
    assert store.datapoints(q("ModelLatency", "Average", 120), T0, T0 + 120) == [(T0, 1500.0)]
    assert store.datapoints(q("ModelLatency", "Maximum", 120), T0, T0 + 120) == [(T0, 3000.0)]
    assert store.datapoints(q("ModelLatency", "SampleCount", 120), T0, T0 + 120) == [(T0, 4.0)]
    store.flush(everything=True)  # shutdown: the partial minute too
    assert store.datapoints(q("Invocations", "Sum", 300), T0, T0 + 300) == [(T0, 4.0)]


def test_a_minute_flushed_twice_is_merged(db: StateDB) -> None:
    clock = Clock(T0 + 1)
    store = MetricsStore(db.metrics, clock)
    store.record(NAMESPACE, "ModelLatency", DIMS, 10.0)
    store.flush(everything=True)
    restarted = MetricsStore(db.metrics, clock)
    restarted.record(NAMESPACE, "ModelLatency", DIMS, 30.0)
    restarted.flush(everything=True)
    [row] = db.metrics.minutes(NAMESPACE, "ModelLatency", DIMS, T0, T0 + 60)
    assert (row.count, row.sum, row.min, row.max) == (2, 40.0, 10.0, 30.0)


def test_periods_are_epoch_aligned_and_missing_periods_are_absent(db: StateDB) -> None:
    clock = Clock(T0)
    store = MetricsStore(db.metrics, clock)
    for minute in (0, 1, 7, 8, 9):
        store.record(NAMESPACE, "Invocations", DIMS, 1.0, at=T0 + minute * 60 + 30)
    clock.t = T0 + 3600
    store.flush()
    assert store.datapoints(q("Invocations", "Sum"), T0, T0 + 600) == [
        (T0, 1.0),
        (T0 + 60, 1.0),
        (T0 + 420, 1.0),
        (T0 + 480, 1.0),
        (T0 + 540, 1.0),
    ]
    assert store.datapoints(q("Invocations", "Sum", 300), T0, T0 + 600) == [(T0, 2.0), (T0 + 300, 3.0)]
    assert store.datapoints(q("Invocations", "Sum"), T0 + 120, T0 + 420) == []  # no data: absent, not zero
    assert store.datapoints(q("Invocations", "Sum"), T0 + 60, T0 + 420) == [(T0 + 60, 1.0)]  # end exclusive
    other = MetricQuery(NAMESPACE, "Invocations", (("EndpointName", "ep"), ("VariantName", "B")), 60, "Sum")
    assert store.datapoints(other, T0, T0 + 600) == []
    # one-minute resolution: a period that is not whole minutes (a high-resolution alarm) has no datapoints
    assert store.datapoints(q("Invocations", "Sum", 90), T0, T0 + 600) == []
    assert store.datapoints(q("Invocations", "Sum", 10), T0, T0 + 600) == []
    with pytest.raises(StatisticError):
        store.datapoints(q("Invocations", "tm90"), T0, T0 + 600)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_percentiles_are_within_the_documented_bound_of_numpy_on_the_raw_samples(db: StateDB, seed: int) -> None:
    rng = np.random.default_rng(seed)
    samples = rng.lognormal(mean=8.0, sigma=1.5, size=5000)  # µs, spread over several decades
    clock = Clock(T0)
    store = MetricsStore(db.metrics, clock)
    for i, v in enumerate(samples):
        store.record(NAMESPACE, "ModelLatency", DIMS, float(v), at=T0 + (i % 5) * 60)  # five minutes
    clock.t = T0 + 3 * 60
    store.flush()  # some minutes stored, some open: the period merges both
    for p in (50, 90, 99, 99.9, 0, 100):
        [(t, got)] = store.datapoints(q("ModelLatency", f"p{p:g}", 300), T0, T0 + 300)
        want = float(np.percentile(samples, p, method="inverted_cdf"))
        assert t == T0
        assert abs(got - want) <= ALPHA * want, (p, got, want)
    [(_, s)] = store.datapoints(q("ModelLatency", "Sum", 300), T0, T0 + 300)
    assert s == pytest.approx(float(samples.sum()))
    [(_, lo)] = store.datapoints(q("ModelLatency", "Minimum", 300), T0, T0 + 300)
    assert lo == float(samples.min())


def test_bucket_bound_and_zero() -> None:
    for v in (1e-3, 0.5, 1.0, 7.0, 123.456, 9.9e6):
        assert abs(bucket_value(bucket_of(v)) - v) <= ALPHA * v
    assert bucket_value(bucket_of(0.0)) == 0.0
    row = MinuteRow(
        NAMESPACE, "Invocation4XXErrors", DIMS, T0, 4, 1.0, 0.0, 1.0, {bucket_of(0.0): 3, bucket_of(1.0): 1}
    )
    assert statistic(row, "p50") == 0.0
    assert statistic(row, "p90") == pytest.approx(1.0, rel=ALPHA)
    assert statistic(row, "Average") == 0.25


def test_retention_deletes_old_minutes(db: StateDB) -> None:
    clock = Clock(T0)
    store = MetricsStore(db.metrics, clock, retention_s=3600)
    store.record(NAMESPACE, "Invocations", DIMS, 1.0, at=T0)
    store.record(NAMESPACE, "Invocations", DIMS, 1.0, at=T0 + 1800)
    clock.t = T0 + 1900
    store.flush()
    assert db.metrics.count() == 2
    clock.t = T0 + 3600 + 120  # the first minute is now older than an hour
    store.flush()
    assert store.datapoints(q("Invocations", "Sum"), T0, T0 + 7200) == [(T0 + 1800, 1.0)]
    assert db.metrics.count() == 1


def test_series_lists_stored_and_open(db: StateDB) -> None:
    clock = Clock(T0)
    store = MetricsStore(db.metrics, clock)
    store.record(NAMESPACE, "Invocations", DIMS, 1.0)
    store.flush(everything=True)
    store.record(NAMESPACE, "ModelLatency", DIMS, 5.0)
    assert store.series(NAMESPACE) == [(NAMESPACE, "Invocations", DIMS), (NAMESPACE, "ModelLatency", DIMS)]
    assert store.series(NAMESPACE, "ModelLatency") == [(NAMESPACE, "ModelLatency", DIMS)]
    assert store.series("Other") == []
