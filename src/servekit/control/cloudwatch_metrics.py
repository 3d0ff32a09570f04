"""CloudWatch's metric read operations over the endpoint metrics store: GetMetricStatistics, GetMetricData and
ListMetrics (registered as ``services={"cloudwatch": ...}`` on :class:`~servekit.control.server.ControlPlane`).

What differs from CloudWatch, on purpose:

- one-minute resolution only: ``Period`` must be a multiple of 60 (high-resolution 1/5/10/30 s is refused);
- periods are aligned to multiples of ``Period`` since the epoch, from the one holding ``StartTime``;
- statistics are ``SampleCount``, ``Average``, ``Sum``, ``Minimum``, ``Maximum`` and percentiles ``p0``-``p100``
  (within 1% relative, see :mod:`servekit.control.metrics`); trimmed means and the like are refused;
- GetMetricData answers ``MetricStat`` queries only: metric math (``Expression``) is refused with
  ``InvalidParameterValue``; every result is ``Complete`` (no paging);
- ListMetrics returns every match in one page and ignores ``RecentlyActive``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from servekit.control.api.errors import ApiError
from servekit.control.metrics import MINUTE, MetricsStore, StatisticError, percentile_of, statistic

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
MAX_DATAPOINTS = 1440  # GetMetricStatistics' limit per call
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


def _period(value: Any, where: str = "Period") -> int:
    if not isinstance(value, int) or value <= 0 or value % MINUTE:
        raise _invalid(
            f"The parameter {where} must be a positive multiple of 60: servekit keeps one-minute datapoints "
            f"(high-resolution periods are not available), not {value!r}."
        )
    return value


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
        }

    async def get_metric_statistics(self, p: dict[str, Any]) -> dict[str, Any]:
        namespace, metric = str(p["Namespace"]), str(p["MetricName"])
        start, end = _window(p)
        period = _period(p.get("Period"))
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
        unit = self.store.unit(metric)
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
            _period(q["MetricStat"].get("Period"), f"MetricStat.Period of {qid}")
            _check_statistic(str(q["MetricStat"].get("Stat", "")))
        results: list[dict[str, Any]] = []
        for q in queries:
            if q.get("ReturnData") is False:
                continue
            stat = q["MetricStat"]
            m = stat["Metric"]
            namespace, metric = str(m.get("Namespace", "")), str(m.get("MetricName", ""))
            rows: list[tuple[int, Any]] = []
            if stat.get("Unit") in (None, self.store.unit(metric)):
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


def percentile_of_or_none(name: str) -> float | None:
    try:
        return percentile_of(name)
    except StatisticError:
        return None
