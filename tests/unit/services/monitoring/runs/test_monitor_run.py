"""Baseline → capture files → windows → alarms, violations and the report, in process on generated data."""

from __future__ import annotations

import csv
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from servekit.services.monitoring.baseline import store
from servekit.services.monitoring.baseline.build import build
from servekit.services.monitoring.baseline.store import BaselineError
from servekit.services.monitoring.config import BaselineConfig, MonitorConfig
from servekit.services.monitoring.runs import evaluate, report
from servekit.services.monitoring.runs.run import RunResult, run
from servekit.services.monitoring.stream.windows import parse_time
from servekit.testing.capture_files import feature_rows, synthetic_features, write_capture_files

T0 = parse_time("2026-11-30T00:00:00Z")
HOUR = 3600


def write_csv(path: Path, columns: dict[str, Any], extra: dict[str, list[Any]] | None = None) -> Path:
    data = {**columns, **(extra or {})}
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(list(data))
        for row in zip(*(list(v) for v in data.values()), strict=True):
            w.writerow(["" if v is None or (isinstance(v, float) and v != v) else v for v in row])
    return path


@pytest.fixture(scope="module")
def baseline_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("baseline")
    train = write_csv(tmp / "train.csv", synthetic_features(20_000, 1), {"label": [0, 1] * 10_000})
    root = tmp / "base"
    store.save(build(str(train), BaselineConfig(exclude=frozenset({"label"}))), root)
    return root


def hourly_capture(dest: Path, hours: int, rows: int, shift_of_hour: dict[int, float], encoding: str = "JSON") -> Path:
    records = []
    for h in range(hours):
        cols = synthetic_features(rows, 100 + h)
        cols["num_0"] = cols["num_0"] + shift_of_hour.get(h, 0.0)
        for i, row in enumerate(feature_rows(cols)):
            records.append((T0 + h * HOUR + i * (HOUR / rows), [row]))
    write_capture_files(dest, records, encoding=encoding)
    return dest


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory, baseline_dir: Path) -> RunResult:
    shifts = {4: 3.0, **dict.fromkeys(range(11, 20), 1.5)}  # a one-window spike, then a sustained shift from window 11
    cap = hourly_capture(tmp_path_factory.mktemp("cap"), 20, 400, shifts)
    return run(store.load(baseline_dir).baseline, str(cap), MonitorConfig(window=HOUR))


def test_twenty_windows_spike_is_drift_but_no_alarm_sustained_shift_alarms_on_third(stream: RunResult) -> None:
    assert [r.window.index for r in stream.windows] == list(range(20))
    assert all(r.status == "ok" and r.rows == 400 for r in stream.windows)
    drifted = [r.window.index for r in stream.windows if r.features["num_0"].drifted]
    assert 4 in drifted and set(range(11, 20)) <= set(drifted)
    assert {(a.feature, a.window_index) for a in stream.alarms} == {("num_0", 13)}
    # 400-row windows against a 10k-row baseline are judged by the KS test (Holm-corrected across features)
    assert all(r.features["num_0"].rule == "test" for r in stream.windows)
    assert "ks_pvalue" in {a.metric for a in stream.alarms}
    ks = next(a for a in stream.alarms if a.metric == "ks_pvalue")
    assert ks.value <= ks.threshold == MonitorConfig().alpha


def test_metrics_json_has_the_documented_shape(stream: RunResult) -> None:
    from servekit.services.monitoring.runs.outputs import metrics_json

    doc = orjson.loads(orjson.dumps(metrics_json(stream)))
    assert set(doc) == {"windows", "alarms", "warnings"}
    assert doc["warnings"] == []  # the capture's columns are the baseline's
    w = doc["windows"][13]
    assert set(w) == {"index", "start", "end", "rows", "status", "features"}
    assert (w["start"], w["end"]) == ("2026-11-30T13:00:00Z", "2026-11-30T14:00:00Z")
    num, cat = w["features"]["num_0"], w["features"]["cat_0"]
    assert (
        set(num) == set(cat) == {"type", "metrics", "thresholds", "drifted", "rule", "test", "data_quality", "approx"}
    )
    assert num["test"]["metric"] == "ks_pvalue" and cat["test"]["metric"] == "chi2_pvalue"
    assert num["approx"] is None  # exact values on both sides
    assert set(num["metrics"]) == {"ks_statistic", "ks_pvalue", "wasserstein_norm", "psi", "missing_share"}
    assert set(cat["metrics"]) == {"js_distance", "chi2_pvalue", "missing_share", "unseen_share"}
    assert num["type"] == "numerical" and cat["type"] == "categorical" and num["drifted"] is True
    assert set(doc["alarms"][0]) == {"feature", "window_index", "metric", "value", "threshold"}


def test_small_windows_are_insufficient_and_not_judged(tmp_path: Path, baseline_dir: Path) -> None:
    cap = hourly_capture(tmp_path / "cap", 4, 30, dict.fromkeys(range(4), 5.0))
    result = run(store.load(baseline_dir).baseline, str(cap), MonitorConfig(window=HOUR, consecutive=1))
    assert [r.status for r in result.windows] == ["insufficient"] * 4
    assert result.alarms == []
    assert all(not f.drifted for r in result.windows for f in r.features.values())
    assert result.windows[0].features["num_0"].metrics["ks_statistic"] is not None  # measured, just not judged
    ok = run(store.load(baseline_dir).baseline, str(cap), MonitorConfig(window=HOUR, consecutive=1, min_window_rows=30))
    assert [a.window_index for a in ok.alarms if a.feature == "num_0" and a.metric == "ks_pvalue"] == [0]


def test_sliding_windows_share_panes(tmp_path: Path, baseline_dir: Path) -> None:
    cap = hourly_capture(tmp_path / "cap", 6, 100, {})
    result = run(store.load(baseline_dir).baseline, str(cap), MonitorConfig(window=3 * HOUR, step=HOUR))
    assert [r.rows for r in result.windows] == [300, 300, 300, 300]
    assert [r.window.start - T0 for r in result.windows] == [0, HOUR, 2 * HOUR, 3 * HOUR]


def test_one_failing_feature_never_stops_the_others(
    tmp_path: Path, baseline_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = hourly_capture(tmp_path / "cap", 2, 200, {})
    baseline = store.load(baseline_dir).baseline
    broken = baseline.profiles["num_1"].binning  # type: ignore[union-attr]
    real = evaluate.summarise_numeric

    def flaky(col: Any, binning: Any, *args: Any, **kwargs: Any) -> Any:
        if binning is broken:
            raise RuntimeError("boom")
        return real(col, binning, *args, **kwargs)

    monkeypatch.setattr(evaluate, "summarise_numeric", flaky)
    result = run(baseline, str(cap), MonitorConfig(window=HOUR))
    for r in result.windows:
        assert r.errors == {"num_1": "RuntimeError: boom"}
        assert set(r.features) == {"num_0", "cat_0", "cat_1"}
        assert r.features["num_0"].metrics["ks_statistic"] is not None


def test_all_missing_and_wrong_type_columns_are_reported_not_fatal(tmp_path: Path, baseline_dir: Path) -> None:
    records = []
    for i in range(200):
        row = {"num_0": float(i % 7), "num_1": None, "cat_0": i % 3, "cat_1": "a", "extra": 1}
        if i % 2:
            row["num_0"] = "not a number"
        records.append((T0 + i, [row]))
    write_capture_files(tmp_path / "cap", records)
    result = run(store.load(baseline_dir).baseline, str(tmp_path / "cap"), MonitorConfig(window=HOUR))
    (w,) = result.windows
    assert w.errors == {}
    assert w.features["num_1"].metrics["missing_share"] == 1.0
    assert w.features["num_1"].metrics["ks_statistic"] is None
    assert w.features["cat_0"].metrics["unseen_share"] == 1.0
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in w.violations}
    assert ("num_0", "data_type_check") in checks
    assert ("num_1", "completeness_check") in checks
    assert ("cat_0", "categorical_values_check") in checks
    assert ("extra", "extra_column_check") in checks
    assert ("cat_0", "baseline_drift_check") in checks


def test_missing_column_is_a_violation(tmp_path: Path, baseline_dir: Path) -> None:
    records = [(T0 + i, [{"num_0": 0.1, "cat_0": "a", "cat_1": "b"}]) for i in range(150)]
    write_capture_files(tmp_path / "cap", records)
    (w,) = run(store.load(baseline_dir).baseline, str(tmp_path / "cap"), MonitorConfig(window=HOUR)).windows
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in w.violations}
    assert ("num_1", "missing_column_check") in checks
    assert not any(name == "num_0" and check == "missing_column_check" for name, check in checks)


def test_fixed_threshold_override_replaces_the_learned_one(tmp_path: Path, baseline_dir: Path) -> None:
    cap = hourly_capture(tmp_path / "cap", 1, 400, {0: 1.5})
    cfg = MonitorConfig(window=HOUR, overrides=(("num_0", "ks_statistic", 0.99),), judged_metrics=("ks_statistic",))
    (w,) = run(store.load(baseline_dir).baseline, str(cap), cfg).windows
    assert w.features["num_0"].thresholds == {"ks_statistic": 0.99}
    assert not w.features["num_0"].drifted


class _Sections(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.features: list[str] = []
        self.svgs = 0
        self.tags: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        a = dict(attrs)
        if tag == "section" and a.get("data-feature"):
            self.features.append(a["data-feature"] or "")
        if tag == "svg":
            self.svgs += 1
        for key in ("src", "href"):
            if a.get(key):
                self.links.append(a[key] or "")


def test_report_is_self_contained_with_drifted_features_first(stream: RunResult) -> None:
    page = report.render(stream, {"data": "cap", "baseline": "base", "baseline_version": "v0001"})
    parser = _Sections()
    parser.feed(page)
    assert parser.features[0] == "num_0"
    assert sorted(parser.features) == ["cat_0", "cat_1", "num_0", "num_1"]
    assert parser.svgs >= 2 * len(parser.features)
    assert "script" not in parser.tags
    assert all(link.startswith("#") for link in parser.links)
    assert "polyline" in page and "<rect" in page
    assert "judged by the Holm-corrected test" in page and "ks_pvalue Holm" in page and "approximate" not in page


def test_baseline_versions_fall_back_to_previous(tmp_path: Path) -> None:
    train = write_csv(tmp_path / "train.csv", synthetic_features(500, 2))
    root = tmp_path / "base"
    first = store.save(build(str(train), BaselineConfig()), root)
    second = store.save(build(str(train), BaselineConfig(k=2.0)), root)
    assert (first.name, second.name) == ("v0001", "v0002")
    assert (root / "CURRENT").read_text().strip() == "v0002"
    loaded = store.load(root)
    assert loaded.baseline.version == "v0002" and loaded.fallback_reason is None
    (second / "baseline.json").write_text("{not json")
    fallback = store.load(root)
    assert fallback.baseline.version == "v0001"
    assert fallback.fallback_reason is not None and "v0002" in fallback.fallback_reason
    assert store.load(first).baseline.version == "v0001"  # a version folder loads as given
    (first / "thresholds.json").unlink()
    with pytest.raises(BaselineError, match="v0001"):
        store.load(root)


def test_baseline_files_have_sagemaker_shapes(baseline_dir: Path) -> None:
    folder = baseline_dir / "v0001"
    stats = orjson.loads((folder / "statistics.json").read_bytes())
    cons = orjson.loads((folder / "constraints.json").read_bytes())
    assert stats["dataset"]["item_count"] == 20_000
    by_name = {f["name"]: f for f in stats["features"]}
    assert set(by_name) == {"num_0", "num_1", "cat_0", "cat_1"}  # label excluded
    num = by_name["num_0"]
    assert num["inferred_type"] == "Fractional"
    ns = num["numerical_statistics"]
    assert {"common", "mean", "sum", "std_dev", "min", "max", "distribution"} <= set(ns)
    assert len(ns["distribution"]["kll"]["buckets"]) == 10
    assert sum(b["count"] for b in ns["distribution"]["kll"]["buckets"]) == 20_000
    cat = by_name["cat_0"]["string_statistics"]
    assert cat["distinct_count"] == 3
    assert {b["value"] for b in cat["distribution"]["categorical"]["buckets"]} == {"a", "b", "c"}
    cf = {f["name"]: f for f in cons["features"]}
    assert cf["num_0"]["completeness"] == 1.0 and cf["num_0"]["num_constraints"] == {"is_non_negative": False}
    assert sorted(cf["cat_0"]["string_constraints"]["domains"]) == ["a", "b", "c"]
    assert cons["monitoring_config"]["distribution_constraints"]["comparison_threshold"] == 0.1
    th = orjson.loads((folder / "thresholds.json").read_bytes())["features"]
    assert set(th["num_0"]) == {"ks_statistic", "wasserstein_norm", "psi", "missing_share"}
    assert set(th["cat_0"]) == {"js_distance", "missing_share", "unseen_share"}
    assert th["num_0"]["ks_statistic"]["learned"] > 0


def test_baseline_type_inference(tmp_path: Path) -> None:
    train = write_csv(
        tmp_path / "t.csv",
        {"i": np.arange(300), "f": np.linspace(0, 1, 300), "s": ["x", "y", "z"] * 100, "code": [1, 2, 3] * 100},
    )
    b = build(str(train), BaselineConfig(categorical=frozenset({"code"})))
    kinds = {n: p.feature.inferred_type.value for n, p in b.profiles.items()}
    assert kinds == {"i": "Integral", "f": "Fractional", "s": "String", "code": "String"}
