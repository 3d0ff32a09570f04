"""Per-feature thresholds learned from the baseline itself, and how a window's size adjusts them.

The baseline is split into ``chunks`` random parts; every drift metric of each part is computed against the
rest of the baseline, and the threshold is ``mean + k·std`` (sample std) of those values, NannyML's rule.
Those chunk values are what "no drift" looks like for a sample of about ``chunk_rows`` rows. A window with
fewer rows is noisier, so its threshold is widened by the ratio of effective sample sizes
``r = n_eff(chunk, rest) / n_eff(window, baseline)`` (``n_eff(a, b) = a·b / (a + b)``), and never narrowed:
distances whose null spread shrinks like ``1/sqrt(n)`` (KS, Wasserstein, Jensen-Shannon) are multiplied by
``sqrt(r)``, PSI (chi-square-like, ``1/n``) by ``r``, and for the two shares only the ``k·std`` margin is
widened by ``sqrt(r)`` and it is at least ``SHARE_MARGIN``. KS never goes below its critical value at
alpha = 0.001 for the window's size. A fixed threshold replaces all of this.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

NUMERICAL_METRICS = ("ks_statistic", "ks_pvalue", "wasserstein_norm", "psi", "missing_share")
CATEGORICAL_METRICS = ("js_distance", "chi2_pvalue", "missing_share", "unseen_share")
# Metrics judged against a threshold; p-values are reported only (at baseline sizes they are ~0 for any shift).
JUDGED_METRICS = ("ks_statistic", "wasserstein_norm", "psi", "js_distance", "missing_share", "unseen_share")
_SCALING = {
    "ks_statistic": "sqrt",
    "wasserstein_norm": "sqrt",
    "js_distance": "sqrt",
    "psi": "linear",
    "missing_share": "margin",
    "unseen_share": "margin",
}
SHARE_MARGIN = 0.01  # a share must exceed its baseline mean by at least one percentage point
# The KS threshold never drops below the two-sample Kolmogorov critical value at alpha = 0.001,
# c(alpha) / sqrt(n_eff) with c = sqrt(-ln(alpha / 2) / 2): ten baseline chunks estimate a std too noisily to
# be trusted alone in the tail, and an undrifted window must not cross a threshold that tight by chance.
KS_FLOOR_ALPHA = 0.001
KS_FLOOR_C = math.sqrt(-math.log(KS_FLOOR_ALPHA / 2) / 2)


@dataclass(frozen=True, slots=True)
class Threshold:
    metric: str
    mean: float
    std: float
    k: float
    chunk_rows: float
    rest_rows: float
    fixed: float | None = None

    @property
    def learned(self) -> float:
        return self.mean + self.k * self.std

    def for_window(self, window_rows: int, baseline_rows: int) -> float | None:
        """The threshold a window of ``window_rows`` rows is judged against (None: not judged)."""
        if self.fixed is not None:
            return self.fixed
        if not (math.isfinite(self.mean) and math.isfinite(self.std)) or window_rows <= 0 or baseline_rows <= 0:
            return None
        ratio = max(1.0, _n_eff(self.chunk_rows, self.rest_rows) / _n_eff(window_rows, baseline_rows))
        rule = _SCALING[self.metric]
        if self.metric == "ks_statistic":
            floor = KS_FLOOR_C / math.sqrt(_n_eff(window_rows, baseline_rows))
            return max(self.learned * math.sqrt(ratio), floor)
        if rule == "sqrt":
            return self.learned * math.sqrt(ratio)
        if rule == "linear":
            return self.learned * ratio
        return self.mean + max(self.k * self.std * math.sqrt(ratio), SHARE_MARGIN)

    def with_fixed(self, value: float | None) -> Threshold:
        return Threshold(self.metric, self.mean, self.std, self.k, self.chunk_rows, self.rest_rows, value)

    def to_json(self) -> dict[str, Any]:
        return {
            "mean": _num(self.mean),
            "std": _num(self.std),
            "k": self.k,
            "learned": _num(self.learned),
            "chunk_rows": self.chunk_rows,
            "rest_rows": self.rest_rows,
            "fixed": self.fixed,
        }

    @classmethod
    def from_json(cls, metric: str, data: Mapping[str, Any]) -> Threshold:
        nan = float("nan")
        mean, std = data.get("mean"), data.get("std")
        return cls(
            metric,
            nan if mean is None else float(mean),
            nan if std is None else float(std),
            float(data["k"]),
            float(data["chunk_rows"]),
            float(data["rest_rows"]),
            None if data.get("fixed") is None else float(data["fixed"]),
        )


def learn(
    metric: str, chunk_values: Iterable[float | None], chunk_rows: float, rest_rows: float, k: float
) -> Threshold:
    """``mean + k·std`` over the chunk values that could be computed (NaN when none could); the sample std
    (ddof=1), since a handful of chunks understates the spread."""
    values = np.array([v for v in chunk_values if v is not None and math.isfinite(v)], dtype=float)
    if len(values) == 0:
        return Threshold(metric, float("nan"), float("nan"), k, chunk_rows, rest_rows)
    std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
    return Threshold(metric, float(values.mean()), std, k, chunk_rows, rest_rows)


def parse_override(text: str) -> tuple[str, str, float]:
    """``FEATURE.METRIC=VALUE`` (the feature name may itself contain dots; the metric is after the last one)."""
    key, sep, value = text.partition("=")
    feature, dot, metric = key.rpartition(".")
    if not sep or not dot or not feature or metric not in JUDGED_METRICS:
        raise ValueError(
            f"bad threshold {text!r}: expected FEATURE.METRIC=VALUE with METRIC one of {', '.join(JUDGED_METRICS)}"
        )
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"bad threshold {text!r}: {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"bad threshold {text!r}: must be a finite number >= 0")
    return feature, metric, number


def _n_eff(a: float, b: float) -> float:
    return a * b / (a + b) if a > 0 and b > 0 else 0.0


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None
