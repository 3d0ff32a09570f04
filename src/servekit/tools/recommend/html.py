"""The recommendation as one self-contained HTML page: the answer first (a ranked table), then the charts (latency
percentiles vs offered load per type, throughput vs concurrency, cost per 1,000 inferences), then what was measured
and what scaled, the formulas, and every phase. Inline CSS and SVG only; nothing is fetched when it opens."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

from servekit.tools.recommend.svg import PALETTE, Series, bar_chart, line_chart

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}tr.best{background:#eaf7ea}tr.miss{color:#999}
.charts{display:flex;flex-wrap:wrap;gap:12px}.tag{font-size:.8em;padding:1px 5px;border-radius:3px}
.measured{background:#dff0d8}.scaled{background:#fcf8e3}.none{background:#f2dede}
.muted{color:#777;font-size:.9em}code{background:#f6f6f6;padding:0 3px}
"""


def _num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1e-3 or abs(v) >= 1e6 else f"{v:,.{digits}f}".rstrip("0").rstrip(".")
    return escape(str(v))


def _money(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"${v:,.{digits}f}"


def _time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _summary(report: dict[str, Any]) -> str:
    t = report["target"]
    pct = t["slo"]["percentile"]
    rows = []
    for f in sorted(report["types"], key=lambda f: (f["rank"] is None, f["rank"] or 0, f["name"])):
        basis = f["basis"]
        cls = "best" if f["rank"] == 1 else ("miss" if not f["meets_slo"] else "")
        lat = f.get("latency_ms") or {}
        rows.append(
            f'<tr class="{cls}"><td>{_num(f["rank"])}</td><td class="l">{escape(f["name"])}</td>'
            f"<td>{f['vcpus']}</td><td>{_num(f['memory_gib'])}</td><td>{_money(f['price_per_hour'], 3)}</td>"
            f'<td class="l"><span class="tag {basis}">{basis}</span></td>'
            f"<td class=l>{escape(str(f.get('batching') or '-'))}</td>"
            f"<td>{_num(f.get('r_max_measured'))}</td><td>{_num(f.get('r_max'))}</td>"
            f"<td>{_num(f.get('cpu_bound_rps'))}</td><td>{_num(f.get('memory_bound_rps'))}</td>"
            f"<td>{_num(lat.get('p50'))}</td><td>{_num(lat.get(pct))}</td>"
            f"<td>{_num(f.get('instances'))}</td><td>{_money(f.get('cost_per_hour'), 3)}</td>"
            f"<td>{_money(f.get('cost_per_1k'), 6)}</td>"
            f'<td class="l">{escape(f.get("reason") or "meets the SLO")}</td></tr>'
        )
    head = (
        "<tr><th>rank</th><th class=l>instance type</th><th>vCPUs</th><th>GiB</th><th>$/h</th><th class=l>basis</th>"
        "<th class=l>batching</th><th>R_max measured (req/s)</th><th>R_max used</th><th>C/c</th><th>M/m</th>"
        f"<th>p50 ms</th><th>{pct} ms</th><th>N</th><th>cost/h</th><th>cost / 1K</th><th class=l>SLO</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>"


def _latency_chart(f: dict[str, Any], report: dict[str, Any]) -> str:
    slo = report["target"]["slo"]
    best = next((s for s in f["settings"] if s["batching"] == f.get("batching")), None)
    series = []
    for i, setting in enumerate(f["settings"]):
        trials = sorted(setting["trials"], key=lambda t: t["level"])
        if not trials:
            continue
        mine = setting is best
        measured = [t for t in trials if t["latency_ms"]]
        hollow = {k for k, t in enumerate(measured) if not t["meets_slo"]}
        for key, dashed in (("p50", True), (slo["percentile"], False)):
            if not mine and key == "p50":
                continue  # the other settings' p99 only: the chart stays readable
            points = [(t["level"], t["latency_ms"][key]) for t in measured]
            series.append(
                Series(f"{setting['batching']} {key}", points, PALETTE[i % len(PALETTE)], dashed, hollow=hollow)
            )
    marks = [(f["r_max_measured"], "R_max")] if f.get("r_max_measured") else []
    return line_chart(
        f"{f['name']}: latency vs offered load",
        series,
        "offered load (requests/s, open loop)",
        "latency (ms)",
        hlines=[(slo["ms"], f"SLO {slo['percentile']} {slo['ms']:g} ms")],
        vlines=marks,
    )


def _sweep_chart(report: dict[str, Any]) -> str:
    series = []
    for i, f in enumerate(report["types"]):
        if f["sweep"]:
            points = [(p["level"], p["throughput_rps"]) for p in f["sweep"]]
            series.append(Series(f"{f['name']} ({f.get('batching')})", points, PALETTE[i % len(PALETTE)]))
    return line_chart("Throughput vs concurrency (closed loop, measured size)", series, "clients", "requests/s")


def _cost_chart(report: dict[str, Any]) -> str:
    bars = []
    for f in report["types"]:
        if f["meets_slo"]:
            bars.append((f["name"], f["cost_per_1k"], f"{_money(f['cost_per_1k'], 6)} (N={f['instances']})"))
        else:
            bars.append((f["name"], None, "misses the SLO"))
    return bar_chart(f"Cost per 1,000 inferences at {report['target']['qps']:g} req/s", bars, "US dollars")


def _phases_table(f: dict[str, Any], pct: str) -> str:
    rows = []
    for s in f["settings"]:
        phases = ([("probe", s["probe"])] if s["probe"] else []) + [("search", t) for t in s["trials"]]
        for kind, p in phases:
            lat = p["latency_ms"] or {}
            rows.append(
                f"<tr><td class=l>{escape(s['batching'])}</td><td class=l>{kind}</td><td>{_num(p['level'])}"
                f"{'/s' if p['loop'] == 'open' else ' clients'}</td><td>{_num(p['throughput_rps'])}</td>"
                f"<td>{p['ok']}</td><td>{p['errors']}</td><td>{p['dropped']}</td><td>{_num(lat.get('p50'))}</td>"
                f"<td>{_num(lat.get('p95'))}</td><td>{_num(lat.get('p99'))}</td><td>{_num(p['cpu_s'])}</td>"
                f"<td>{_num((p['rss_peak_bytes'] or 0) / 2**20)}</td>"
                f"<td class=l>{escape(p.get('verdict', ''))}</td></tr>"
            )
        if s["error"]:
            rows.append(f"<tr><td class=l>{escape(s['batching'])}</td><td class=l colspan=12>{escape(s['error'])}</td>")
    head = (
        "<tr><th class=l>batching</th><th class=l>phase</th><th>load</th><th>answered/s</th><th>ok</th><th>errors</th>"
        "<th>dropped</th><th>p50</th><th>p95</th><th>p99</th><th>CPU s</th><th>peak RSS MiB</th>"
        f"<th class=l>verdict ({escape(pct)})</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>"


def render_html(report: dict[str, Any]) -> str:
    t = report["target"]
    pct = t["slo"]["percentile"]
    ranking = report["ranking"]
    first = next((f for f in report["types"] if f["rank"] == 1), None)
    answer = (
        f"<p><b>Recommended: {escape(ranking[0])}</b> &times; {first['instances'] if first else '-'}"
        f" instance(s) for {t['qps']:g} requests/s with {pct} &le; {t['slo']['ms']:g} ms at {t['utilization']:.0%} "
        "utilisation.</p>"
        if ranking
        else "<p><b>No instance type met the SLO.</b> See the reasons in the table.</p>"
    )
    per_type = "".join(
        f"<h3>{escape(f['name'])} <span class='tag {f['basis']}'>{f['basis']}</span></h3>"
        f"<div class=charts>{_latency_chart(f, report)}</div>"
        f"<p class=muted>Hollow points broke the SLO. Solid line: {escape(pct)}; dashed: p50 of the chosen setting."
        "</p>"
        f"{_phases_table(f, pct)}"
        for f in report["types"]
    )
    formulas = "".join(
        f"<tr><td class=l><code>{escape(k)}</code></td><td class=l>{escape(v)}</td></tr>"
        for k, v in report["formulas"].items()
    )
    notes = "".join(f"<li>{escape(n)}</li>" for n in report["notes"])
    model = report["model"]
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>servekit recommend: "
        f"{escape(model['name'])}</title><style>{_CSS}</style></head><body>"
        f"<h1>Capacity recommendation for <code>{escape(model['name'])}</code></h1>"
        f"<p class=muted>Model {escape(model['dir'])}; target {t['qps']:g} requests/s, {pct} &le; "
        f"{t['slo']['ms']:g} ms, utilisation {t['utilization']:g}; measured {_time(report['started'])} to "
        f"{_time(report['ended'])} on {report['machine']['cpus']} CPU(s).</p>"
        f"{answer}<h2>Instance types, ranked by cost per 1,000 inferences</h2>{_summary(report)}"
        f"<h2>Charts</h2><div class=charts>{_cost_chart(report)}{_sweep_chart(report)}</div>"
        f"<h2>Measured and scaled: what to trust</h2><ul>{notes}</ul>"
        f"<h2>Formulas</h2><table>{formulas}</table>"
        f"<h2>Every phase, per instance type</h2>{per_type}"
        "</body></html>\n"
    )
