"""A monitoring job as the CLI runs it: load the baseline (with fall-back), run, write the outputs, alert."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servekit.services.monitoring.alerts.alarms import Alarm, Key
from servekit.services.monitoring.alerts.webhooks import Notifier
from servekit.services.monitoring.baseline import store
from servekit.services.monitoring.config import MonitorConfig
from servekit.services.monitoring.runs import outputs, report
from servekit.services.monitoring.runs.run import RunResult, run
from servekit.services.monitoring.stream.windows import format_time


@dataclass(frozen=True, slots=True)
class JobSpec:
    baseline: Path
    data: str
    out: Path
    cfg: MonitorConfig


def run_job(
    spec: JobSpec,
    notifier: Notifier,
    *,
    since: float | None = None,
    until: float | None = None,
    streaks: Mapping[Key, int] | None = None,
    first_index: int = 0,
    out: Path | None = None,
) -> RunResult:
    loaded = store.load(spec.baseline)
    cfg = spec.cfg
    if since is not None or until is not None:
        cfg = replace(
            cfg, since=since if since is not None else cfg.since, until=until if until is not None else cfg.until
        )
    result = run(loaded.baseline, spec.data, cfg, streaks=streaks, first_index=first_index)
    folder = out or spec.out
    info: dict[str, Any] = {
        "data": spec.data,
        "baseline": str(spec.baseline),
        "baseline_version": loaded.baseline.version,
        "baseline_path": str(loaded.path),
        "baseline_fallback_reason": loaded.fallback_reason,
        "window_seconds": cfg.window,
        "step_seconds": cfg.step_seconds,
        "min_window_rows": cfg.min_window_rows,
        "consecutive": cfg.consecutive,
        "judged_metrics": list(cfg.judged_metrics),
    }
    html = report.render(result, info) if cfg.report else None
    outputs.write(folder, result, info, html)
    for alarm in result.alarms:
        notifier.send(alert_payload(alarm, result, info, folder))
    return result


def alert_payload(alarm: Alarm, result: RunResult, info: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    window = next(r.window for r in result.windows if r.window.index == alarm.window_index)
    return {
        "id": str(uuid.uuid4()),
        "type": "servekit.monitor.alarm",
        "summary": (f"{alarm.feature}: {alarm.describe()} for {info['consecutive']} windows in a row"),
        **alarm.to_json(),
        "window_start": format_time(window.start),
        "window_end": format_time(window.end),
        "data": info["data"],
        "baseline_version": info["baseline_version"],
        "report": str(folder / "report.html"),
    }
