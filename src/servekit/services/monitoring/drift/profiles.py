"""What the baseline remembers of each feature, and how a summary is compared with it.

A profile is everything needed to judge new data without the training data: the fixed binning and the
baseline's own summary for a numerical feature; the category domain and its counts for a categorical one.
``compare`` turns a (window or chunk) summary into the drift metrics of ``metrics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]

from servekit.services.monitoring.drift import metrics as m
from servekit.services.monitoring.drift.schema import Feature, Kind
from servekit.services.monitoring.drift.sketch import Binning, CategoricalSummary, NumericSummary
from servekit.services.monitoring.drift.thresholds import Threshold
from servekit.services.monitoring.drift.values import DKW_DELTA, ecdf_error_bound

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Metrics = dict[str, float | None]


@dataclass(frozen=True, slots=True)
class NumericProfile:
    feature: Feature
    binning: Binning
    summary: NumericSummary  # the whole baseline
    psi_groups: IntArray  # PSI bin of each fine bin
    minimum: float
    maximum: float
    buckets: tuple[tuple[float, float, int], ...]  # 10 equal-width buckets (statistics.json)
    # The baseline's present values, sorted: all of them (exact statistics) or a uniform sample of them; None
    # for a baseline written before values were kept (format version 1): then statistics come from the bins.
    values: FloatArray | None = None

    @property
    def values_exact(self) -> bool:
        return self.values is not None and len(self.values) == self.summary.present

    def empty(self, keep_values: int = 0) -> NumericSummary:
        return NumericSummary.empty(self.binning.size, self.summary.shift, keep_values)

    def _uses_values(self, cur: NumericSummary) -> bool:
        return self.values is not None and len(self.values) > 0 and cur.sample is not None and cur.present > 0

    def compare(self, cur: NumericSummary, ref: NumericSummary | None = None) -> Metrics:
        """Metrics of ``cur`` against ``ref`` (default: the whole baseline). Against the whole baseline, KS
        and Wasserstein come from the values when both sides kept them (see :meth:`approximation`); PSI and
        the missing share are exact from the counts either way."""
        exact = ref is None and self._uses_values(cur)
        metrics = self._binned(cur, self.summary if ref is None else ref, distances=not exact)
        if exact:
            assert self.values is not None and cur.sample is not None
            # On samples, the p-value is the test's on the samples (their sizes): a uniform sample of each side is
            # an iid draw of it, so the test stays valid; the true sizes would claim a precision the samples lack
            # (KS off by up to ``ks_abs_error_bound`` judged as if from every row: false alarms).
            d, p, w = m.distances_from_values(self.values, cur.sample.kept(), self.summary.std())
            metrics["ks_statistic"], metrics["ks_pvalue"], metrics["wasserstein_norm"] = d, p, w
        return metrics

    def approximation(self, cur: NumericSummary) -> dict[str, Any] | None:
        """None when KS, its p-value and Wasserstein are exact for ``cur``; else how they were approximated and
        a bound on the KS statistic's absolute error."""
        if self._uses_values(cur):
            assert self.values is not None and cur.sample is not None
            sampled = [len(self.values)] if not self.values_exact else []
            sampled += [len(cur.sample.kept())] if not cur.sample.exact else []
            if not sampled:
                return None
            return {
                "method": "uniform_sample",
                "ks_abs_error_bound": sum(ecdf_error_bound(k) for k in sampled),
                "confidence": 1 - DKW_DELTA * len(sampled),
                "sample_sizes": {"baseline": len(self.values), "window": len(cur.sample.kept())},
            }
        if cur.present == 0 or self.summary.present == 0:
            return None
        return {"method": "bins", "ks_abs_error_bound": m.binned_ks_error_bound(self.summary.counts, cur.counts)}

    def _binned(self, cur: NumericSummary, ref: NumericSummary, distances: bool = True) -> Metrics:
        """Metrics from the bins; KS and Wasserstein only with ``distances`` (else the caller has exact ones)."""
        ks = m.ks_from_counts(ref.counts, cur.counts) if distances else None
        groups = int(self.psi_groups.max()) + 1
        std = self.summary.std()
        return {
            "ks_statistic": ks[0] if ks else None,
            "ks_pvalue": ks[1] if ks else None,
            "wasserstein_norm": m.wasserstein_from_bins(ref.counts, ref.sums, cur.counts, cur.sums, std)
            if distances
            else None,
            "psi": m.psi(
                np.bincount(self.psi_groups, weights=ref.counts, minlength=groups).astype(np.int64),
                np.bincount(self.psi_groups, weights=cur.counts, minlength=groups).astype(np.int64),
            ),
            "missing_share": m.share(cur.missing, cur.rows),
        }


@dataclass(frozen=True, slots=True)
class CategoricalProfile:
    feature: Feature
    domain: tuple[str, ...]  # most frequent first
    complete: bool  # False: the baseline had more categories than were kept
    summary: CategoricalSummary
    distinct: int  # distinct values in the baseline (may exceed len(domain))
    domain_array: pa.Array = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "domain_array", pa.array(list(self.domain), pa.string()))

    def empty(self) -> CategoricalSummary:
        return CategoricalSummary.empty(len(self.domain))

    def compare(self, cur: CategoricalSummary) -> Metrics:
        tracked = np.array(list(cur.unseen.values()), dtype=np.int64)
        rest = cur.unseen_total - int(tracked.sum())
        extra = len(tracked) + 1
        ref_counts = np.concatenate([self.summary.counts, np.zeros(extra, np.int64)])
        cur_counts = np.concatenate([cur.counts, tracked, [rest]])
        return categorical_metrics(
            ref_counts, cur_counts, cur.missing, cur.rows, cur.unseen_total if self.complete else None
        )


def categorical_metrics(
    ref_counts: IntArray, cur_counts: IntArray, cur_missing: int, cur_rows: int, unseen: int | None
) -> Metrics:
    present = int(cur_counts.sum())
    return {
        "js_distance": m.js_distance(ref_counts, cur_counts),
        "chi2_pvalue": m.chi2_pvalue(ref_counts, cur_counts),
        "missing_share": m.share(cur_missing, cur_rows),
        "unseen_share": None if unseen is None else m.share(unseen, present),
    }


Profile = NumericProfile | CategoricalProfile


@dataclass(frozen=True, slots=True)
class Baseline:
    columns: tuple[str, ...]  # feature order, used to name positional (list or CSV) rows
    rows: int
    profiles: Mapping[str, Profile]
    thresholds: Mapping[str, Mapping[str, Threshold]]
    constraints: Mapping[str, Any]  # constraints.json as found (users may edit it)
    statistics: Mapping[str, Any]
    version: str = ""

    def kind(self, feature: str) -> Kind:
        return self.profiles[feature].feature.kind
