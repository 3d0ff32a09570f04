"""One monitoring run: stream the data into panes, judge each window as it is finished, apply the alarm rule.

Rows are read in record batches and folded into per-pane summaries as they arrive, so memory depends on the
number of panes, features and bins, never on the number of rows; panes are released once no window can use them
(``panes``), so on time-ordered capture memory does not grow with the time span either. Nothing here writes
files or sends alerts: ``outputs`` and ``webhooks`` do, from the returned :class:`RunResult`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from servekit.services.monitoring.alerts import alarms as alarm_rule
from servekit.services.monitoring.alerts.alarms import Alarm, Key
from servekit.services.monitoring.config import MonitorConfig
from servekit.services.monitoring.drift.profiles import Baseline
from servekit.services.monitoring.runs.evaluate import Pane, WindowResult, accumulate, evaluate
from servekit.services.monitoring.stream.panes import Finished, PaneStore
from servekit.services.monitoring.stream.sources import SourceError, SourceStats, read


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
        """What the user should know about the data although the run went on (a header that does not match,
        capture records not yet published)."""
        unread = self.stats.in_progress_warning()
        return column_warnings(self.missing_columns, self.extra_columns) + ([unread] if unread else [])


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
    store: PaneStore[Pane] | None = None,
) -> RunResult:
    """``store`` (a fresh :class:`PaneStore` of this windowing) may be passed to watch its panes."""
    step = cfg.step_seconds
    store = store or PaneStore(cfg.window, step, Pane, since=cfg.since, until=cfg.until, first_index=first_index)
    errors: dict[str, str] = {}
    stats = SourceStats()
    seen: dict[str, None] = {}  # every column the data had, in order
    rng = np.random.default_rng(0)  # sample keys once a pane holds more than window_values values: reproducible
    state = dict(streaks or {})
    results: list[WindowResult] = []
    raised: list[Alarm] = []
    newest = -math.inf

    def judge(done: Finished[Pane]) -> None:
        nonlocal state
        merged = Pane()
        for p in done.panes:
            merged.add(p)
        r = evaluate(baseline, done.window, merged, cfg, errors)
        results.append(r)
        state, new = alarm_rule.step(state, r.window.index, r.judgements(), cfg.consecutive)
        raised.extend(new)

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
        keep = time_filter(ts, cfg.since, cfg.until, stats)
        if keep.any():
            ok, ids = store.admit(ts[keep])
            keep[keep] = ok
            if keep.any():
                table = batch.table if keep.all() else batch.table.filter(keep)
                ids = ids[ok]
                newest = max(newest, float(ts[keep].max()))
                targets = {int(k): store.get(int(k)) for k in np.unique(ids)}
                accumulate(targets, baseline, table, ids, errors, cfg.window_values, rng)
        for done in store.ready(watermark(batch.watermark, newest, cfg.lateness)):
            judge(done)
    for done in store.finish():
        judge(done)
    stats.late_rows = store.late_rows
    features = set(baseline.columns)
    missing = tuple(c for c in baseline.columns if c not in seen) if seen else ()
    extra = tuple(c for c in seen if c not in features)
    since, until = cfg.since, cfg.until
    if math.isfinite(store.last):  # the range's bounds not given are those of the rows (see ``panes``)
        since = store.since if since is None else since
        until = (math.floor(store.last / step) + 1) * step if until is None else until
    return RunResult(results, raised, state, since, until, stats, errors, missing, extra)


def time_filter(
    ts: npt.NDArray[np.float64], since: float | None, until: float | None, stats: SourceStats
) -> npt.NDArray[np.bool_]:
    """Rows with a readable time inside ``[since, until)``; the others are counted (no time) or left out."""
    known = np.isfinite(ts)
    stats.rows_without_timestamp += int((~known).sum())
    keep = known
    if since is not None:
        keep = keep & (ts >= since)
    if until is not None:
        keep = keep & (ts < until)
    return np.asarray(keep, dtype=bool).copy()


def watermark(source: float | None, newest: float, lateness: int | None) -> float | None:
    """The source's watermark (time-ordered capture partitions), else with ``lateness`` the newest row's time minus
    it; None (keep every pane to the end) when neither is known."""
    if source is not None:
        return source
    if lateness is not None and math.isfinite(newest):
        return newest - lateness
    return None
