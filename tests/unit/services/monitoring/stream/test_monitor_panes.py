"""The pane store keeps only the panes a window can still use: streaming many windows of time-ordered data holds a
bounded number of panes, finishes the same windows as planning them after the fact, and counts late rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servekit.services.monitoring.baseline.build import build
from servekit.services.monitoring.config import BaselineConfig, MonitorConfig
from servekit.services.monitoring.runs.evaluate import Pane
from servekit.services.monitoring.runs.run import run
from servekit.services.monitoring.stream.panes import PaneStore
from servekit.services.monitoring.stream.windows import plan
from servekit.testing.capture_files import write_capture_files

HOUR = 3600


def feed(store: PaneStore[list[float]], hours: int, per_hour: int, lateness: float) -> list[tuple[int, int]]:
    """Rows in time order, one batch per hour; returns (window index, rows) of every finished window."""
    rng = np.random.default_rng(1)
    done = []
    for h in range(hours):
        t = np.sort(h * HOUR + rng.uniform(0, HOUR, per_hour))
        ok, ids = store.admit(t)
        for k in np.unique(ids[ok]):
            store.get(int(k)).extend(t[ok][ids[ok] == k].tolist())
        done += [(f.window.index, sum(len(p) for p in f.panes)) for f in store.ready(float(t.max()) - lateness)]
        assert store.held <= 6 * HOUR // store.pane + 2, store.held  # one window's panes, plus those not yet passed
    done += [(f.window.index, sum(len(p) for p in f.panes)) for f in store.finish()]
    return done


def test_streaming_a_thousand_windows_holds_a_bounded_number_of_panes() -> None:
    store: PaneStore[list[float]] = PaneStore(6 * HOUR, HOUR, list)
    done = feed(store, 1000, 50, lateness=0)
    assert store.peak <= 8 and store.late_rows == 0
    expected = plan(0, 1000 * HOUR, 6 * HOUR, HOUR)  # what planning after reading everything gives
    assert [i for i, _ in done] == [w.index for w in expected]
    assert all(rows == 6 * 50 for _, rows in done)


def test_without_a_watermark_every_pane_is_kept_until_the_end() -> None:
    store: PaneStore[list[float]] = PaneStore(HOUR, HOUR, list)
    for h in range(30):
        _, ids = store.admit(np.array([h * HOUR + 1.0]))
        store.get(int(ids[0])).append(1.0)
        assert list(store.ready(None)) == []
    assert store.held == 30
    assert len(list(store.finish())) == 30


def test_rows_for_a_finished_window_are_late_and_counted() -> None:
    store: PaneStore[list[float]] = PaneStore(HOUR, HOUR, list)
    store.get(int(store.admit(np.array([10.0]))[1][0])).append(10.0)
    assert [f.window.index for f in store.ready(2 * HOUR)] == [0, 1]
    ok, _ = store.admit(np.array([20.0, 2 * HOUR + 5.0]))
    assert ok.tolist() == [False, True] and store.late_rows == 1


def test_a_drift_run_over_time_ordered_capture_releases_panes(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    train = tmp_path / "train.csv"
    train.write_text("a,b\n" + "\n".join(f"{x:.4f},{y:.4f}" for x, y in rng.normal(size=(2000, 2))) + "\n")
    baseline = build(str(train), BaselineConfig(chunks=4))
    hours = 48
    times = np.repeat(np.arange(hours) * HOUR + 1_700_000_000 // HOUR * HOUR, 20) + 7.0
    rows = rng.normal(size=(len(times), 2)).round(4).tolist()
    write_capture_files(tmp_path / "capture", [(t, [r]) for t, r in zip(times.tolist(), rows, strict=True)])
    store: PaneStore[Pane] = PaneStore(2 * HOUR, HOUR, Pane)
    result = run(baseline, str(tmp_path / "capture"), MonitorConfig(window=2 * HOUR, step=HOUR), store=store)
    assert len(result.windows) == hours - 1
    assert all(r.rows == 40 for r in result.windows)
    assert store.peak <= 4  # hourly partitions, one hour of delivery slack: never the whole two days
    assert result.stats.late_rows == 0
