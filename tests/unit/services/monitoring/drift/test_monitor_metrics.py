"""Each drift metric against scipy or its direct formula, on fixed-seed synthetic data."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats
from scipy.spatial.distance import jensenshannon

from servekit.services.monitoring.drift import metrics
from servekit.services.monitoring.drift.sketch import Binning, NumericSummary, make_binning, summarise_numeric

SCENARIOS = {
    "no_drift": (0.0, 1.0),
    "small_mean_shift": (0.1, 1.0),
    "large_mean_shift": (2.0, 1.0),
    "variance_change": (0.0, 2.0),
}


def _summary(values: np.ndarray, binning: Binning) -> NumericSummary:
    return summarise_numeric(pa.array(values, pa.float64()), binning, np.zeros(len(values), np.int64), 1)[0]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_ks_on_values_that_sit_on_edges_equals_scipy(scenario: str) -> None:
    shift, scale = SCENARIOS[scenario]
    rng = np.random.default_rng(1)
    ref = np.round(rng.normal(0, 1, 3000) * 10)  # integers: every value is an edge, binning loses nothing
    cur = np.round(rng.normal(shift, scale, 700) * 10)
    binning = Binning(np.unique(np.concatenate([ref, cur])))
    d, p = metrics.ks_from_counts(_summary(ref, binning).counts, _summary(cur, binning).counts)  # type: ignore[misc]
    expected = stats.ks_2samp(ref, cur, method="asymp")
    assert d == pytest.approx(expected.statistic, abs=1e-12)
    assert p == pytest.approx(expected.pvalue, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_binned_ks_is_within_the_stated_bound_of_scipy(scenario: str) -> None:
    shift, scale = SCENARIOS[scenario]
    rng = np.random.default_rng(2)
    ref, cur = rng.normal(0, 1, 20_000), rng.normal(shift, scale, 2_000)
    binning = make_binning(ref, float(ref.min()), float(ref.max()), max_bins=500)
    ref_s = _summary(ref, binning)
    d, _ = metrics.ks_from_counts(ref_s.counts, _summary(cur, binning).counts)  # type: ignore[misc]
    exact = stats.ks_2samp(ref, cur).statistic
    resolution = ref_s.counts.max() / ref_s.present
    assert d <= exact + 1e-12
    assert exact <= d + resolution + 1e-12


def test_ks_orders_the_scenarios() -> None:
    rng = np.random.default_rng(3)
    ref = rng.normal(0, 1, 20_000)
    binning = make_binning(ref, float(ref.min()), float(ref.max()), 1000)
    ref_counts = _summary(ref, binning).counts
    d = {
        name: metrics.ks_from_counts(ref_counts, _summary(rng.normal(s, sc, 2000), binning).counts)[0]  # type: ignore[index]
        for name, (s, sc) in SCENARIOS.items()
    }
    assert d["no_drift"] < d["small_mean_shift"] < d["large_mean_shift"]
    assert d["no_drift"] < d["variance_change"]
    assert d["large_mean_shift"] > 0.6


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_wasserstein_within_one_bin_width_of_scipy(scenario: str) -> None:
    shift, scale = SCENARIOS[scenario]
    rng = np.random.default_rng(4)
    ref, cur = rng.normal(0, 1, 20_000), rng.normal(shift, scale, 3_000)
    binning = make_binning(ref, float(ref.min()), float(ref.max()), 1000)
    r, c = _summary(ref, binning), _summary(cur, binning)
    ours = metrics.wasserstein_from_bins(r.counts, r.sums, c.counts, c.sums, float(ref.std()))
    exact = stats.wasserstein_distance(ref, cur) / ref.std()
    inner_width = float(np.max(np.diff(binning.edges[(binning.edges > -2) & (binning.edges < 2)])))
    assert ours is not None
    assert abs(ours - exact) <= inner_width / ref.std() + 0.01 * exact + 1e-3


def test_wasserstein_exact_on_atoms_and_unnormalised_for_a_constant_reference() -> None:
    ref = np.array([0.0, 0.0, 1.0, 3.0])
    cur = np.array([1.0, 3.0, 3.0])
    binning = Binning(np.array([0.0, 1.0, 3.0]))
    r, c = _summary(ref, binning), _summary(cur, binning)
    w = metrics.wasserstein_from_bins(r.counts, r.sums, c.counts, c.sums, float(ref.std()))
    assert w == pytest.approx(stats.wasserstein_distance(ref, cur) / ref.std())
    const = np.full(10, 2.0)
    k = _summary(const, Binning(np.array([2.0])))
    moved = _summary(np.full(5, 4.0), Binning(np.array([2.0])))
    assert metrics.wasserstein_from_bins(k.counts, k.sums, moved.counts, moved.sums, 0.0) == pytest.approx(2.0)


def test_psi_is_the_direct_formula_with_epsilon_for_empty_bins() -> None:
    ref, cur = np.array([50, 30, 20, 0]), np.array([20, 30, 40, 10])
    r, c = ref / 100, cur / 100
    r = np.where(r > 0, r, 1e-4)
    expected = sum((ci - ri) * math.log(ci / ri) for ri, ci in zip(r, c, strict=True))
    assert metrics.psi(ref, cur) == pytest.approx(expected)
    assert metrics.psi(ref, ref) == 0.0
    assert metrics.psi(ref, np.zeros(4, np.int64)) is None


def test_psi_grows_with_the_shift_on_decile_bins() -> None:
    rng = np.random.default_rng(5)
    ref = rng.normal(0, 1, 50_000)
    edges = np.quantile(ref, np.linspace(0, 1, 11))[1:-1]

    def deciles(x: np.ndarray) -> np.ndarray:
        return np.bincount(np.searchsorted(edges, x), minlength=10)

    values = [metrics.psi(deciles(ref), deciles(rng.normal(s, 1, 5000))) for s in (0.0, 0.1, 0.5, 2.0)]
    assert values[0] < 0.005 < values[1] < values[2] < values[3]  # type: ignore[operator]


CATEGORICAL = {
    "no_drift": ([500, 300, 200], [250, 150, 100]),
    "proportion_shift": ([500, 300, 200], [100, 150, 250]),
    "unseen_category": ([500, 300, 200, 0], [200, 120, 80, 100]),
    "disjoint": ([10, 0], [0, 10]),
}


@pytest.mark.parametrize("scenario", sorted(CATEGORICAL))
def test_js_distance_base2_equals_scipy(scenario: str) -> None:
    ref, cur = (np.array(x, np.int64) for x in CATEGORICAL[scenario])
    assert metrics.js_distance(ref, cur) == pytest.approx(jensenshannon(ref / ref.sum(), cur / cur.sum(), base=2))


def test_js_distance_extremes() -> None:
    assert metrics.js_distance(np.array([5, 5]), np.array([1, 1])) == pytest.approx(0.0, abs=1e-12)
    assert metrics.js_distance(np.array([10, 0]), np.array([0, 10])) == pytest.approx(1.0)
    assert metrics.js_distance(np.array([1, 2]), np.array([0, 0])) is None


@pytest.mark.parametrize("scenario", sorted(CATEGORICAL))
def test_chi2_pvalue_equals_scipy_contingency(scenario: str) -> None:
    ref, cur = (np.array(x, np.int64) for x in CATEGORICAL[scenario])
    table = np.vstack([ref, cur])
    table = table[:, table.sum(axis=0) > 0]
    expected = stats.chi2_contingency(table, correction=False).pvalue
    assert metrics.chi2_pvalue(ref, cur) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_chi2_single_category_has_nothing_to_test() -> None:
    assert metrics.chi2_pvalue(np.array([5, 0]), np.array([3, 0])) == 1.0


def test_tiny_windows() -> None:
    ref = np.arange(100, dtype=float)
    binning = Binning(ref.copy())
    r = _summary(ref, binning)
    one = _summary(np.array([50.0]), binning)
    d, p = metrics.ks_from_counts(r.counts, one.counts)  # type: ignore[misc]
    assert d == pytest.approx(stats.ks_2samp(ref, [50.0], method="asymp").statistic)
    assert 0 < p <= 1
    empty = _summary(np.array([], dtype=float), binning)
    assert metrics.ks_from_counts(r.counts, empty.counts) is None
    assert metrics.wasserstein_from_bins(r.counts, r.sums, empty.counts, empty.sums, 1.0) is None


def test_missing_values_are_counted_not_binned() -> None:
    values = np.array([1.0, np.nan, 2.0, np.inf, -np.inf, 3.0])
    s = _summary(values, Binning(np.array([1.0, 2.0, 3.0])))
    assert s.present == 3
    assert s.missing == 3
    assert metrics.share(s.missing, s.rows) == pytest.approx(0.5)
    assert metrics.share(0, 0) is None
    assert metrics.finite_or_none(float("nan")) is None
