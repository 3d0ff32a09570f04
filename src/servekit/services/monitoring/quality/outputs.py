"""Files a model-quality run leaves in its output folder (names and shapes are stable: the control plane's
monitoring schedules run ``servekit monitor quality run`` and read them).

- ``quality_metrics.json``: every window's metrics (see docs/monitoring.md, "Model quality");
- ``constraint_violations.json``: SageMaker's shape, ``{"violations": [{"metric_name", "constraint_check_type",
  "description"}]}``, for the latest judged window (what an hourly SageMaker execution reports);
- ``windows/<end>/constraint_violations.json``: the same for every window;
- ``report.html``: self-contained, the metrics over time against their thresholds and the latest confusion matrix.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from servekit.services.monitoring.alerts.alarms import Alarm
from servekit.services.monitoring.baseline.store import dump, write_atomic
from servekit.services.monitoring.drift.metrics import finite_or_none
from servekit.services.monitoring.quality.run import QualityResult, QualityWindow
from servekit.services.monitoring.runs.outputs import window_folder
from servekit.services.monitoring.runs.report import _CSS
from servekit.services.monitoring.stream.windows import format_time


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def window_json(w: QualityWindow) -> dict[str, Any]:
    thresholds = {m: {"threshold": c.threshold, "comparison_operator": c.operator} for m, (_, c) in w.judged.items()}
    return {
        "index": w.window.index,
        "start": format_time(w.window.start),
        "end": format_time(w.window.end),
        "predictions": w.predictions,
        "labelled": w.labelled,
        "status": w.status,
        **_clean(w.result),
        "thresholds": thresholds,
        "violations": w.violations,
    }


def metrics_json(result: QualityResult, info: dict[str, Any]) -> dict[str, Any]:
    return {
        "problem_type": result.problem_type,
        **info,
        "labels_in_store": result.labels,
        "unlabelled_predictions": result.unlabelled,
        "rows_read": result.stats.rows,
        "late_rows": result.stats.late_rows,
        "undecodable_records": result.stats.undecodable_records,
        "windows": [window_json(w) for w in result.windows],
        "alarms": [{**a.to_json(), "comparison_operator": _operator(result, a.metric)} for a in result.alarms],
        "warnings": result.warnings,
    }


def _operator(result: QualityResult, metric: str) -> str | None:
    for w in result.windows:
        if metric in w.judged:
            return w.judged[metric][1].operator
    return None


def describe(result: QualityResult, alarm: Alarm) -> str:
    """``metric value <operator> threshold``, as SageMaker words a model-quality violation."""
    return f"{alarm.metric} {alarm.value:.4g} was {_operator(result, alarm.metric)} {alarm.threshold:.4g}"


def latest_judged(result: QualityResult) -> QualityWindow | None:
    judged = [w for w in result.windows if w.status == "ok"]
    return judged[-1] if judged else None


def write(out: Path, result: QualityResult, info: dict[str, Any], report: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for w in result.windows:
        folder = out / "windows" / window_folder(w.window.end)
        write_atomic(folder / "constraint_violations.json", dump({"violations": w.violations}))
    latest = latest_judged(result)
    write_atomic(out / "constraint_violations.json", dump({"violations": latest.violations if latest else []}))
    write_atomic(out / "quality_metrics.json", dump(metrics_json(result, info)))
    if report:
        write_atomic(out / "report.html", render(result, info).encode())


def render(result: QualityResult, info: dict[str, Any]) -> str:
    latest = latest_judged(result)
    ok = sum(1 for w in result.windows if w.status == "ok")
    head = [
        ("capture", info.get("capture", "")),
        ("labels", f"{info.get('labels', '')} ({result.labels} labels)"),
        ("constraints", info.get("baseline", "")),
        ("problem type", result.problem_type),
        ("windows", f"{len(result.windows)} ({ok} judged, {len(result.windows) - ok} with too few labelled rows)"),
        ("alarms", str(len(result.alarms))),
    ]
    meta = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in head)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>servekit model quality report</title>",
        f"<style>{_CSS}</style></head><body><h1>Model quality report</h1>",
        f"<table class='meta'>{meta}</table>",
    ]
    for a in result.alarms:
        text = f"{describe(result, a)} at window {a.window_index}"
        parts.append(f"<p><span class='badge alarm'>alarm</span> {html.escape(text)}</p>")
    violated = {v["metric_name"] for w in result.windows for v in w.violations}
    metrics = sorted({m for w in result.windows for m in w.judged}, key=lambda x: (x not in violated, x))
    for m in metrics:
        cls = "feature drifted" if m in violated else "feature"
        parts.append(f"<section class='{cls}' data-metric='{html.escape(m)}'><h2>{html.escape(m)}</h2>")
        parts.append(_series(result, m))
        parts.append("</section>")
    if latest is not None and "confusion_matrix" in latest.result:
        parts.append(_confusion(latest))
    parts.append("</body></html>")
    return "\n".join(parts)


def _series(result: QualityResult, metric: str) -> str:
    width, height, left, bottom, top = 560, 200, 46, 30, 24
    points = [
        (w.window.index, w.judged[metric][0], w.judged[metric][1].threshold, w)
        for w in result.windows
        if metric in w.judged
    ]
    if not points:
        return ""
    values = [v for _, v, _, _ in points] + [t for _, _, t, _ in points]
    lo_v, hi_v = min(values), max(values)
    if hi_v == lo_v:
        lo_v, hi_v = lo_v - 0.5, hi_v + 0.5
    indexes = [i for i, *_ in points]
    lo, hi = min(indexes), max(max(indexes), min(indexes) + 1)
    plot_w, plot_h = width - left - 10, height - bottom - top

    def x(i: int) -> float:
        return left + plot_w * (i - lo) / (hi - lo)

    def y(v: float) -> float:
        return top + plot_h - plot_h * (v - lo_v) / (hi_v - lo_v)

    line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v, _, _ in points)
    limit = " ".join(f"{x(i):.1f},{y(t):.1f}" for i, _, t, _ in points)
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' class='series'>",
        f"<text x='{left}' y='14'>{html.escape(metric)} per window (dashed: threshold)</text>",
        f"<text x='2' y='{top + 8}'>{hi_v:.3g}</text><text x='2' y='{top + plot_h}'>{lo_v:.3g}</text>",
        f"<polyline points='{line}' fill='none' stroke='#3b5b9a'/>",
        f"<polyline points='{limit}' fill='none' stroke='#b52b27' stroke-dasharray='4 3'/>",
    ]
    for i, v, _, w in points:
        bad = any(d["metric_name"] == metric for d in w.violations)
        color = "#d9534f" if bad else "#9ca3af" if w.status != "ok" else "#3b5b9a"
        out.append(
            f"<circle cx='{x(i):.1f}' cy='{y(v):.1f}' r='3' fill='{color}'><title>window {i}: {v:.4g}</title></circle>"
        )
    out.append("</svg>")
    return "".join(out)


def _confusion(w: QualityWindow) -> str:
    cm = w.result["confusion_matrix"]
    labels = [html.escape(str(v)) for v in cm["labels"]]
    head = "<tr><th>actual \\ predicted</th>" + "".join(f"<th>{v}</th>" for v in labels) + "</tr>"
    rows = "".join(
        f"<tr><th>{a}</th>" + "".join(f"<td>{n}</td>" for n in row) + "</tr>"
        for a, row in zip(labels, cm["matrix"], strict=True)
    )
    title = f"Confusion matrix, window {w.window.index} ({format_time(w.window.start)} - {format_time(w.window.end)})"
    return f"<h2>{html.escape(title)}</h2><table class='confusion'>{head}{rows}</table>"
