"""Pure parts of the monitor: conversions, summaries, thresholds, windows and the consecutive-window rule."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from servekit.errors import ConfigError
from servekit.services.monitoring.alerts import alarms
from servekit.services.monitoring.alerts.alarms import Judgement
from servekit.services.monitoring.config import MonitorConfig
from servekit.services.monitoring.drift.schema import to_categorical, to_numeric
from servekit.services.monitoring.drift.sketch import Binning, summarise_categorical, summarise_numeric
from servekit.services.monitoring.drift.thresholds import SHARE_MARGIN, Threshold, learn, parse_override
from servekit.services.monitoring.stream.windows import (
    default_range,
    format_time,
    pane_seconds,
    panes_in,
    parse_duration,
    parse_time,
    plan,
)


def test_to_numeric_tells_missing_from_mismatched() -> None:
    conv = to_numeric(pa.array([" 1.5", "2", "", None, "abc", "1e3", "-.5"]))
    assert conv.values[[0, 1, 5, 6]].tolist() == [1.5, 2.0, 1000.0, -0.5]
    assert conv.missing.tolist() == [False, False, True, True, False, False, False]
    assert conv.mismatched.tolist() == [False, False, False, False, True, False, False]
    integral = to_numeric(pa.array([1.0, 2.5, float("nan")]), integral=True)
    assert integral.mismatched.tolist() == [False, True, False]
    assert integral.missing.tolist() == [False, False, True]
    nested = to_numeric(pa.array([[1], None]))
    assert nested.mismatched.tolist() == [True, False] and nested.missing.tolist() == [False, True]


def test_to_categorical_normalises_numbers_and_blanks() -> None:
    out = to_categorical(pa.array([1.0, 2.5, None, float("nan")]))
    assert out.to_pylist() == ["1", "2.5", None, None]
    assert to_categorical(pa.array(["a", " ", "b "])).to_pylist() == ["a", None, "b"]
    assert to_categorical(pa.array([True, False])).to_pylist() == ["true", "false"]


def test_numeric_summaries_add_and_subtract_like_the_rows() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 1000)
    binning = Binning(np.quantile(x, np.linspace(0, 1, 21)))
    group = rng.integers(0, 3, 1000).astype(np.int64)
    parts = summarise_numeric(pa.array(x), binning, group, 3, shift=0.1)
    whole = summarise_numeric(pa.array(x), binning, np.zeros(1000, np.int64), 1, shift=0.1)[0]
    total = parts[0].copy()
    total += parts[1]
    total += parts[2]
    assert total.counts.tolist() == whole.counts.tolist()
    assert total.mean() == pytest.approx(x.mean())
    assert total.std() == pytest.approx(x.std())
    rest = whole - parts[0]
    assert rest.present == int((group != 0).sum())
    assert rest.sums.sum() == pytest.approx(x[group != 0].sum())


def test_categorical_summary_counts_domain_unseen_and_missing() -> None:
    col = pa.array(["a", "b", "z", None, "a", "y", "z"])
    group = np.array([0, 0, 0, 0, 1, 1, 1], np.int64)
    s0, s1 = summarise_categorical(col, pa.array(["a", "b"]), True, group, 2)
    assert s0.counts.tolist() == [1, 1, 0] and s0.unseen == {"z": 1} and s0.missing == 1
    assert s1.counts.tolist() == [1, 0, 0] and s1.unseen == {"y": 1, "z": 1} and s1.unseen_total == 2
    s0 += s1
    assert s0.unseen == {"z": 2, "y": 1} and s0.present == 6
    capped = summarise_categorical(col, pa.array(["a", "b"]), False, np.zeros(7, np.int64), 1)[0]
    assert capped.counts.tolist() == [2, 1, 3] and capped.unseen_total == 0


def test_threshold_is_mean_plus_k_std_of_the_chunks() -> None:
    values = [0.1, 0.2, 0.3, None, float("nan")]
    t = learn("ks_statistic", values, chunk_rows=1000, rest_rows=9000, k=3)
    assert t.mean == pytest.approx(0.2)
    assert t.learned == pytest.approx(0.2 + 3 * np.std([0.1, 0.2, 0.3], ddof=1))
    assert math.isnan(learn("psi", [None], 1, 1, 3).mean)
    assert learn("psi", [None], 1, 1, 3).for_window(100, 100) is None


def test_threshold_widens_for_small_windows_and_never_narrows() -> None:
    t = Threshold("wasserstein_norm", mean=0.02, std=0.01, k=3, chunk_rows=1000, rest_rows=9000)
    n_eff_chunk = 1000 * 9000 / 10000
    small = t.for_window(100, 10_000)
    assert small == pytest.approx(0.05 * math.sqrt(n_eff_chunk / (100 * 10_000 / 10_100)))
    assert t.for_window(1_000_000, 10_000) == pytest.approx(0.05)
    psi = Threshold("psi", 0.01, 0.002, 3, 1000, 9000)
    assert psi.for_window(100, 10_000) == pytest.approx(0.016 * n_eff_chunk / (100 * 10_000 / 10_100))
    share = Threshold("missing_share", 0.0, 0.0, 3, 1000, 9000)
    assert share.for_window(100, 10_000) == pytest.approx(SHARE_MARGIN)
    assert t.with_fixed(0.3).for_window(5, 10_000) == 0.3


def test_ks_threshold_never_below_its_critical_value() -> None:
    t = Threshold("ks_statistic", mean=0.02, std=0.001, k=3, chunk_rows=1000, rest_rows=9000)
    n_eff = 300 * 10_000 / 10_300
    floor = math.sqrt(-math.log(0.0005) / 2) / math.sqrt(n_eff)
    assert t.for_window(300, 10_000) == pytest.approx(floor)  # learned (0.023) is tighter than chance allows
    assert floor == pytest.approx(1.949 / math.sqrt(n_eff), rel=1e-3)
    wide = Threshold("ks_statistic", mean=0.2, std=0.05, k=3, chunk_rows=1000, rest_rows=9000)
    assert wide.for_window(1_000_000, 10_000) == pytest.approx(0.35)  # above the floor: the learned value


def test_threshold_json_round_trip() -> None:
    t = Threshold("js_distance", 0.1, 0.01, 3, 100, 900, fixed=0.5)
    assert Threshold.from_json("js_distance", t.to_json()) == t


@pytest.mark.parametrize("bad", ["f.ks_statistic", "ks_statistic=1", "f.nope=1", "f.psi=x", "f.psi=-1"])
def test_bad_threshold_overrides(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_override(bad)


def test_threshold_override_keeps_dots_in_feature_names() -> None:
    assert parse_override("a.b.psi=0.2") == ("a.b", "psi", 0.2)


def test_durations_and_times() -> None:
    assert [parse_duration(x) for x in ("90s", "15m", "6h", "1d", "2w", "30")] == [90, 900, 21600, 86400, 1209600, 30]
    for bad in ("", "6x", "0.5s", "-1h"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    t = parse_time("2026-11-30T10:00:00Z")
    assert t == parse_time("2026-11-30T10:00:00") == parse_time("2026-11-30T11:00:00+01:00")
    assert format_time(t) == "2026-11-30T10:00:00Z"
    assert format_time(t + 0.25) == "2026-11-30T10:00:00.250Z"


def test_sliding_windows_end_on_step_multiples() -> None:
    h = 3600
    ws = plan(since=10 * h, until=20 * h, window=6 * h, step=h)
    assert [(w.start / h, w.end / h) for w in ws] == [(s, s + 6) for s in range(10, 15)]
    assert [w.index for w in plan(10 * h, 20 * h, 6 * h, h, first_index=7)][:2] == [7, 8]
    assert plan(10 * h + 17, 13 * h, h, h)[0].start == 11 * h  # never starts before since
    assert pane_seconds(90 * 60, 3600) == 1800
    assert list(panes_in(ws[0], h)) == list(range(10, 16))
    assert default_range(10 * h + 5, 12 * h, h) == (10 * h, 13 * h)


def test_monitor_config_is_validated_at_the_edge() -> None:
    with pytest.raises(ConfigError):
        MonitorConfig(consecutive=0)
    with pytest.raises(ConfigError):
        MonitorConfig(since=10.0, until=5.0)
    with pytest.raises(ConfigError):
        MonitorConfig(judged_metrics=("ks_pvalue",))
    assert MonitorConfig(window=600).step_seconds == 600


def _stream(values: list[float | None], threshold: float = 1.0, consecutive: int = 3) -> list[alarms.Alarm]:
    streaks: dict[alarms.Key, int] = {}
    raised = []
    for i, v in enumerate(values):
        judged = {} if v is None else {("f", "ks_statistic"): Judgement(v, threshold)}
        streaks, new = alarms.step(streaks, i, judged, consecutive)
        raised += new
    return raised


def test_spike_does_not_alarm_and_sustained_shift_alarms_on_its_third_window() -> None:
    values: list[float | None] = [0.5] * 20
    values[4] = 5.0  # one-window spike
    for i in range(11, 20):  # sustained shift from window 11
        values[i] = 2.0
    raised = _stream(values)
    assert [(a.window_index, a.value) for a in raised] == [(13, 2.0)]


def test_runs_are_counted_per_metric_and_alarm_once_per_run() -> None:
    assert [a.window_index for a in _stream([2, 2, 0, 2, 2, 2, 2, 2, 0, 2, 2, 2])] == [5, 11]
    assert _stream([2, 2, 1.0, 2]) == []  # equal to the threshold does not exceed it
    assert [a.window_index for a in _stream([2, None, 2, 2])] == [3]  # an unjudged window neither counts nor breaks
    assert [a.window_index for a in _stream([2], consecutive=1)] == [0]
