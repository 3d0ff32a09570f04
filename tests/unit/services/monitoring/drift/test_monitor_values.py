"""Bounded window values: exact samples hold no keys (8 bytes a value), keys are drawn only when a sample has to
choose, panes that outgrow the cap still add up to a uniform sample of the window, and a sampled window's KS
p-value is the test's on the samples, so no-drift windows are not flagged more often than alpha says."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import stats

from servekit.services.monitoring.baseline import store
from servekit.services.monitoring.baseline.build import build
from servekit.services.monitoring.config import BaselineConfig
from servekit.services.monitoring.drift.profiles import NumericProfile
from servekit.services.monitoring.drift.sketch import summarise_numeric
from servekit.services.monitoring.drift.values import ValueSample, ecdf_error_bound


def test_an_exact_sample_holds_values_only_and_draws_keys_when_it_must_choose() -> None:
    rng = np.random.default_rng(1)
    a = ValueSample.of(rng.normal(size=400), rng, cap=1000)
    assert a.keys is None and a.exact and a.nbytes == 400 * 8
    a.add(ValueSample.of(rng.normal(size=500), rng, cap=1000))
    assert a.keys is None and a.exact and a.nbytes == 900 * 8  # 900 <= cap: still every value, no keys
    a.add(ValueSample.of(rng.normal(size=1200), rng, cap=1000))  # 2100 > 2 x cap: pruned, keys drawn
    assert a.keys is not None and not a.exact and a.seen == 2100
    assert len(a.kept()) == 1000 and a.nbytes == 1000 * 16


def test_panes_beyond_the_cap_add_up_to_a_uniform_sample_of_the_window() -> None:
    rng = np.random.default_rng(2)
    panes = [rng.normal(loc=i / 3, size=1500) for i in range(6)]  # each pane its own distribution
    window = ValueSample.empty(2000)
    for values in panes:
        window.add(ValueSample.of(values, rng, cap=2000))  # exact, keyless panes: keys drawn at the third
    whole = np.concatenate(panes)
    kept = window.kept()
    assert len(kept) == 2000 and window.seen == len(whole)
    assert np.isin(kept, whole).all() and len(np.unique(kept)) == 2000  # a sample without replacement
    # the sample's CDF within the DKW bound of the window's (a biased merge would favour some panes)
    assert stats.ks_2samp(kept, whole).statistic <= ecdf_error_bound(2000)


def test_sampled_windows_without_drift_are_flagged_at_about_alpha(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    pq.write_table(pa.table({"x": rng.normal(size=50_000)}), tmp_path / "train.parquet")
    folder = store.save(build(str(tmp_path / "train.parquet"), BaselineConfig()), tmp_path / "base")
    profile = store.load_version(folder).profiles["x"]
    assert isinstance(profile, NumericProfile) and profile.values_exact
    pvalues = []
    for _ in range(200):  # 200 no-drift windows of 40,000 rows, each kept as a 1,000-value sample
        cur = rng.normal(size=40_000)
        (window,) = summarise_numeric(
            pa.array(cur), profile.binning, np.zeros(len(cur), np.int64), 1, False, profile.summary.shift, 1000, rng
        )
        assert window.sample is not None and not window.sample.exact
        p = profile.compare(window)["ks_pvalue"]
        assert p is not None
        pvalues.append(p)
    # valid p-values are uniform: about 1% under 0.01 (with the true sizes, most of these windows read as drift)
    assert np.mean(np.asarray(pvalues) < 0.01) <= 0.04
    assert stats.kstest(pvalues, "uniform").pvalue > 1e-3
