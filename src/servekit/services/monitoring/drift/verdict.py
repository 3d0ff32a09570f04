"""Which rule judges a window, and the multiple-testing correction across its features.

Small samples are judged by statistical tests, large ones by effect sizes. A learned effect-size threshold is
``mean + k·std`` of ten baseline chunks, i.e. of samples of ``rows/10`` rows; for a small window it has to be
widened so much (the null spread grows like ``1/sqrt(n)``) that clear shifts pass under it, while a test's
null distribution is known exactly at any size. At large sizes the opposite holds: a test rejects for shifts
too small to matter (a mean shift of 0.02 std at 10⁶ rows), so the effect size must decide. The switch is at
``n_eff(window rows, baseline rows) = LARGE_N_EFF``, with ``n_eff(a, b) = a·b/(a + b)`` the size that sets a
two-sample statistic's null spread.

Each feature contributes one p-value (KS for numerical features, chi-square for categorical ones) and the
window's p-values are corrected together with Holm's step-down method at the family level ``alpha``. Holm
controls the family-wise error rate: the chance that a window with no drift flags *any* feature is at most
``alpha``, whatever the dependence between features; Benjamini-Hochberg would only bound the expected share of
false flags among the flagged features, which allows more false windows once one feature really drifts.
In the effect-size regime a feature drifts only if its test also rejects, so false alarms stay bounded by
``alpha`` there too; at those sizes any shift worth flagging rejects anyway.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

LARGE_N_EFF = 10_000  # from here on effect sizes decide: a KS test at alpha 0.01 then flags D >= 0.016
ALPHA = 0.005  # family-wise false-alarm rate per window: half the 1% goal, so a measured rate stays under it
TEST_METRIC = {"numerical": "ks_pvalue", "categorical": "chi2_pvalue"}
MAIN_DISTANCE = {"numerical": "ks_statistic", "categorical": "js_distance"}  # a fixed threshold here replaces the test


def n_eff(a: float, b: float) -> float:
    return a * b / (a + b) if a > 0 and b > 0 else 0.0


def regime(window_rows: int, baseline_rows: int) -> str:
    """``"test"`` (statistical tests decide) or ``"effect"`` (effect sizes against learned thresholds)."""
    return "effect" if n_eff(window_rows, baseline_rows) >= LARGE_N_EFF else "test"


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm-adjusted p-values: ``max over j <= i of min(1, (F - j + 1) · p_(j))`` for the i-th smallest of F.
    A feature is rejected at family level ``alpha`` when its adjusted p-value is <= ``alpha``."""
    names = sorted(pvalues, key=lambda n: (pvalues[n], n))
    if not names:
        return {}
    p = np.array([pvalues[n] for n in names], dtype=float)
    f = len(p)
    adjusted = np.minimum(1.0, np.maximum.accumulate((f - np.arange(f)) * p))
    return {n: float(a) for n, a in zip(names, adjusted, strict=True)}
