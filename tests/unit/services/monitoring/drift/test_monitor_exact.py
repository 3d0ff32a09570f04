"""KS, its p-value, Wasserstein and PSI from a stored baseline against scipy/numpy on the raw values (1e-9).

Each case writes its own training data, builds and saves a baseline (so the values file round-trips), then
judges a window summarised the way ``monitor run`` does; the references are computed from the raw arrays.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from servekit.services.monitoring.baseline import store
from servekit.services.monitoring.baseline.build import build
from servekit.services.monitoring.config import BaselineConfig
from servekit.services.monitoring.drift.profiles import NumericProfile
from servekit.services.monitoring.drift.sketch import NumericSummary, summarise_numeric
from servekit.services.monitoring.drift.values import ValueSample, ecdf_error_bound

TOL = 1e-9


def _baseline(tmp: Path, values: np.ndarray, cfg: BaselineConfig | None = None) -> NumericProfile:
    pq.write_table(pa.table({"x": values}), tmp / "train.parquet")
    folder = store.save(build(str(tmp / "train.parquet"), cfg or BaselineConfig()), tmp / "base")
    profile = store.load_version(folder).profiles["x"]
    assert isinstance(profile, NumericProfile)
    return profile


def _window(profile: NumericProfile, values: np.ndarray, keep: int = 1_000_000) -> NumericSummary:
    group = np.zeros(len(values), np.int64)
    integral = profile.feature.inferred_type.value == "Integral"
    (s,) = summarise_numeric(
        pa.array(values), profile.binning, group, 1, integral, profile.summary.shift, keep, np.random.default_rng(7)
    )
    return s


def _psi_reference(profile: NumericProfile, ref: np.ndarray, cur: np.ndarray, eps: float = 1e-4) -> float:
    """PSI on the baseline's PSI bins, counted by numpy from the raw values: the bins are right-closed
    intervals cut at the last fine edge of each PSI group."""
    groups = profile.psi_groups
    cuts = profile.binning.edges[np.flatnonzero(np.diff(groups))]  # fine bin j ends at edge j
    r = np.bincount(np.searchsorted(cuts, ref, side="left"), minlength=len(cuts) + 1) / len(ref)
    c = np.bincount(np.searchsorted(cuts, cur, side="left"), minlength=len(cuts) + 1) / len(cur)
    r, c = np.where(r > 0, r, eps), np.where(c > 0, c, eps)
    return float(np.sum((c - r) * np.log(c / r)))


CASES = {
    # name: (baseline values, window values); sizes pick scipy's exact (both <= 10k) or asymptotic method
    "normal-small-exact-method": (lambda g: g.normal(0, 1, 4000), lambda g: g.normal(0.1, 1.2, 700)),
    "lognormal-large-asymp": (lambda g: g.lognormal(0, 1, 60_000), lambda g: g.lognormal(0.05, 1, 20_000)),
    "integers-with-ties": (lambda g: g.poisson(4, 9000).astype(float), lambda g: g.poisson(4.4, 3000).astype(float)),
    "integers-with-ties-large": (
        lambda g: g.poisson(6, 40_000).astype(float),
        lambda g: g.poisson(6.2, 15_000).astype(float),
    ),
    "tiny-window": (lambda g: g.standard_t(3, 5000), lambda g: g.standard_t(3, 12) + 0.5),
    "many-distinct-beyond-fine-bins": (lambda g: g.uniform(-5, 5, 30_000), lambda g: g.uniform(-4, 6, 9000)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_exact_statistics_equal_scipy(tmp_path: Path, case: str) -> None:
    rng = np.random.default_rng(sorted(CASES).index(case) + 11)
    make_ref, make_cur = CASES[case]
    ref, cur = make_ref(rng), make_cur(rng)
    profile = _baseline(tmp_path, ref)
    assert profile.values_exact
    window = _window(profile, cur)
    got = profile.compare(window)
    assert profile.approximation(window) is None
    expected = stats.ks_2samp(ref, cur, method="auto")
    assert got["ks_statistic"] == pytest.approx(expected.statistic, abs=TOL)
    assert got["ks_pvalue"] == pytest.approx(expected.pvalue, abs=TOL, rel=TOL)
    w = stats.wasserstein_distance(ref, cur) / np.std(ref)
    assert got["wasserstein_norm"] == pytest.approx(w, abs=TOL, rel=TOL)
    assert got["psi"] == pytest.approx(_psi_reference(profile, ref, cur), abs=TOL, rel=TOL)


def test_a_version_1_baseline_still_loads_and_is_marked_approximate(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    ref, cur = rng.normal(0, 1, 20_000), rng.normal(0.2, 1, 2000)
    profile = _baseline(tmp_path, ref)
    folder = tmp_path / "base" / "v0001"
    data = orjson.loads((folder / "baseline.json").read_bytes())
    data["format_version"] = 1  # what a baseline written before values were kept looks like
    for f in data["features"].values():
        f.pop("values_file", None)
        f.pop("values_exact", None)
    (folder / "baseline.json").write_bytes(orjson.dumps(data))
    old = store.load_version(folder).profiles["x"]
    assert isinstance(old, NumericProfile) and old.values is None
    window = _window(old, cur)
    got, approx = old.compare(window), old.approximation(window)
    assert approx is not None and approx["method"] == "bins"
    exact = stats.ks_2samp(ref, cur).statistic
    assert got["ks_statistic"] is not None
    assert got["ks_statistic"] <= exact + TOL <= got["ks_statistic"] + approx["ks_abs_error_bound"] + 2 * TOL
    assert profile.compare(window)["ks_statistic"] == pytest.approx(exact, abs=TOL)  # the v2 one is exact


def test_beyond_the_cap_a_uniform_sample_is_within_the_stated_bound(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    ref, cur = rng.normal(0, 1, 50_000), rng.normal(0.1, 1, 30_000)
    profile = _baseline(tmp_path, ref, BaselineConfig(sample_rows=5000))
    assert profile.values is not None and len(profile.values) == 5000 and not profile.values_exact
    window = _window(profile, cur, keep=4000)
    assert window.sample is not None and not window.sample.exact
    approx = profile.approximation(window)
    assert approx is not None and approx["method"] == "uniform_sample"
    assert approx["ks_abs_error_bound"] == pytest.approx(ecdf_error_bound(5000) + ecdf_error_bound(4000))
    got = profile.compare(window)
    exact = stats.ks_2samp(ref, cur)
    assert got["ks_statistic"] is not None
    assert abs(got["ks_statistic"] - exact.statistic) <= approx["ks_abs_error_bound"]
    # the p-value is the test's on the samples (the true sizes would overstate its precision)
    assert approx["sample_sizes"] == {"baseline": 5000, "window": 4000}
    on_samples = stats.ks_2samp(profile.values, window.sample.kept(), method="auto")
    assert got["ks_pvalue"] == pytest.approx(on_samples.pvalue, rel=1e-9)
    assert got["ks_statistic"] == pytest.approx(on_samples.statistic, abs=1e-12)


def test_bottom_k_samples_merge_into_the_sample_of_the_union() -> None:
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=3000), rng.normal(size=5000)
    ka, kb = rng.random(3000), rng.random(5000)
    left = ValueSample(a, ka, 3000, 1000)
    left.add(ValueSample(b, kb, 5000, 1000))
    whole = ValueSample(np.concatenate([a, b]), np.concatenate([ka, kb]), 8000, 1000)
    assert left.seen == 8000 and not left.exact
    assert np.array_equal(np.sort(left.kept()), np.sort(whole.kept()))
    small = ValueSample(a[:10], ka[:10], 10, 1000)
    small.add(ValueSample(b[:20], kb[:20], 20, 1000))
    assert small.exact and np.array_equal(np.sort(small.kept()), np.sort(np.concatenate([a[:10], b[:20]])))


def test_panes_add_up_to_the_window_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    ref, cur = rng.gamma(2, 1, 8000), rng.gamma(2.3, 1, 900)
    profile = _baseline(tmp_path, ref)
    group = (np.arange(len(cur)) % 3).astype(np.int64)  # three panes
    parts = summarise_numeric(
        pa.array(cur), profile.binning, group, 3, False, profile.summary.shift, 1_000_000, np.random.default_rng(1)
    )
    window = parts[0].copy()
    window += parts[1]
    window += parts[2]
    got = profile.compare(window)
    assert got["ks_pvalue"] == pytest.approx(stats.ks_2samp(ref, cur, method="auto").pvalue, abs=TOL, rel=TOL)
    assert (window - parts[0]).sample is None  # a difference's values are unknown: binned statistics then
