"""CloudWatch's metric reads (GetMetricStatistics, GetMetricData, ListMetrics) over the store on a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from servekit.aws import ApiError
from servekit.services.cloudwatch.metrics_api import CloudWatchMetrics
from servekit.services.cloudwatch.store import NAMESPACE, MetricsStore
from servekit.services.database import StateDB

T0 = 1_000_000 * 60
DIMS = [{"Name": "VariantName", "Value": "A"}, {"Name": "EndpointName", "Value": "ep"}]  # any order


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@pytest.fixture
def cw(tmp_path: Path) -> Iterator[CloudWatchMetrics]:
    with StateDB.open(tmp_path / "home") as db:
        clock = [float(T0)]
        store = MetricsStore(db.metrics, lambda: clock[0])
        for minute, latencies in ((0, [100.0, 200.0]), (2, [300.0]), (3, [400.0, 500.0, 600.0])):
            for v in latencies:
                clock[0] = T0 + minute * 60 + 1
                store.record_invocation("ep", "A", instances=2, model_us=v, overhead_us=10.0, error=None)
        clock[0] = T0 + 180  # minutes 0-2 flushed, minute 3 still open
        store.flush()
        yield CloudWatchMetrics(store, lambda: clock[0])


def call(coro: Any) -> dict[str, Any]:
    result: dict[str, Any] = asyncio.run(coro)
    return result


def test_get_metric_statistics_by_period_with_units(cw: CloudWatchMetrics) -> None:
    base = {"Namespace": NAMESPACE, "Dimensions": DIMS, "StartTime": at(T0), "EndTime": at(T0 + 600)}
    got = call(cw.get_metric_statistics({**base, "MetricName": "Invocations", "Period": 120, "Statistics": ["Sum"]}))
    assert [(d["Timestamp"], d["Sum"]) for d in got["Datapoints"]] == [(at(T0), 2.0), (at(T0 + 120), 4.0)]
    got = call(
        cw.get_metric_statistics(
            {**base, "MetricName": "ModelLatency", "Period": 600, "ExtendedStatistics": ["p50", "p100"]}
        )
    )
    [point] = got["Datapoints"]
    assert point["Unit"] == "Microseconds"
    assert point["ExtendedStatistics"]["p100"] == 600.0
    assert point["ExtendedStatistics"]["p50"] == pytest.approx(300.0, rel=0.01)
    none = {**base, "MetricName": "Invocations", "Period": 60, "Statistics": ["Sum"], "Unit": "Count"}
    assert call(cw.get_metric_statistics(none))["Datapoints"] == []


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"Period": 30}, "InvalidParameterValueException"),
        ({"Statistics": [], "ExtendedStatistics": []}, "InvalidParameterCombinationException"),
        ({"ExtendedStatistics": ["p99"]}, "InvalidParameterCombinationException"),
        ({"Statistics": [], "ExtendedStatistics": ["tm90"]}, "InvalidParameterValueException"),
        ({"EndTime": at(T0 - 60)}, "InvalidParameterValueException"),
        ({"EndTime": at(T0 + 1441 * 60)}, "InvalidParameterCombinationException"),
    ],
)
def test_get_metric_statistics_refuses(cw: CloudWatchMetrics, change: dict[str, Any], code: str) -> None:
    p = {
        "Namespace": NAMESPACE,
        "MetricName": "Invocations",
        "Dimensions": DIMS,
        "StartTime": at(T0),
        "EndTime": at(T0 + 600),
        "Period": 60,
        "Statistics": ["Sum"],
        **change,
    }
    with pytest.raises(ApiError) as err:
        call(cw.get_metric_statistics(p))
    assert err.value.code == code


def test_get_metric_data_orders_and_hides(cw: CloudWatchMetrics) -> None:
    metric = {"Namespace": NAMESPACE, "MetricName": "Invocations", "Dimensions": DIMS}
    queries: list[dict[str, Any]] = [
        {"Id": "a", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Sum"}},
        {"Id": "b", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Sum"}, "ReturnData": False},
    ]
    got = call(cw.get_metric_data({"MetricDataQueries": queries, "StartTime": at(T0), "EndTime": at(T0 + 600)}))
    [a] = got["MetricDataResults"]
    assert a["Timestamps"] == [at(T0 + 180), at(T0 + 120), at(T0)]  # newest first by default
    assert a["Values"] == [3.0, 1.0, 2.0] and a["Label"] == "Invocations" and a["StatusCode"] == "Complete"
    asc = call(
        cw.get_metric_data(
            {
                "MetricDataQueries": queries[:1],
                "StartTime": at(T0),
                "EndTime": at(T0 + 600),
                "ScanBy": "TimestampAscending",
            }
        )
    )
    assert asc["MetricDataResults"][0]["Values"] == [2.0, 1.0, 3.0]
    for bad in ([{"Id": "e", "Expression": "a*2"}], [{"Id": "Upper", "MetricStat": queries[0]["MetricStat"]}]):
        with pytest.raises(ApiError) as err:
            call(cw.get_metric_data({"MetricDataQueries": bad, "StartTime": at(T0), "EndTime": at(T0 + 600)}))
        assert err.value.code == "InvalidParameterValueException"


def test_list_metrics_filters(cw: CloudWatchMetrics) -> None:
    every = call(cw.list_metrics({}))["Metrics"]
    assert len(every) == 6
    only = call(cw.list_metrics({"Namespace": NAMESPACE, "MetricName": "ModelLatency"}))["Metrics"]
    assert only == [
        {
            "Namespace": NAMESPACE,
            "MetricName": "ModelLatency",
            "Dimensions": [{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "A"}],
        }
    ]
    assert len(call(cw.list_metrics({"Dimensions": [{"Name": "VariantName"}]}))["Metrics"]) == 6
    assert call(cw.list_metrics({"Dimensions": [{"Name": "VariantName", "Value": "B"}]}))["Metrics"] == []
    assert call(cw.list_metrics({"Namespace": "Other"}))["Metrics"] == []
