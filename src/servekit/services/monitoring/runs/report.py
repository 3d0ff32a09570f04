"""A self-contained HTML report: inline CSS and SVG, no scripts, no external files, opens from disk.

Features are ordered by trouble: those with alarms first, then by how many windows drifted, then by how far
the worst value went past its threshold. Each feature shows the baseline against a window (the latest
drifted one, else the latest judged one) and its main metric over time against its threshold.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servekit.services.monitoring.drift.schema import Kind
from servekit.services.monitoring.runs.evaluate import FeatureResult, Histogram, WindowResult
from servekit.services.monitoring.runs.run import RunResult
from servekit.services.monitoring.stream.windows import format_time

PRIMARY = {Kind.NUMERICAL: "ks_statistic", Kind.CATEGORICAL: "js_distance"}
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#1d2433;max-width:1100px}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin:0 0 .4rem}
section.feature{border:1px solid #d8dde6;border-radius:8px;padding:1rem;margin:1rem 0}
section.drifted{border-color:#d9534f}
.badge{display:inline-block;padding:.1rem .5rem;border-radius:1rem;font-size:.8rem;margin-left:.4rem;color:#fff}
.alarm{background:#b52b27}.drift{background:#e08a1e}.ok{background:#3c8d5a}.err{background:#6c757d}
.charts{display:flex;gap:1.5rem;flex-wrap:wrap}
table{border-collapse:collapse;font-size:.85rem}td,th{padding:.2rem .6rem;border-bottom:1px solid #eee;text-align:left}
.muted{color:#6b7280;font-size:.85rem}
svg text{font-size:10px;fill:#374151}
"""


@dataclass(frozen=True, slots=True)
class _FeatureView:
    name: str
    kind: Kind
    alarms: int
    drifted_windows: int
    worst_ratio: float
    errors: list[str]


def render(result: RunResult, info: dict[str, Any]) -> str:
    views = _views(result)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>servekit drift report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Drift report</h1>",
        _header(result, info),
        _summary_table(views),
    ]
    for view in views:
        parts.append(_feature_section(view, result))
    parts.append("</body></html>")
    return "\n".join(parts)


def _views(result: RunResult) -> list[_FeatureView]:
    names: dict[str, Kind] = {}
    for r in result.windows:
        for name, f in r.features.items():
            names.setdefault(name, f.kind)
        for name in r.errors:
            names.setdefault(name, Kind.NUMERICAL)
    views = []
    for name, kind in names.items():
        mine = [(r, r.features[name]) for r in result.windows if name in r.features]
        drifted = sum(1 for _, f in mine if f.drifted)
        ratios = [
            v / t
            for r, f in mine
            if r.status == "ok"
            for m, t in f.thresholds.items()
            if (v := f.metrics.get(m)) is not None and t > 0
        ]
        errors = sorted({r.errors[name] for r in result.windows if name in r.errors})
        alarms = sum(1 for a in result.alarms if a.feature == name)
        views.append(_FeatureView(name, kind, alarms, drifted, max(ratios, default=0.0), errors))
    return sorted(views, key=lambda v: (-v.alarms, -v.drifted_windows, -v.worst_ratio, v.name))


def _header(result: RunResult, info: dict[str, Any]) -> str:
    ok = sum(1 for r in result.windows if r.status == "ok")
    rows = [
        ("data", info.get("data", "")),
        ("baseline", f"{info.get('baseline', '')} ({info.get('baseline_version', '')})"),
        ("range", f"{_t(result.since)} — {_t(result.until)}"),
        ("windows", f"{len(result.windows)} ({ok} judged, {len(result.windows) - ok} with too few rows)"),
        ("alarms", str(len(result.alarms))),
    ]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table class='meta'>{body}</table>"


def _t(x: float | None) -> str:
    return "—" if x is None else format_time(x)


def _summary_table(views: Sequence[_FeatureView]) -> str:
    head = (
        "<tr><th>feature</th><th>type</th><th>alarms</th><th>drifted windows</th><th>worst value / threshold</th></tr>"
    )
    rows = "".join(
        f"<tr><td><a href='#f-{_id(v.name)}'>{html.escape(v.name)}</a></td><td>{v.kind.value}</td>"
        f"<td>{v.alarms}</td><td>{v.drifted_windows}</td><td>{v.worst_ratio:.2f}</td></tr>"
        for v in views
    )
    return f"<h2>Features</h2><table class='summary'>{head}{rows}</table>"


def _id(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name)


def _feature_section(view: _FeatureView, result: RunResult) -> str:
    badges = ""
    if view.alarms:
        badges += f"<span class='badge alarm'>{view.alarms} alarm(s)</span>"
    if view.drifted_windows:
        badges += f"<span class='badge drift'>drifted in {view.drifted_windows} window(s)</span>"
    if view.errors:
        badges += "<span class='badge err'>error</span>"
    if not badges:
        badges = "<span class='badge ok'>no drift</span>"
    cls = "feature drifted" if view.drifted_windows or view.alarms else "feature"
    out = [f"<section class='{cls}' id='f-{_id(view.name)}' data-feature='{html.escape(view.name)}'>"]
    out.append(f"<h2>{html.escape(view.name)} <span class='muted'>{view.kind.value}</span>{badges}</h2>")
    for e in view.errors:
        out.append(f"<p class='muted'>error: {html.escape(e)}</p>")
    shown = _window_to_show(view.name, result.windows)
    charts = []
    if shown is not None:
        f = shown.features[view.name]
        if f.histogram is not None:
            title = f"baseline vs window {shown.window.index} ({_t(shown.window.start)} — {_t(shown.window.end)})"
            charts.append(_bars(f.histogram, title))
    metric = PRIMARY[view.kind]
    charts.append(_series(view.name, metric, result))
    out.append("<div class='charts'>" + "".join(charts) + "</div>")
    if shown is not None:
        out.append(_metrics_table(shown.features[view.name]))
    out.append("</section>")
    return "\n".join(out)


def _window_to_show(name: str, windows: Sequence[WindowResult]) -> WindowResult | None:
    with_feature = [r for r in windows if name in r.features and r.rows > 0]
    drifted = [r for r in with_feature if r.features[name].drifted]
    judged = [r for r in with_feature if r.status == "ok"]
    for candidates in (drifted, judged, with_feature):
        if candidates:
            return candidates[-1]
    return None


def _metrics_table(f: FeatureResult) -> str:
    rows = "".join(
        f"<tr><td>{m}</td><td>{_fmt(v)}</td><td>{_fmt(f.thresholds.get(m))}</td></tr>" for m, v in f.metrics.items()
    )
    notes = [f"judged by {'the Holm-corrected test' if f.rule == 'test' else 'effect sizes'}"]
    if f.test is not None:
        notes.append(f"{f.test.metric} Holm {_fmt(f.test.adjusted)} vs alpha {_fmt(f.test.alpha)}")
    if f.quality:
        notes.append("data quality: " + ", ".join(f"{m} {_fmt(v)} > {_fmt(t)}" for m, v, t in f.quality))
    if f.approx is not None:
        notes.append(f"approximate ({f.approx['method']}): KS within {_fmt(f.approx['ks_abs_error_bound'])}")
    table = f"<table class='metrics'><tr><th>metric</th><th>value</th><th>threshold</th></tr>{rows}</table>"
    return table + f"<p class='muted'>{html.escape('; '.join(notes))}</p>"


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


def _bars(h: Histogram, title: str) -> str:
    width, height, left, bottom, top = 460, 220, 40, 70, 24
    n = max(len(h.labels), 1)
    peak = max([*h.baseline, *h.window, 1e-9])
    slot = (width - left - 10) / n
    plot_h = height - bottom - top
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' class='distribution'>",
        f"<text x='{left}' y='14'>{html.escape(title)}</text>",
        f"<line x1='{left}' y1='{top + plot_h}' x2='{width - 10}' y2='{top + plot_h}' stroke='#9ca3af'/>",
    ]
    for i, (label, b, w) in enumerate(zip(h.labels, h.baseline, h.window, strict=True)):
        x = left + i * slot
        for j, (share, color) in enumerate(((b, "#7c93c3"), (w, "#e07b39"))):
            bh = plot_h * share / peak
            parts.append(
                f"<rect x='{x + 2 + j * (slot - 4) / 2:.1f}' y='{top + plot_h - bh:.1f}' width='{(slot - 4) / 2:.1f}' "
                f"height='{bh:.1f}' fill='{color}'><title>{html.escape(label)}: "
                f"{'baseline' if j == 0 else 'window'} {share:.3f}</title></rect>"
            )
        parts.append(
            f"<text transform='translate({x + slot / 2:.1f},{top + plot_h + 6}) rotate(40)'>"
            f"{html.escape(label[:18])}</text>"
        )
    parts.append(f"<text x='{width - 150}' y='14' fill='#7c93c3'>■ baseline</text>")
    parts.append(f"<text x='{width - 80}' y='14' fill='#e07b39'>■ window</text>")
    parts.append("</svg>")
    return "".join(parts)


def _series(name: str, metric: str, result: RunResult) -> str:
    width, height, left, bottom, top = 460, 220, 46, 30, 24
    points = []
    for r in result.windows:
        f = r.features.get(name)
        if f is None:
            continue
        v = f.metrics.get(metric)
        points.append((r.window.index, v, f.thresholds.get(metric), f.drifted, r.status))
    alarm_windows = {a.window_index for a in result.alarms if a.feature == name}
    values = [v for _, v, t, _, _ in points if v is not None] + [t for _, _, t, _, _ in points if t is not None]
    peak = max([*values, 1e-9]) * 1.1
    indexes = [i for i, *_ in points] or [0]
    lo, hi = min(indexes), max(max(indexes), min(indexes) + 1)
    plot_w, plot_h = width - left - 10, height - bottom - top

    def x(i: int) -> float:
        return left + plot_w * (i - lo) / (hi - lo)

    def y(v: float) -> float:
        return top + plot_h - plot_h * v / peak

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' class='series'>",
        f"<text x='{left}' y='14'>{html.escape(metric)} per window (dashed: threshold)</text>",
        f"<line x1='{left}' y1='{top + plot_h}' x2='{width - 10}' y2='{top + plot_h}' stroke='#9ca3af'/>",
        f"<text x='2' y='{top + 8}'>{peak:.3g}</text><text x='2' y='{top + plot_h}'>0</text>",
        f"<text x='{left}' y='{height - 6}'>window {lo}</text>",
        f"<text x='{width - 70}' y='{height - 6}'>window {hi}</text>",
    ]
    line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v, *_ in points if v is not None)
    if line:
        parts.append(f"<polyline points='{line}' fill='none' stroke='#3b5b9a' stroke-width='1.5'/>")
    limit = " ".join(f"{x(i):.1f},{y(t):.1f}" for i, _, t, _, _ in points if t is not None)
    if limit:
        parts.append(f"<polyline points='{limit}' fill='none' stroke='#b52b27' stroke-dasharray='4 3'/>")
    for i, v, _, drifted, status in points:
        if v is None:
            continue
        color = "#d9534f" if drifted else "#9ca3af" if status != "ok" else "#3b5b9a"
        parts.append(
            f"<circle cx='{x(i):.1f}' cy='{y(v):.1f}' r='3' fill='{color}'><title>window {i}: {v:.4g}</title></circle>"
        )
        if i in alarm_windows:
            parts.append(f"<text x='{x(i) - 4:.1f}' y='{y(v) - 6:.1f}' fill='#b52b27'>▲</text>")
    parts.append("</svg>")
    return "".join(parts)
