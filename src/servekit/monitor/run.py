"""One monitoring run: stream the data into panes, plan the windows, judge each, apply the alarm rule.

Rows are read in record batches and folded into per-pane summaries as they arrive, so memory depends on the
number of panes, features and bins, never on the number of rows. Nothing here writes files or sends alerts:
``outputs`` and ``webhooks`` do, from the returned :class:`RunResult`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from servekit.monitor import alarms as alarm_rule
from servekit.monitor.alarms import Alarm, Key
from servekit.monitor.config import MonitorConfig
from servekit.monitor.evaluate import Pane, WindowResult, accumulate, evaluate, merge
from servekit.monitor.profiles import Baseline
from servekit.monitor.sources import SourceError, SourceStats, read
from servekit.monitor.windows import default_range, pane_of, pane_seconds, panes_in, plan


@dataclass(frozen=True, slots=True)
class RunResult:
    windows: list[WindowResult]
    alarms: list[Alarm]
    streaks: dict[Key, int]
    since: float | None
    until: float | None
    stats: SourceStats
    feature_errors: dict[str, str] = field(default_factory=dict)
    missing_columns: tuple[str, ...] = ()  # baseline features the data never had (judged as all missing)
    extra_columns: tuple[str, ...] = ()  # data columns the baseline does not know (ignored)

    @property
    def warnings(self) -> list[str]:
        """What the user should know about the data although the run went on (a header that does not match)."""
        return column_warnings(self.missing_columns, self.extra_columns)


def column_warnings(missing: Sequence[str], extra: Sequence[str]) -> list[str]:
    if not missing and not extra:
        return []
    parts = []
    if missing:
        parts.append(f"missing {', '.join(map(repr, missing))} (judged as all missing)")
    if extra:
        parts.append(f"extra {', '.join(map(repr, extra))} (ignored)")
    hint = "; a renamed column shows as one missing and one extra" if missing and extra else ""
    return [f"the data's columns do not match the baseline's: {'; '.join(parts)}{hint}"]


def run(
    baseline: Baseline,
    uri: str,
    cfg: MonitorConfig,
    *,
    streaks: Mapping[Key, int] | None = None,
    first_index: int = 0,
) -> RunResult:
    step = cfg.step_seconds
    pane = pane_seconds(cfg.window, step)
    panes: dict[int, Pane] = {}
    errors: dict[str, str] = {}
    stats = SourceStats()
    seen: dict[str, None] = {}  # every column the data had, in order
    first, last = math.inf, -math.inf
    rng = np.random.default_rng(0)  # sample keys once a pane holds more than window_values values: reproducible
    batches = read(
        uri,
        timestamp_column=cfg.timestamp_column,
        columns=baseline.columns,
        since=cfg.since,
        until=cfg.until,
        batch_rows=cfg.batch_rows,
        stats=stats,
    )
    for batch in batches:
        ts = batch.timestamps
        if ts is None:
            raise SourceError(f"{uri!r} has no timestamps: name its time column with --timestamp-column")
        seen.update(dict.fromkeys(batch.table.column_names))
        known = np.isfinite(ts)
        stats.rows_without_timestamp += int((~known).sum())
        keep = known
        if cfg.since is not None:
            keep = keep & (ts >= cfg.since)
        if cfg.until is not None:
            keep = keep & (ts < cfg.until)
        if not keep.any():
            continue
        table = batch.table if keep.all() else batch.table.filter(keep)
        kept = ts[keep]
        first, last = min(first, float(kept.min())), max(last, float(kept.max()))
        accumulate(panes, baseline, table, pane_of(kept, pane), errors, cfg.window_values, rng)
    features = set(baseline.columns)
    missing = tuple(c for c in baseline.columns if c not in seen) if seen else ()
    extra = tuple(c for c in seen if c not in features)
    since, until = cfg.since, cfg.until
    if since is None or until is None:
        if not panes:
            return RunResult([], [], dict(streaks or {}), since, until, stats, errors, missing, extra)
        lo, hi = default_range(first, last, step)
        since = lo if since is None else since
        until = hi if until is None else until
    results = [
        evaluate(baseline, w, merge(panes, panes_in(w, pane)), cfg, errors)
        for w in plan(since, until, cfg.window, step, first_index)
    ]
    state = dict(streaks or {})
    raised: list[Alarm] = []
    for r in results:
        state, new = alarm_rule.step(state, r.window.index, r.judgements(), cfg.consecutive)
        raised.extend(new)
    return RunResult(results, raised, state, since, until, stats, errors, missing, extra)
