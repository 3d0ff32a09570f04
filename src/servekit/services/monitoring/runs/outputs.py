"""Files a run leaves in its output folder.

``metrics.json`` (the stable, documented shape), ``run.json`` (what was read, which baseline, errors),
``windows/<end>/constraint_violations.json`` (SageMaker's shape, one per window), ``metrics.prom`` (Prometheus
text for node_exporter's textfile collector) and ``report.html``. Every file is written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from servekit.services.monitoring.baseline.store import dump, write_atomic
from servekit.services.monitoring.drift.metrics import finite_or_none
from servekit.services.monitoring.runs.run import RunResult
from servekit.services.monitoring.stream.windows import format_time


def metrics_json(result: RunResult) -> dict[str, Any]:
    windows = []
    for r in result.windows:
        features = {
            name: {
                "type": f.kind.value,
                "metrics": {m: finite_or_none(v) for m, v in f.metrics.items()},
                "thresholds": {m: finite_or_none(v) for m, v in f.thresholds.items()},
                "drifted": f.drifted,
                "rule": f.rule,
                "test": None
                if f.test is None
                else {k: finite_or_none(v) if k != "metric" else v for k, v in f.test.to_json().items()},
                "data_quality": [
                    {"metric": m, "value": finite_or_none(v), "threshold": finite_or_none(t)} for m, v, t in f.quality
                ],
                "approx": f.approx,
            }
            for name, f in r.features.items()
        }
        windows.append(
            {
                "index": r.window.index,
                "start": format_time(r.window.start),
                "end": format_time(r.window.end),
                "rows": r.rows,
                "status": r.status,
                "features": features,
            }
        )
    return {"windows": windows, "alarms": [a.to_json() for a in result.alarms], "warnings": result.warnings}


def run_json(result: RunResult, info: dict[str, Any]) -> dict[str, Any]:
    s = result.stats
    return {
        **info,
        "since": None if result.since is None else format_time(result.since),
        "until": None if result.until is None else format_time(result.until),
        "files": s.files,
        "rows_read": s.rows,
        "rows_without_timestamp": s.rows_without_timestamp,
        "late_rows": s.late_rows,
        "undecodable_records": s.undecodable_records,
        "read_errors": s.errors,
        "feature_errors": [
            {"window_index": r.window.index, "feature": name, "error": message}
            for r in result.windows
            for name, message in r.errors.items()
        ],
        "windows": len(result.windows),
        "alarms": len(result.alarms),
        "missing_columns": list(result.missing_columns),
        "extra_columns": list(result.extra_columns),
        "warnings": result.warnings,
    }


def window_folder(end: float) -> str:
    return format_time(end).replace(":", "-")


def prometheus_text(result: RunResult) -> bytes:
    registry = CollectorRegistry()
    value = Gauge(
        "servekit_monitor_feature_metric",
        "Drift metric in the latest judged window.",
        ["feature", "metric"],
        registry=registry,
    )
    limit = Gauge(
        "servekit_monitor_feature_threshold",
        "Threshold in the latest judged window.",
        ["feature", "metric"],
        registry=registry,
    )
    drifted = Gauge(
        "servekit_monitor_feature_drifted",
        "1 if the feature drifted in the latest judged window.",
        ["feature"],
        registry=registry,
    )
    rows = Gauge("servekit_monitor_window_rows", "Rows in the latest window.", registry=registry)
    windows = Gauge("servekit_monitor_windows", "Windows in this run.", ["status"], registry=registry)
    alarms = Gauge("servekit_monitor_alarms", "Alarms raised in this run.", registry=registry)
    violations = Gauge(
        "servekit_monitor_violations",
        "Constraint violations in the latest window.",
        ["constraint_check_type"],
        registry=registry,
    )
    end = Gauge("servekit_monitor_last_window_end_timestamp_seconds", "End of the latest window.", registry=registry)
    for status in ("ok", "insufficient"):
        windows.labels(status).set(sum(1 for r in result.windows if r.status == status))
    alarms.set(len(result.alarms))
    if result.windows:
        latest = result.windows[-1]
        rows.set(latest.rows)
        end.set(latest.window.end)
        for found in latest.violations:
            violations.labels(found["constraint_check_type"]).inc()
    judged = [r for r in result.windows if r.status == "ok"]
    if judged:
        for name, f in judged[-1].features.items():
            drifted.labels(name).set(1 if f.drifted else 0)
            for metric, v in f.metrics.items():
                if (number := finite_or_none(v)) is not None:
                    value.labels(name, metric).set(number)
            for metric, t in f.thresholds.items():
                limit.labels(name, metric).set(t)
    return generate_latest(registry)


def write(out: Path, result: RunResult, info: dict[str, Any], report_html: str | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for r in result.windows:
        body = {"violations": r.violations}
        write_atomic(out / "windows" / window_folder(r.window.end) / "constraint_violations.json", dump(body))
    write_atomic(out / "metrics.json", dump(metrics_json(result)))
    write_atomic(out / "run.json", dump(run_json(result, info)))
    write_atomic(out / "metrics.prom", prometheus_text(result))
    if report_html is not None:
        write_atomic(out / "report.html", report_html.encode())
