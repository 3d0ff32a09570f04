"""The console's charts as pure functions of metric answers: GetMetricData's queries for an endpoint's traffic,
latency and instance counts, its answers reshaped into aligned uPlot columns, the model-quality chart of monitoring
runs, a training job's metrics and a tuning job's objectives, and the periods the range picker's choices use."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NAMESPACE = "AWS/SageMaker"
MAX_POINTS = 360  # per series: enough for a smooth line, few enough for a JSON answer of kilobytes
RANGES_S = (300, 900, 3600, 3 * 3600, 24 * 3600)  # the range picker's choices


@dataclass(frozen=True)
class Chart:
    """One uPlot chart: a title, the unit of its y axis, series labels and ``[xs, ys...]`` aligned columns."""

    key: str
    title: str
    unit: str
    labels: tuple[str, ...]
    data: tuple[tuple[float | None, ...], ...]

    marks: tuple[dict[str, Any], ...] = ()  # events drawn as vertical lines: {"t", "label", "status"}

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "title": self.title, "unit": self.unit, "labels": self.labels}
        out["data"] = self.data
        if self.marks:
            out["marks"] = self.marks
        return out


# chart key -> (title, unit, [(query prefix, metric, stat, series label suffix, scale)])
# scale: Sums become per-second rates (divided by the period, set at query time); latencies go from µs to ms.
CHARTS: tuple[tuple[str, str, str, tuple[tuple[str, str, str, str], ...]], ...] = (
    ("invocations", "Invocations per second", "req/s", (("inv", "Invocations", "Sum", ""),)),
    (
        "model_latency",
        "Model latency",
        "ms",
        (
            ("ml50", "ModelLatency", "p50", " p50"),
            ("ml90", "ModelLatency", "p90", " p90"),
            ("ml99", "ModelLatency", "p99", " p99"),
        ),
    ),
    (
        "overhead_latency",
        "Overhead latency",
        "ms",
        (
            ("ol50", "OverheadLatency", "p50", " p50"),
            ("ol90", "OverheadLatency", "p90", " p90"),
            ("ol99", "OverheadLatency", "p99", " p99"),
        ),
    ),
    (
        "errors",
        "Errors per second",
        "err/s",
        (("e4", "Invocation4XXErrors", "Sum", " 4XX"), ("e5", "Invocation5XXErrors", "Sum", " 5XX")),
    ),
)


def period_for(range_s: int, resolution_s: int) -> int:
    """The smallest period, a multiple of the metrics store's resolution, that keeps a range under MAX_POINTS."""
    steps = max(1, math.ceil(range_s / MAX_POINTS / resolution_s))
    return steps * resolution_s


def metric_queries(endpoint: str, variants: Sequence[str], period: int) -> list[dict[str, Any]]:
    """GetMetricData's MetricDataQueries for every chart series of every variant (ids ``<prefix>_<index>``)."""
    out: list[dict[str, Any]] = []
    for i, variant in enumerate(variants):
        dims = [{"Name": "EndpointName", "Value": endpoint}, {"Name": "VariantName", "Value": variant}]
        for _key, _title, _unit, series in CHARTS:
            for prefix, metric, stat, _label in series:
                out.append(
                    {
                        "Id": f"{prefix}_{i}",
                        "MetricStat": {
                            "Metric": {"Namespace": NAMESPACE, "MetricName": metric, "Dimensions": dims},
                            "Period": period,
                            "Stat": stat,
                        },
                    }
                )
    return out


def build_charts(
    results: Sequence[dict[str, Any]], variants: Sequence[str], start: float, end: float, period: int
) -> list[Chart]:
    """GetMetricData's results as aligned chart columns over every period of [start, end): counts as rates
    (a period with no datapoint is 0 requests), latencies in ms (a period with none has no point, not 0)."""
    by_id = {r["Id"]: dict(zip(r.get("Timestamps", []), r.get("Values", []), strict=False)) for r in results}
    first = int(start // period) * period
    xs = tuple(float(t) for t in range(first, int(end), period))
    charts: list[Chart] = []
    for key, title, unit, series in CHARTS:
        labels: list[str] = []
        columns: list[tuple[float | None, ...]] = [xs]
        for i, variant in enumerate(variants):
            for prefix, _metric, stat, suffix in series:
                points = {int(t): v for t, v in by_id.get(f"{prefix}_{i}", {}).items()}
                labels.append(f"{variant}{suffix}")
                if stat == "Sum":
                    columns.append(tuple(round(points.get(int(x), 0.0) / period, 6) for x in xs))
                else:
                    columns.append(tuple(_ms(points.get(int(x))) for x in xs))
        charts.append(Chart(key, title, unit, tuple(labels), tuple(columns)))
    return charts


def _ms(us: float | None) -> float | None:
    return None if us is None else round(us / 1000.0, 4)


COUNTS_NAMESPACE = "servekit/Endpoints"  # the control plane's per-variant instance counts (one sample per period)


def instance_queries(endpoint: str, variants: Sequence[str], period: int) -> list[dict[str, Any]]:
    """GetMetricData queries of each variant's desired and current instance counts (ids ``idc_<i>``/``icc_<i>``)."""
    out: list[dict[str, Any]] = []
    for i, variant in enumerate(variants):
        dims = [{"Name": "EndpointName", "Value": endpoint}, {"Name": "VariantName", "Value": variant}]
        for prefix, metric in (("idc", "DesiredInstanceCount"), ("icc", "CurrentInstanceCount")):
            out.append(
                {
                    "Id": f"{prefix}_{i}",
                    "MetricStat": {
                        "Metric": {"Namespace": COUNTS_NAMESPACE, "MetricName": metric, "Dimensions": dims},
                        "Period": period,
                        "Stat": "Maximum",
                    },
                }
            )
    return out


def instance_charts(
    results: Sequence[dict[str, Any]],
    variants: Sequence[str],
    activities: Sequence[dict[str, Any]],
    endpoint: str,
    start: float,
    end: float,
    period: int,
) -> list[Chart]:
    """Per variant, desired and current instances over [start, end) (a period without a sample has no point: the
    plane was not running), with the variant's scaling activities in the range as marks at their start."""
    by_id = {r["Id"]: dict(zip(r.get("Timestamps", []), r.get("Values", []), strict=False)) for r in results}
    first = int(start // period) * period
    xs = tuple(float(t) for t in range(first, int(end), period))
    charts = []
    for i, variant in enumerate(variants):
        columns: list[tuple[float | None, ...]] = [xs]
        for prefix in ("idc", "icc"):
            points = {int(t): v for t, v in by_id.get(f"{prefix}_{i}", {}).items()}
            columns.append(tuple(points.get(int(x)) for x in xs))
        resource = f"endpoint/{endpoint}/variant/{variant}"
        marks = tuple(
            {"t": float(a["StartTime"]), "label": str(a.get("Description", "")), "status": str(a.get("StatusCode", ""))}
            for a in sorted(activities, key=lambda a: a.get("StartTime", 0))
            if a.get("ResourceId") == resource
            and isinstance(a.get("StartTime"), (int, float))
            and first <= a["StartTime"] < end
        )
        charts.append(
            Chart(
                f"instances-{variant}",
                f"Instances of {variant}: desired vs current",
                "instances",
                ("desired", "current"),
                tuple(columns),
                marks,
            )
        )
    return charts


# the two metrics charted per problem type (``quality_metrics.json``'s names): a score and its class-balanced
# counterpart for classification, the two usual errors for regression
QUALITY_METRICS: dict[str, tuple[str, str]] = {
    "BinaryClassification": ("accuracy", "f1"),
    "MulticlassClassification": ("accuracy", "f1_macro"),
    "Regression": ("mae", "rmse"),
}


def quality_chart(endpoint: str, problem: str, runs: Sequence[dict[str, Any]]) -> Chart:
    """One point per execution with a judged window (a metric the window has no value for is a gap)."""
    names = QUALITY_METRICS[problem]
    judged = [r for r in runs if r["window"] and r["problem_type"] == problem]
    xs = tuple(float(r["execution"]["ScheduledTime"]) for r in judged)
    columns = []
    for name in names:
        values = [(r["window"].get("metrics") or {}).get(name) for r in judged]
        columns.append(tuple(float(v) if isinstance(v, (int, float)) else None for v in values))
    unit = "error" if problem == "Regression" else "score"
    return Chart(f"quality-{endpoint}", f"Model quality: {endpoint}", unit, names, (xs, *columns))


MAX_METRIC_CHARTS = 12  # of a training job's metrics (SageMaker allows 40 definitions)


def _metric_value(match: re.Match[str]) -> float | None:
    """A MetricDefinitions regex's value as SageMaker reads it: its first group, else the whole match."""
    try:
        return float(match.group(1) if match.groups() else match.group(0))
    except (TypeError, ValueError):
        return None


def training_metric_charts(
    definitions: Sequence[dict[str, Any]], final: Sequence[dict[str, Any]], lines: Sequence[tuple[float, str]]
) -> list[Chart]:
    """One chart per metric of a training job: its ``MetricDefinitions`` first, then any other metric of its
    ``FinalMetricDataList`` (a built-in algorithm's). The points are the metric's values in the log ``lines``
    given (epoch seconds, text; each line matched on its own, as SageMaker reads a job's log into metrics), and
    where no line matched (no log read yet, or the values came from elsewhere) the final value at its time. A
    metric with neither has no chart."""
    finals = {str(m.get("MetricName")): m for m in final if isinstance(m.get("Value"), (int, float))}
    names = [str(d.get("Name")) for d in definitions if d.get("Name")]
    names += [n for n in finals if n not in names]
    regexes: dict[str, re.Pattern[str]] = {}
    for d in definitions:
        try:
            regexes.setdefault(str(d.get("Name")), re.compile(str(d.get("Regex", ""))))
        except re.error:
            continue  # a regex Python cannot compile matches nothing, as it yields no final value either
    out = []
    for name in names[:MAX_METRIC_CHARTS]:
        points: list[tuple[float, float]] = []
        regex = regexes.get(name)
        if regex is not None:
            for at, text in lines:
                points += [(at, v) for v in map(_metric_value, regex.finditer(text)) if v is not None]
        if not points and name in finals and isinstance(finals[name].get("Timestamp"), (int, float)):
            points = [(float(finals[name]["Timestamp"]), float(finals[name]["Value"]))]
        if points:
            points.sort(key=lambda p: p[0])  # stable: a line's matches keep their order
            columns = (tuple(t for t, _ in points), tuple(v for _, v in points))
            out.append(Chart(f"metric:{name}", name, "value", (name,), columns))
    return out


def objective_chart(summaries: Sequence[dict[str, Any]], best: str | None) -> Chart | None:
    """A tuning job's objective per training job with one (x: its end time), the best job marked; ``None`` while no
    training job has an objective value."""
    scored = []
    metric = ""
    for s in summaries:
        objective = s.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
        ended = s.get("TrainingEndTime")
        if isinstance(objective.get("Value"), (int, float)) and isinstance(ended, (int, float)):
            scored.append((float(ended), float(objective["Value"]), str(s.get("TrainingJobName", ""))))
            metric = metric or str(objective.get("MetricName", ""))
    if not scored:
        return None
    scored.sort(key=lambda p: p[0])
    marks = tuple({"t": t, "label": f"best: {job}", "status": "best"} for t, _, job in scored if job == best)
    data = (tuple(t for t, _, _ in scored), tuple(v for _, v, _ in scored))
    return Chart("objective", f"Objective {metric} per training job", "objective", (metric,), data, marks)


def charts_json(period: int, charts: Sequence[Chart]) -> dict[str, Any]:
    return {"period": period, "charts": [c.as_json() for c in charts]}
