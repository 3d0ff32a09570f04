"""The recommendation as a Markdown table (the command's output, and what a recorded run pastes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def table_text(report: Mapping[str, Any]) -> str:
    t = report["target"]
    pct = t["slo"]["percentile"]
    lines = [
        f"target: {t['qps']:g} requests/s, {pct} <= {t['slo']['ms']:g} ms, utilisation {t['utilization']:g}; "
        "N = ceil(Q / (U x R_max)), cost per 1K = N x price / (Q x 3600) x 1000",
        "",
        f"| rank | type | vCPUs (measured) | basis | batching | R_max measured/s | R_max used/s | C/c /s | M/m /s "
        f"| p50 ms | {pct} ms | N | $/h | $ per 1K | SLO |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = sorted(report["types"], key=lambda f: (f["rank"] is None, f["rank"] or 0, f["name"]))
    for f in order:
        lat = f.get("latency_ms") or {}
        lines.append(
            f"| {f['rank'] or '-'} | {f['name']} | {f['vcpus']} ({f['measured_vcpus']}) | {f['basis']} "
            f"| {f.get('batching') or '-'} | {_f(f.get('r_max_measured'), '.1f')} | {_f(f.get('r_max'), '.1f')} "
            f"| {_f(f.get('cpu_bound_rps'), '.0f')} | {_f(f.get('memory_bound_rps'), '.0f')} "
            f"| {_f(lat.get('p50'), '.2f')} | {_f(lat.get(pct), '.2f')} | {_f(f.get('instances'), 'd')} "
            f"| {_f(f.get('cost_per_hour'), '.3f')} | {_f(f.get('cost_per_1k'), '.6f')} "
            f"| {f.get('reason') or 'meets'} |"
        )
    return "\n".join(lines)
