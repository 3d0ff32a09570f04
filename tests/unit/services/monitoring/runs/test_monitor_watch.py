"""The watch loop on a manual clock: aligned runs, state carried across runs, alarm on the third window."""

from __future__ import annotations

from pathlib import Path

import orjson

from servekit.services.monitoring.alerts.webhooks import AlertLog, Notifier
from servekit.services.monitoring.baseline import store
from servekit.services.monitoring.baseline.build import build
from servekit.services.monitoring.config import BaselineConfig, MonitorConfig
from servekit.services.monitoring.runs.job import JobSpec
from servekit.services.monitoring.runs.watch import STATE_FILE, WatchState, next_tick, tick_range, watch
from servekit.services.monitoring.stream.windows import parse_time
from servekit.testing.capture_files import feature_rows, synthetic_features, write_capture_files

T0 = parse_time("2026-11-30T00:00:00Z")
HOUR = 3600


class ManualClock:
    def __init__(self, now: float) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_schedule_arithmetic() -> None:
    assert next_tick(T0 + 10, HOUR) == T0 + HOUR
    assert next_tick(T0, HOUR) == T0 + HOUR
    assert tick_range(T0 + 3 * HOUR + 5, WatchState(), HOUR, HOUR, 0) == (T0 + 2 * HOUR, T0 + 3 * HOUR)
    assert tick_range(T0 + 3 * HOUR + 5, WatchState(), HOUR, HOUR, 600) == (T0 + HOUR, T0 + 2 * HOUR)
    done = WatchState(last_end=T0 + 3 * HOUR)
    assert tick_range(T0 + 3 * HOUR + 5, done, HOUR, HOUR, 0) is None
    assert tick_range(T0 + 5 * HOUR, done, 2 * HOUR, HOUR, 0) == (T0 + 2 * HOUR, T0 + 5 * HOUR)


def test_watch_carries_streaks_across_runs(tmp_path: Path) -> None:
    train = synthetic_features(5000, 1)
    train_file = tmp_path / "train.jsonl"
    train_file.write_bytes(b"\n".join(orjson.dumps(dict(zip(train, r, strict=True))) for r in feature_rows(train)))
    store.save(build(str(train_file), BaselineConfig()), tmp_path / "base")
    records = []
    for h in range(6):
        cols = synthetic_features(300, 10 + h)
        if h >= 2:
            cols["num_0"] = cols["num_0"] + 2.0
        records += [(T0 + h * HOUR + i * 10, [row]) for i, row in enumerate(feature_rows(cols))]
    write_capture_files(tmp_path / "cap", records)

    clock = ManualClock(T0 + 3 * HOUR + 600)
    out = tmp_path / "out"
    notifier = Notifier(MonitorConfig().webhooks, AlertLog(out / "alerts.jsonl"))
    spec = JobSpec(
        tmp_path / "base", str(tmp_path / "cap"), out, MonitorConfig(window=HOUR, judged_metrics=("ks_statistic",))
    )
    assert watch(spec, notifier, HOUR, clock, max_runs=4) == 4
    notifier.close()

    assert clock.sleeps == [HOUR - 600, HOUR, HOUR]
    runs = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert runs == [f"2026-11-30T0{h}-00-00Z" for h in (3, 4, 5, 6)]
    per_run = [orjson.loads((out / r / "metrics.json").read_bytes()) for r in runs]
    assert [[w["index"] for w in m["windows"]] for m in per_run] == [[0], [1], [2], [3]]
    assert [m["windows"][0]["features"]["num_0"]["drifted"] for m in per_run] == [True] * 4
    assert [len(m["alarms"]) for m in per_run] == [0, 0, 1, 0]
    assert per_run[2]["alarms"][0]["feature"] == "num_0" and per_run[2]["alarms"][0]["window_index"] == 2
    alerts = [orjson.loads(line) for line in (out / "alerts.jsonl").read_bytes().splitlines()]
    assert [(a["alert"]["feature"], a["alert"]["window_end"]) for a in alerts] == [("num_0", "2026-11-30T05:00:00Z")]
    state = WatchState.load(out / STATE_FILE)
    assert state.next_index == 4 and state.last_end == T0 + 6 * HOUR
    assert state.streaks == {("num_0", "ks_pvalue"): 4}  # small windows: the KS test decides
