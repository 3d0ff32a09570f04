"""CloudWatch's metric operations over the endpoint metrics store: GetMetricStatistics, GetMetricData,
ListMetrics and PutMetricData (registered as ``services={"cloudwatch": ...}`` on
:class:`~servekit.edge.plane.ControlPlane`).

What differs from CloudWatch, on purpose:

- one resolution per store (one minute unless ``servekit up --metrics-resolution-s`` says otherwise): ``Period``
  must be a positive multiple of it (with 10, CloudWatch's high-resolution periods 10/20/30 work; with 60 they
  are refused); published data is kept at that resolution whatever its ``StorageResolution`` (1 or 60);
- periods are aligned to multiples of ``Period`` since the epoch, from the one holding ``StartTime``;
- statistics are ``SampleCount``, ``Average``, ``Sum``, ``Minimum``, ``Maximum`` and percentiles ``p0``-``p100``
  (within 1% relative, see :mod:`servekit.services.cloudwatch.store`); trimmed means and the like are refused.
  Percentiles of published statistic sets are estimates (their samples count at the set's average);
- GetMetricData answers ``MetricStat`` queries only: metric math (``Expression``) is refused with
  ``InvalidParameterValue``; every result is ``Complete`` (no paging);
- ListMetrics returns every match in one page and ignores ``RecentlyActive``; published metrics appear at once;
- a published metric's unit is its first datapoint's (kept in memory); ``EntityMetricData`` is stored like
  ``MetricData`` and its ``Entity`` dropped.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from servekit.aws.errors import ApiError
from servekit.aws.front import Handler
from servekit.services.cloudwatch.store import MetricsStore, StatisticError, percentile_of, statistic

MAX_DATAPOINTS = 1440  # GetMetricStatistics' limit per call
# PutMetricData's limits (botocore's cloudwatch model and the API reference)
MAX_PUT_METRICS = 1000  # MetricData items, EntityMetricData's metrics included
MAX_ENTITY_METRIC_DATA = 2
MAX_VALUES = 150  # Values (and Counts) per datum
MAX_DIMENSIONS = 30
VALUE_LIMIT = 2.0**360  # values must lie in [-2^360, 2^360] and be finite
PAST_S = 14 * 86_400  # timestamps up to two weeks old
FUTURE_S = 2 * 3600  # and up to two hours ahead
STORAGE_RESOLUTIONS = (1, 60)
RESERVED_PREFIX = "AWS/"
_QUERY_ID = re.compile(r"^[a-z][a-zA-Z0-9_]*$")


def _invalid(message: str) -> ApiError:
    return ApiError("InvalidParameterValueException", message, None)


def _combination(message: str) -> ApiError:
    return ApiError("InvalidParameterCombinationException", message, None)


def _epoch(value: Any, name: str) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, (int, float)):
        return float(value)
    raise ApiError("MissingRequiredParameterException", f"The parameter {name} is required.", None)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _dimensions(items: Sequence[Mapping[str, Any]] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(d["Name"]), str(d.get("Value", ""))) for d in items or ()))


def _window(p: Mapping[str, Any]) -> tuple[float, float]:
    start, end = _epoch(p.get("StartTime"), "StartTime"), _epoch(p.get("EndTime"), "EndTime")
    if start >= end:
        raise _invalid("The parameter StartTime must be less than the parameter EndTime.")
    return start, end


def _check_statistic(name: str) -> None:
    try:
        percentile_of(name)
    except StatisticError as exc:
        raise _invalid(str(exc)) from None


class CloudWatchMetrics:
    def __init__(self, store: MetricsStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def handlers(self) -> dict[str, Handler]:
        return {
            "GetMetricStatistics": self.get_metric_statistics,
            "GetMetricData": self.get_metric_data,
            "ListMetrics": self.list_metrics,
            "PutMetricData": self.put_metric_data,
        }

    def _period(self, value: Any, where: str = "Period") -> int:
        if not isinstance(value, int) or not self.store.valid_period(value):
            r = self.store.resolution_s
            if r == 60:
                why = "servekit keeps one-minute datapoints (high-resolution periods are not available)"
            else:
                why = f"servekit keeps {r}-second datapoints"
            raise _invalid(f"The parameter {where} must be a positive multiple of {r}: {why}, not {value!r}.")
        return value

    async def get_metric_statistics(self, p: dict[str, Any]) -> dict[str, Any]:
        namespace, metric = str(p["Namespace"]), str(p["MetricName"])
        start, end = _window(p)
        period = self._period(p.get("Period"))
        basic: list[str] = list(p.get("Statistics") or [])
        extended: list[str] = list(p.get("ExtendedStatistics") or [])
        if bool(basic) == bool(extended):
            raise _combination("Must specify either Statistics or ExtendedStatistics, but not both.")
        for name in extended:
            if percentile_of_or_none(name) is None:
                raise _invalid(f"The parameter ExtendedStatistics holds {name!r}, which is not a percentile (pNN).")
        if (end - start) / period > MAX_DATAPOINTS:
            raise _combination(
                f"You have requested up to {int((end - start) // period)} datapoints, which exceeds the limit of "
                f"{MAX_DATAPOINTS}. You may reduce the datapoints requested by increasing Period, or decreasing "
                "the time range."
            )
        unit = self.store.unit(metric, namespace)
        points: list[dict[str, Any]] = []
        if p.get("Unit") in (None, unit):
            rows = self.store.periods(namespace, metric, _dimensions(p.get("Dimensions")), period, start, end)
            for t, row in rows:
                point: dict[str, Any] = {"Timestamp": _dt(t), "Unit": unit}
                for name in basic:
                    point[name] = statistic(row, name)
                if extended:
                    point["ExtendedStatistics"] = {name: statistic(row, name) for name in extended}
                points.append(point)
        return {"Label": metric, "Datapoints": points}

    async def get_metric_data(self, p: dict[str, Any]) -> dict[str, Any]:
        start, end = _window(p)
        if p.get("NextToken"):
            raise ApiError("InvalidNextToken", "servekit answers GetMetricData in one page: no NextToken to use.", None)
        descending = p.get("ScanBy", "TimestampDescending") != "TimestampAscending"
        queries: list[dict[str, Any]] = list(p.get("MetricDataQueries") or [])
        ids: set[str] = set()
        for q in queries:
            qid = str(q.get("Id", ""))
            if not _QUERY_ID.match(qid):
                raise _invalid(f"The Id {qid!r} must start with a lowercase letter and hold letters, digits and _.")
            if qid in ids:
                raise _invalid(f"The Id {qid!r} is used by more than one query.")
            ids.add(qid)
            if q.get("Expression") is not None:
                raise _invalid(
                    f"Query {qid}: servekit does not evaluate metric math (Expression); use MetricStat queries."
                )
            if q.get("MetricStat") is None:
                raise _combination(f"Query {qid}: exactly one of MetricStat and Expression must be set.")
            self._period(q["MetricStat"].get("Period"), f"MetricStat.Period of {qid}")
            _check_statistic(str(q["MetricStat"].get("Stat", "")))
        results: list[dict[str, Any]] = []
        for q in queries:
            if q.get("ReturnData") is False:
                continue
            stat = q["MetricStat"]
            m = stat["Metric"]
            namespace, metric = str(m.get("Namespace", "")), str(m.get("MetricName", ""))
            rows: list[tuple[int, Any]] = []
            if stat.get("Unit") in (None, self.store.unit(metric, namespace)):
                rows = self.store.periods(
                    namespace, metric, _dimensions(m.get("Dimensions")), int(stat["Period"]), start, end
                )
            if descending:
                rows.reverse()
            results.append(
                {
                    "Id": q["Id"],
                    "Label": q.get("Label") or metric,
                    "Timestamps": [_dt(t) for t, _ in rows],
                    "Values": [statistic(row, str(stat["Stat"])) for _, row in rows],
                    "StatusCode": "Complete",
                }
            )
        return {"MetricDataResults": results, "Messages": []}

    async def list_metrics(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("NextToken"):
            raise ApiError("InvalidNextToken", "servekit answers ListMetrics in one page: no NextToken to use.", None)
        filters = [(str(d["Name"]), d.get("Value")) for d in p.get("Dimensions") or ()]
        metrics: list[dict[str, Any]] = []
        for namespace, metric, dims in self.store.series(p.get("Namespace"), p.get("MetricName")):
            have = dict(dims)
            if all(name in have and (value is None or have[name] == value) for name, value in filters):
                metrics.append(
                    {
                        "Namespace": namespace,
                        "MetricName": metric,
                        "Dimensions": [{"Name": n, "Value": v} for n, v in dims],
                    }
                )
        return {"Metrics": metrics}

    async def put_metric_data(self, p: dict[str, Any]) -> dict[str, Any]:
        """Validate every datum first (CloudWatch stores all of a request or none), then record them."""
        namespace = str(p.get("Namespace") or "")
        if not namespace:
            raise ApiError("MissingRequiredParameterException", "The parameter Namespace is required.", None)
        if namespace.startswith(RESERVED_PREFIX):
            raise _invalid("The value AWS/ for parameter Namespace is invalid.")
        data: list[tuple[str, Mapping[str, Any]]] = [
            (f"MetricData.member.{i}", d) for i, d in enumerate(p.get("MetricData") or (), 1)
        ]
        entities = list(p.get("EntityMetricData") or ())
        if len(entities) > MAX_ENTITY_METRIC_DATA:
            raise _invalid(
                f"The collection EntityMetricData must not contain more than {MAX_ENTITY_METRIC_DATA} items."
            )
        for e, entity in enumerate(entities, 1):
            data += [
                (f"EntityMetricData.member.{e}.MetricData.member.{i}", d)
                for i, d in enumerate(entity.get("MetricData") or (), 1)
            ]
        if not data:
            raise ApiError("MissingRequiredParameterException", "The parameter MetricData is required.", None)
        if len(data) > MAX_PUT_METRICS:
            raise _invalid(f"The collection MetricData must not contain more than {MAX_PUT_METRICS} items.")
        now = self.clock()
        checked = [_datum(where, d, now) for where, d in data]
        for datum in checked:
            self.store.put(
                namespace,
                datum.metric,
                datum.dimensions,
                datum.at,
                values=datum.values,
                statistics=datum.statistics,
                unit=datum.unit,
            )
        return {}


def percentile_of_or_none(name: str) -> float | None:
    try:
        return percentile_of(name)
    except StatisticError:
        return None


@dataclass(frozen=True, slots=True)
class _Datum:
    metric: str
    dimensions: tuple[tuple[str, str], ...]
    at: float
    values: tuple[tuple[float, float], ...]
    statistics: tuple[float, float, float, float] | None
    unit: str | None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _invalid(f"The value {value!r} for parameter {where} is invalid.")
    v = float(value)
    if not math.isfinite(v) or abs(v) > VALUE_LIMIT:
        raise _invalid(
            f"The value {value!r} for parameter {where} is invalid: values must be finite and within -2^360..2^360."
        )
    return v


def _datum(where: str, d: Mapping[str, Any], now: float) -> _Datum:
    """One MetricDatum checked as CloudWatch checks it (``where`` names it in messages, 1-based)."""
    metric = str(d.get("MetricName") or "")
    if not metric:
        raise ApiError("MissingRequiredParameterException", f"The parameter {where}.MetricName is required.", None)
    dims = list(d.get("Dimensions") or ())
    if len(dims) > MAX_DIMENSIONS:
        raise _invalid(f"The collection {where}.Dimensions must not contain more than {MAX_DIMENSIONS} items.")
    dimensions = _dimensions(dims)
    if len({n for n, _ in dimensions}) != len(dimensions):
        raise _invalid(f"The parameter {where}.Dimensions has a dimension name more than once.")
    given = [k for k in ("Value", "StatisticValues", "Values") if d.get(k) is not None]
    if len(given) > 1:
        raise _combination(
            f"The parameters {where}.{given[0]} and {where}.{given[1]} are mutually exclusive and you have specified "
            "both."
        )
    if not given:
        raise ApiError(
            "MissingRequiredParameterException",
            f"The parameter {where}.Value, {where}.StatisticValues or {where}.Values is required.",
            None,
        )
    if d.get("Counts") is not None and given != ["Values"]:
        raise _combination(f"The parameter {where}.Counts needs {where}.Values.")
    values: tuple[tuple[float, float], ...] = ()
    statistics: tuple[float, float, float, float] | None = None
    if given == ["Value"]:
        values = ((_number(d["Value"], f"{where}.Value"), 1.0),)
    elif given == ["Values"]:
        raw = list(d["Values"])
        counts = list(d["Counts"]) if d.get("Counts") is not None else [1.0] * len(raw)
        if len(raw) > MAX_VALUES:
            raise _invalid(f"The collection {where}.Values must not contain more than {MAX_VALUES} items.")
        if len(counts) != len(raw):
            raise _combination(f"The parameters {where}.Values and {where}.Counts must be of the same size.")
        nums = [_number(v, f"{where}.Values.member.{i}") for i, v in enumerate(raw, 1)]
        weights = [_number(c, f"{where}.Counts.member.{i}") for i, c in enumerate(counts, 1)]
        if any(c < 0 for c in weights):
            raise _invalid(f"The parameter {where}.Counts must not hold negative numbers.")
        values = tuple(zip(nums, weights, strict=True))
    else:
        s = d["StatisticValues"]
        n = _number(s.get("SampleCount"), f"{where}.StatisticValues.SampleCount")
        total = _number(s.get("Sum"), f"{where}.StatisticValues.Sum")
        low = _number(s.get("Minimum"), f"{where}.StatisticValues.Minimum")
        high = _number(s.get("Maximum"), f"{where}.StatisticValues.Maximum")
        if n <= 0:
            raise _invalid(f"The parameter {where}.StatisticValues.SampleCount must be greater than 0.")
        if low > high:
            raise _invalid(f"The parameter {where}.StatisticValues.Minimum must not be greater than Maximum.")
        statistics = (n, total, low, high)
    at = now if d.get("Timestamp") is None else _epoch(d["Timestamp"], f"{where}.Timestamp")
    if not now - PAST_S <= at <= now + FUTURE_S:
        raise _invalid(
            f"The parameter {where}.Timestamp must specify a time no more than two weeks in the past and no more than "
            "two hours in the future."
        )
    resolution = d.get("StorageResolution")
    if resolution is not None and resolution not in STORAGE_RESOLUTIONS:
        raise _invalid(f"The value {resolution!r} for parameter {where}.StorageResolution is invalid: 1 or 60.")
    unit = d.get("Unit")
    return _Datum(metric, dimensions, at, values, statistics, str(unit) if unit is not None else None)
