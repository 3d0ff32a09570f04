"""Panes in, judged windows out: summarising batches per pane and judging a window against the baseline.

One feature's failure (a value the converters did not foresee, a metric raising) is caught where that
feature is handled and recorded as that feature's error; the other features of the window go on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]

from servekit.services.monitoring.alerts.alarms import Judgement, Key
from servekit.services.monitoring.baseline import statistics_constraints
from servekit.services.monitoring.config import MonitorConfig
from servekit.services.monitoring.drift import verdict, violations
from servekit.services.monitoring.drift.profiles import Baseline, CategoricalProfile, Metrics, NumericProfile
from servekit.services.monitoring.drift.schema import InferredType, Kind
from servekit.services.monitoring.drift.sketch import (
    CategoricalSummary,
    NumericSummary,
    summarise_categorical,
    summarise_numeric,
)
from servekit.services.monitoring.drift.values import EXACT_VALUES
from servekit.services.monitoring.stream.windows import Window

log = logging.getLogger(__name__)

Summary = NumericSummary | CategoricalSummary
IntArray = npt.NDArray[np.int64]
REPORT_CATEGORIES = 12
QUALITY_METRICS = ("missing_share",)  # data quality, reported apart from distribution drift
Exceedance = tuple[str, float, float]  # (metric, value, threshold); for a test (p-value metric, Holm p, alpha)


@dataclass(slots=True)
class Pane:
    rows: int = 0
    columns: set[str] = field(default_factory=set)
    summaries: dict[str, Summary] = field(default_factory=dict)

    def add(self, other: Pane) -> None:
        self.rows += other.rows
        self.columns |= other.columns
        for name, s in other.summaries.items():
            mine = self.summaries.get(name)
            if mine is None:
                self.summaries[name] = s.copy()
            else:
                mine += s  # type: ignore[operator]  # same feature, same summary type


@dataclass(frozen=True, slots=True)
class Histogram:
    labels: tuple[str, ...]
    baseline: tuple[float, ...]  # shares
    window: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class TestResult:
    """The feature's two-sample test in this window and its Holm-adjusted p-value across the window's features."""

    metric: str  # "ks_pvalue" | "chi2_pvalue"
    pvalue: float
    adjusted: float
    alpha: float

    @property
    def rejected(self) -> bool:
        return self.adjusted <= self.alpha

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "pvalue": self.pvalue, "holm_pvalue": self.adjusted, "alpha": self.alpha}


@dataclass(frozen=True, slots=True)
class FeatureResult:
    kind: Kind
    metrics: Metrics
    thresholds: dict[str, float]
    exceeded: tuple[Exceedance, ...]  # what made the feature drift (distribution only)
    histogram: Histogram | None
    quality: tuple[Exceedance, ...] = ()  # data-quality exceedances (missing share)
    test: TestResult | None = None
    rule: str = "effect"  # "test" | "effect": see ``verdict``
    approx: dict[str, Any] | None = None  # None: KS, its p-value and Wasserstein are exact

    @property
    def drifted(self) -> bool:
        return bool(self.exceeded)


@dataclass(frozen=True, slots=True)
class WindowResult:
    window: Window
    rows: int
    status: str  # "ok" | "insufficient"
    features: dict[str, FeatureResult]
    errors: dict[str, str]
    violations: list[dict[str, str]]

    def judgements(self) -> dict[Key, Judgement]:
        if self.status != "ok":
            return {}
        out = {}
        for name, f in self.features.items():
            flagged = {e[0] for e in (*f.exceeded, *f.quality)}
            for metric, limit in f.thresholds.items():
                value = f.metrics.get(metric)
                if value is not None:
                    out[(name, metric)] = Judgement(value, limit, metric in flagged)
            if f.test is not None:
                out[(name, f.test.metric)] = Judgement(f.test.adjusted, f.test.alpha, f.test.metric in flagged)
        return out


def accumulate(
    panes: dict[int, Pane],
    baseline: Baseline,
    table: pa.Table,
    pane_ids: IntArray,
    errors: dict[str, str],
    keep_values: int = EXACT_VALUES,
    rng: np.random.Generator | None = None,
) -> None:
    """Add a batch's rows (``pane_ids[i]`` is row i's pane) to the pane summaries of every baseline feature.
    Numerical panes keep up to ``keep_values`` values each (then a uniform sample) for exact statistics."""
    keys, local = np.unique(pane_ids, return_inverse=True)
    local = local.astype(np.int64)
    groups = len(keys)
    row_counts = np.bincount(local, minlength=groups)
    targets = [panes.setdefault(int(k), Pane()) for k in keys]
    for pane, n in zip(targets, row_counts.tolist(), strict=True):
        pane.rows += n
        pane.columns.update(table.column_names)
    for name, profile in baseline.profiles.items():
        col = table.column(name) if name in table.column_names else pa.nulls(table.num_rows)
        try:
            parts: list[Summary]
            if isinstance(profile, NumericProfile):
                integral = profile.feature.inferred_type is InferredType.INTEGRAL
                parts = list(
                    summarise_numeric(
                        col, profile.binning, local, groups, integral, profile.summary.shift, keep_values, rng
                    )
                )
            else:
                parts = list(summarise_categorical(col, profile.domain_array, profile.complete, local, groups))
        except Exception as exc:  # one feature's failure never stops the others
            errors.setdefault(name, f"{type(exc).__name__}: {exc}")
            log.warning("feature %s: cannot summarise a batch: %s", name, exc)
            continue
        for pane, part in zip(targets, parts, strict=True):
            mine = pane.summaries.get(name)
            if mine is None:
                pane.summaries[name] = part
            else:
                mine += part  # type: ignore[operator]


def merge(panes: Mapping[int, Pane], keys: range) -> Pane:
    out = Pane()
    for k in keys:
        p = panes.get(k)
        if p is not None:
            out.add(p)
    return out


def evaluate(
    baseline: Baseline, window: Window, pane: Pane, cfg: MonitorConfig, feature_errors: Mapping[str, str] | None = None
) -> WindowResult:
    feature_errors = feature_errors or {}
    status = "ok" if pane.rows >= cfg.min_window_rows else "insufficient"
    overrides = {(f, m): v for f, m, v in cfg.overrides}
    measured: dict[str, _Measured] = {}
    errors: dict[str, str] = {}
    for name in baseline.profiles:
        if name in feature_errors:
            errors[name] = feature_errors[name]
            continue
        try:
            measured[name] = _measure(baseline, name, pane, cfg, overrides)
        except Exception as exc:  # one feature's failure never stops the others
            errors[name] = f"{type(exc).__name__}: {exc}"
            log.warning("feature %s, window %d: %s", name, window.index, exc)
    # A feature's test stands for its main distance: with ``--metrics`` leaving that distance out, no test.
    pvalues = {
        n: p
        for n, x in measured.items()
        if verdict.MAIN_DISTANCE[x.kind.value] in cfg.judged_metrics
        and (p := x.metrics.get(verdict.TEST_METRIC[x.kind.value])) is not None
    }
    adjusted = verdict.holm(pvalues)
    rule = verdict.regime(pane.rows, baseline.rows)
    features = {
        name: _verdict(x, name, adjusted, cfg.alpha, rule, judged=status == "ok") for name, x in measured.items()
    }
    found = violations.check(
        baseline.constraints or statistics_constraints.constraints(baseline),
        {n: pane.summaries[n] for n in features if n in pane.summaries},
        pane.columns if pane.rows else set(baseline.profiles),
        {n: list(f.exceeded) for n, f in features.items()},
        {n: p.domain for n, p in baseline.profiles.items() if isinstance(p, CategoricalProfile)},
    )
    return WindowResult(window, pane.rows, status, features, errors, found if pane.rows else [])


@dataclass(frozen=True, slots=True)
class _Measured:
    kind: Kind
    metrics: Metrics
    limits: dict[str, float]
    fixed: frozenset[str]  # metrics whose threshold the user fixed: judged as given under either rule
    histogram: Histogram
    approx: dict[str, Any] | None


def _measure(
    baseline: Baseline, name: str, pane: Pane, cfg: MonitorConfig, overrides: Mapping[tuple[str, str], float]
) -> _Measured:
    profile = baseline.profiles[name]
    summary = pane.summaries.get(name)
    approx = None
    if isinstance(profile, NumericProfile):
        if summary is None:
            summary = profile.empty(cfg.window_values)
        assert isinstance(summary, NumericSummary)
        metrics = profile.compare(summary)
        approx = profile.approximation(summary)
        histogram = _numeric_histogram(profile, summary)
    else:
        if summary is None:
            summary = profile.empty()
        assert isinstance(summary, CategoricalSummary)
        metrics = profile.compare(summary)
        histogram = _categorical_histogram(profile, summary)
    limits: dict[str, float] = {}
    fixed: set[str] = set()
    for metric in cfg.judged_metrics:
        if metric not in metrics:
            continue
        learned = baseline.thresholds.get(name, {}).get(metric)
        limit = overrides.get((name, metric))
        if limit is not None or (learned is not None and learned.fixed is not None):
            fixed.add(metric)
        if limit is None and learned is not None:
            limit = learned.for_window(pane.rows, baseline.rows)
        if limit is not None:
            limits[metric] = limit
    return _Measured(profile.feature.kind, metrics, limits, frozenset(fixed), histogram, approx)


def _verdict(
    x: _Measured, name: str, adjusted: Mapping[str, float], alpha: float, rule: str, judged: bool
) -> FeatureResult:
    """Drift: under the "test" rule, the Holm-corrected test rejects; under the "effect" rule, an effect size
    exceeds its learned threshold and the test rejects too (or there is no test). A user-fixed threshold counts
    under both rules, and a fixed threshold on the feature's main distance (``ks_statistic``, ``js_distance``)
    replaces its test. The missing share is data quality, never drift."""
    test_metric = verdict.TEST_METRIC[x.kind.value]
    replaced = verdict.MAIN_DISTANCE[x.kind.value] in x.fixed
    p = x.metrics.get(test_metric)
    test = TestResult(test_metric, p, adjusted[name], alpha) if p is not None and name in adjusted else None
    over = [
        (metric, value, limit)
        for metric, limit in x.limits.items()
        if judged and (value := x.metrics.get(metric)) is not None and value > limit
    ]
    quality = tuple(e for e in over if e[0] in QUALITY_METRICS)
    effect = [e for e in over if e[0] not in QUALITY_METRICS]
    drift = [e for e in effect if e[0] in x.fixed]
    if judged and rule == "test" and test is not None and test.rejected and not replaced:
        drift.append((test.metric, test.adjusted, test.alpha))
    if rule == "effect" and (test is None or test.rejected or replaced):
        drift.extend(e for e in effect if e[0] not in x.fixed)
    return FeatureResult(x.kind, x.metrics, x.limits, tuple(drift), x.histogram, quality, test, rule, x.approx)


def _shares(counts: IntArray) -> tuple[float, ...]:
    total = counts.sum()
    return tuple((counts / total).tolist()) if total else tuple(0.0 for _ in counts)


def _numeric_histogram(profile: NumericProfile, s: NumericSummary) -> Histogram:
    groups = int(profile.psi_groups.max()) + 1
    ref = np.bincount(profile.psi_groups, weights=profile.summary.counts, minlength=groups)
    cur = np.bincount(profile.psi_groups, weights=s.counts, minlength=groups)
    edges = profile.binning.edges
    labels = []
    for g in range(groups):
        bins = np.flatnonzero(profile.psi_groups == g)
        lo = "-inf" if bins[0] == 0 else f"{edges[bins[0] - 1]:.4g}"
        hi = "+inf" if bins[-1] >= len(edges) else f"{edges[bins[-1]]:.4g}"
        labels.append(f"({lo}, {hi}]")
    return Histogram(tuple(labels), _shares(ref), _shares(cur))


def _categorical_histogram(profile: CategoricalProfile, s: CategoricalSummary) -> Histogram:
    top = min(REPORT_CATEGORIES, len(profile.domain))
    ref = np.concatenate([profile.summary.counts[:top], [profile.summary.counts[top:].sum(), 0]])
    cur = np.concatenate([s.counts[:top], [s.counts[top:].sum(), s.unseen_total]])
    labels = (*profile.domain[:top], "(other)", "(unseen)")
    return Histogram(labels, _shares(ref), _shares(cur))
