"""Pure drift metrics over binned numerical summaries and categorical counts.

Everything here takes counts (never raw rows) so a window of any size costs the same. The formulas, their
epsilon and their NaN handling are stated in ``docs/monitoring.md``; the tests check each one against scipy or
the direct formula. A metric that cannot be computed (no present values on one side) is ``None``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats  # type: ignore[import-untyped]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PSI_EPSILON = 1e-4  # an empty bin's proportion is replaced by this (Evidently's choice) before the logarithm


def ks_from_counts(ref_counts: IntArray, cur_counts: IntArray) -> tuple[float, float] | None:
    """Two-sample KS statistic on a shared binning and its asymptotic two-sided p-value.

    ``counts[i]`` holds the values in bin ``i`` of the same edges; the statistic is the largest gap of the two
    empirical CDFs evaluated at the bin edges, so it is exact when every value sits on an edge and otherwise
    lies within ``[D, D + max reference bin share]`` of the raw-data statistic. The p-value is Smirnov's
    asymptotic distribution as scipy's ``ks_2samp(method="asymp")`` computes it: ``kstwo.sf(D, round(n·m/(n+m)))``.
    """
    n, m = int(ref_counts.sum()), int(cur_counts.sum())
    if n == 0 or m == 0:
        return None
    gaps = np.abs(np.cumsum(ref_counts) / n - np.cumsum(cur_counts) / m)
    d = float(min(1.0, gaps.max()))
    en = n * m / (n + m)
    p = float(np.clip(stats.kstwo.sf(d, np.round(en)), 0.0, 1.0))
    return d, p


AUTO_EXACT_MAX = 10_000  # ks_2samp(method="auto") uses the exact distribution while both sides are this small


def distances_from_values(ref: FloatArray, cur: FloatArray, ref_std: float) -> tuple[float, float, float]:
    """(KS statistic, its two-sided p-value, Wasserstein / ref std) of ``ref`` (sorted) against ``cur``, as
    ``scipy.stats.ks_2samp(ref, cur, method="auto")`` and ``scipy.stats.wasserstein_distance(ref, cur)`` give
    them.

    scipy picks the exact KS distribution when both sides have at most 10,000 values: then scipy is called
    as is. Beyond that it uses Smirnov's asymptotic one, ``kstwo.sf(D, round(n·m/(n+m)))``: then both distances
    come from one merge of the two sorted arrays (:func:`merged_distances`; scipy's searchsorted over both
    arrays, twice, costs ~4x more at 10⁶ values) and the p-value from that same scipy distribution. When a side
    is a uniform sample, these are the samples' (the caller says so). A constant reference (std 0) is not
    normalised.
    """
    n, m = len(ref), len(cur)
    scale = ref_std if ref_std > 0 else 1.0
    if max(n, m) <= AUTO_EXACT_MAX:
        result = stats.ks_2samp(ref, cur, method="auto")
        w = float(stats.wasserstein_distance(ref, cur))
        return float(result.statistic), float(result.pvalue), w / scale
    d, w = merged_distances(ref, cur)
    return d, float(np.clip(stats.kstwo.sf(d, np.round(n * m / (n + m))), 0.0, 1.0)), w / scale


def merged_distances(ref_sorted: FloatArray, cur: FloatArray) -> tuple[float, float]:
    """(KS statistic, W1) of two samples from one stable merge: both empirical CDFs at every point of the
    union, as scipy evaluates them (``searchsorted(..., side="right")`` over the sorted union). KS is the largest
    gap at the last of each run of equal values; W1 is ``Σ |F_ref - F_cur| · Δz`` in scipy's order (ties add 0)."""
    values = np.concatenate([ref_sorted, np.sort(cur)])
    order = np.argsort(values, kind="stable")  # two sorted runs: a linear merge
    z = values[order]
    below_ref = np.cumsum(order < len(ref_sorted))  # one cumsum: the rest up to each point are window values
    below_cur = np.arange(1, len(values) + 1) - below_ref
    gap = below_ref / len(ref_sorted) - below_cur / len(cur)
    last = np.append(z[1:] != z[:-1], True)
    return float(np.abs(gap[last]).max()), float(np.sum(np.abs(gap[:-1]) * np.diff(z)))


def binned_ks_error_bound(ref_counts: IntArray, cur_counts: IntArray) -> float:
    """How far the KS statistic at the bin edges can be below the raw-data one: between two edges each
    empirical CDF moves by at most its share of that bin, so ``D_raw <= D_edges + max_j max(r_j, c_j)``."""
    n, m = ref_counts.sum(), cur_counts.sum()
    if n == 0 or m == 0:
        return 1.0
    return float(max((ref_counts / n).max(), (cur_counts / m).max()))


def wasserstein_from_bins(
    ref_counts: IntArray, ref_sums: FloatArray, cur_counts: IntArray, cur_sums: FloatArray, ref_std: float
) -> float | None:
    """Earth mover's distance (W1) between two binned samples, divided by the reference standard deviation.

    Each non-empty bin becomes one atom at the mean of the values that fell in it (``sums / counts``), weighted
    by its count; W1 of the two weighted atom sets is exact for them and within one bin width of the raw-data
    distance. A constant reference (std 0) is not normalised (divided by 1).
    """
    if ref_counts.sum() == 0 or cur_counts.sum() == 0:
        return None
    ref_mask, cur_mask = ref_counts > 0, cur_counts > 0
    u = ref_sums[ref_mask] / ref_counts[ref_mask]
    v = cur_sums[cur_mask] / cur_counts[cur_mask]
    w = float(
        stats.wasserstein_distance(u, v, u_weights=ref_counts[ref_mask].astype(float), v_weights=cur_counts[cur_mask])
    )
    return w / ref_std if ref_std > 0 else w


def psi(ref_counts: IntArray, cur_counts: IntArray, epsilon: float = PSI_EPSILON) -> float | None:
    """Population stability index ``Σ (c_i - r_i) · ln(c_i / r_i)`` over shares, empty shares → ``epsilon``."""
    n, m = ref_counts.sum(), cur_counts.sum()
    if n == 0 or m == 0:
        return None
    r = np.where(ref_counts > 0, ref_counts / n, epsilon)
    c = np.where(cur_counts > 0, cur_counts / m, epsilon)
    return float(np.sum((c - r) * np.log(c / r)))


def js_distance(ref_counts: IntArray, cur_counts: IntArray) -> float | None:
    """Jensen-Shannon distance, base 2 (in [0, 1]): ``sqrt(½ KL(P‖M) + ½ KL(Q‖M))``, ``M = ½(P + Q)``.

    Both count vectors index the same categories (the union of both samples); ``0 · log 0 = 0``.
    """
    n, m = ref_counts.sum(), cur_counts.sum()
    if n == 0 or m == 0:
        return None
    p, q = ref_counts / n, cur_counts / m
    mid = (p + q) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_p = np.sum(np.where(p > 0, p * np.log2(p / mid), 0.0))
        kl_q = np.sum(np.where(q > 0, q * np.log2(q / mid), 0.0))
    return float(math.sqrt(max(0.0, (kl_p + kl_q) / 2)))


def chi2_pvalue(ref_counts: IntArray, cur_counts: IntArray) -> float | None:
    """Pearson's chi-square test of homogeneity on the 2xK table (no continuity correction).

    Categories empty in both samples are dropped; with a single category left there is nothing to test and
    the p-value is 1.0 (as ``scipy.stats.chi2_contingency`` reports for zero degrees of freedom).
    """
    n, m = ref_counts.sum(), cur_counts.sum()
    if n == 0 or m == 0:
        return None
    keep = (ref_counts + cur_counts) > 0
    table = np.vstack([ref_counts[keep], cur_counts[keep]]).astype(float)
    if table.shape[1] < 2:
        return 1.0
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = float(np.sum((table - expected) ** 2 / expected))
    return float(stats.chi2.sf(statistic, table.shape[1] - 1))


def share(part: int, total: int) -> float | None:
    return part / total if total > 0 else None


def finite_or_none(value: Any) -> float | None:
    """JSON has no NaN/inf: such values leave as ``None``."""
    if value is None:
        return None
    f = float(value)
    return f if math.isfinite(f) else None
