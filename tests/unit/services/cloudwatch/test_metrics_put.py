"""PutMetricData's checks (CloudWatch's codes and messages, its limits) and reads of what it stored, on a manual
clock; and the resolution's effect on the period the read operations accept."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from servekit.aws import ApiError
from servekit.services.cloudwatch.metrics_api import CloudWatchMetrics
from servekit.services.cloudwatch.store import MetricsStore
from servekit.services.database import StateDB

T0 = 1_000_000 * 60
DIMS = [{"Name": "EndpointName", "Value": "ep"}]


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@pytest.fixture
def cw(tmp_path: Path) -> Iterator[CloudWatchMetrics]:
    with StateDB.open(tmp_path / "home") as db:
        clock = [float(T0 + 30)]
        yield CloudWatchMetrics(MetricsStore(db.metrics, lambda: clock[0], resolution_s=10), lambda: clock[0])


def call(coro: Any) -> dict[str, Any]:
    result: dict[str, Any] = asyncio.run(coro)
    return result


def put(cw: CloudWatchMetrics, *data: dict[str, Any], namespace: str = "servekit") -> dict[str, Any]:
    return call(cw.put_metric_data({"Namespace": namespace, "MetricData": list(data)}))


def refused(cw: CloudWatchMetrics, *data: dict[str, Any], namespace: str = "servekit") -> ApiError:
    with pytest.raises(ApiError) as err:
        put(cw, *data, namespace=namespace)
    return err.value


def stats(cw: CloudWatchMetrics, metric: str, period: int = 60, **kw: Any) -> list[dict[str, Any]]:
    got = call(
        cw.get_metric_statistics(
            {
                "Namespace": "servekit",
                "MetricName": metric,
                "Dimensions": DIMS,
                "StartTime": at(T0 - 600),
                "EndTime": at(T0 + 600),
                "Period": period,
                "Statistics": ["SampleCount", "Sum", "Maximum"],
                **kw,
            }
        )
    )
    return list(got["Datapoints"])


def test_published_data_is_read_back_at_the_store_resolution(cw: CloudWatchMetrics) -> None:
    assert put(cw, {"MetricName": "Drift", "Dimensions": DIMS, "Value": 3.0}) == {}
    put(cw, {"MetricName": "Drift", "Dimensions": DIMS, "Value": 5.0, "Timestamp": at(T0 + 5), "Unit": "Count"})
    by_ten = stats(cw, "Drift", period=10)
    assert [(p["Timestamp"], p["Sum"]) for p in by_ten] == [(at(T0), 5.0), (at(T0 + 30), 3.0)]
    [minute] = stats(cw, "Drift")
    assert (minute["SampleCount"], minute["Sum"], minute["Maximum"], minute["Unit"]) == (2.0, 8.0, 5.0, "Count")
    listed = call(cw.list_metrics({"Namespace": "servekit"}))["Metrics"]
    assert listed == [{"Namespace": "servekit", "MetricName": "Drift", "Dimensions": DIMS}]
    with pytest.raises(ApiError) as err:  # 10 s datapoints: a period must be a multiple of 10
        stats(cw, "Drift", period=15)
    assert err.value.code == "InvalidParameterValueException" and "multiple of 10" in err.value.message


def test_reserved_namespace(cw: CloudWatchMetrics) -> None:
    err = refused(cw, {"MetricName": "Invocations", "Value": 1.0}, namespace="AWS/SageMaker")
    assert (err.code, err.message) == (
        "InvalidParameterValueException",
        "The value AWS/ for parameter Namespace is invalid.",
    )


@pytest.mark.parametrize(
    ("datum", "code", "words"),
    [
        (
            {"MetricName": "m", "Value": 1.0, "Values": [1.0]},
            "InvalidParameterCombinationException",
            "mutually exclusive",
        ),
        (
            {
                "MetricName": "m",
                "Value": 1.0,
                "StatisticValues": {"SampleCount": 1, "Sum": 1, "Minimum": 1, "Maximum": 1},
            },
            "InvalidParameterCombinationException",
            "MetricData.member.1.Value and MetricData.member.1.StatisticValues",
        ),
        ({"MetricName": "m"}, "MissingRequiredParameterException", "is required"),
        (
            {"MetricName": "m", "Values": [1.0, 2.0], "Counts": [1.0]},
            "InvalidParameterCombinationException",
            "same size",
        ),
        ({"MetricName": "m", "Value": 1.0, "Counts": [1.0]}, "InvalidParameterCombinationException", "Counts needs"),
        ({"MetricName": "m", "Values": [1.0] * 151}, "InvalidParameterValueException", "more than 150"),
        ({"MetricName": "m", "Values": [1.0], "Counts": [-1.0]}, "InvalidParameterValueException", "negative"),
        ({"MetricName": "m", "Value": float("inf")}, "InvalidParameterValueException", "finite"),
        ({"MetricName": "m", "Value": 2.0**361}, "InvalidParameterValueException", "2^360"),
        (
            {"MetricName": "m", "StatisticValues": {"SampleCount": 0, "Sum": 0, "Minimum": 0, "Maximum": 0}},
            "InvalidParameterValueException",
            "SampleCount must be greater than 0",
        ),
        (
            {"MetricName": "m", "StatisticValues": {"SampleCount": 2, "Sum": 3, "Minimum": 2, "Maximum": 1}},
            "InvalidParameterValueException",
            "Minimum must not be greater",
        ),
        (
            {"MetricName": "m", "Value": 1.0, "Timestamp": at(T0 - 15 * 86_400)},
            "InvalidParameterValueException",
            "two weeks",
        ),
        (
            {"MetricName": "m", "Value": 1.0, "Timestamp": at(T0 + 3 * 3600)},
            "InvalidParameterValueException",
            "two hours",
        ),
        (
            {"MetricName": "m", "Value": 1.0, "StorageResolution": 5},
            "InvalidParameterValueException",
            "StorageResolution",
        ),
        (
            {"MetricName": "m", "Value": 1.0, "Dimensions": [{"Name": f"d{i}", "Value": "v"} for i in range(31)]},
            "InvalidParameterValueException",
            "more than 30",
        ),
        (
            {"MetricName": "m", "Value": 1.0, "Dimensions": [{"Name": "d", "Value": "1"}, {"Name": "d", "Value": "2"}]},
            "InvalidParameterValueException",
            "more than once",
        ),
    ],
)
def test_datum_checks(cw: CloudWatchMetrics, datum: dict[str, Any], code: str, words: str) -> None:
    err = refused(cw, datum)
    assert err.code == code and words in err.message, err.message


def test_a_refused_datum_stores_nothing_of_its_request(cw: CloudWatchMetrics) -> None:
    err = refused(
        cw, {"MetricName": "ok", "Dimensions": DIMS, "Value": 1.0}, {"MetricName": "bad", "Value": float("nan")}
    )
    assert "MetricData.member.2.Value" in err.message
    assert stats(cw, "ok") == []


def test_request_limits_and_entity_metric_data(cw: CloudWatchMetrics) -> None:
    err = refused(cw, *[{"MetricName": "m", "Value": 1.0}] * 1001)
    assert err.code == "InvalidParameterValueException" and "1000" in err.message
    with pytest.raises(ApiError) as missing:
        call(cw.put_metric_data({"Namespace": "servekit"}))
    assert missing.value.code == "MissingRequiredParameterException"
    call(
        cw.put_metric_data(
            {
                "Namespace": "servekit",
                "EntityMetricData": [
                    {
                        "Entity": {"KeyAttributes": {"Type": "Service"}},
                        "MetricData": [{"MetricName": "E", "Dimensions": DIMS, "Value": 4.0}],
                    }
                ],
            }
        )
    )
    [point] = stats(cw, "E")
    assert point["Sum"] == 4.0
