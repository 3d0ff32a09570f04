"""A servekit :class:`~servekit.services.monitoring.drift.profiles.Baseline` made from SageMaker's own
``statistics.json`` and ``constraints.json`` (checked by :mod:`~servekit.services.monitoring.baseline.sagemaker_files`).

The files summarise the training data less finely than servekit's own baseline does, so the conversion keeps what
they have and says what is lost (docs/monitoring.md §12):

- **Numerical**: the bins are the KLL sketch's items when the file has a sketch (each item weighs ``2**level``
  values), else the ten ``kll.buckets`` (all of a bucket's values at its upper bound for binning, at its midpoint for
  Wasserstein); the counts are scaled to ``num_present``. No values are kept, so KS, its p-value and Wasserstein come
  from those bins (``"approx": {"method": "bins"}`` in every result, as for a version-1 servekit baseline); PSI is
  over the same bins. Mean and std are the file's (std taken as the population std).
- **Categorical**: the categorical buckets are the counts; values a constraints domain adds count 0.
- **Thresholds**: no chunks, so nothing is learned. SageMaker's ``comparison_threshold`` becomes a fixed KS threshold
  on every numerical feature (SageMaker compares numerical distributions by a CDF distance against it); categorical
  features are judged by servekit's chi-square test (Holm's correction at alpha), not by SageMaker's L-infinity or
  chi-square rule.
- **Checks**: ``constraints.json`` is used as it is. Statistics alone: only the drift check runs
  (``evaluate_constraints`` Disabled: there are no constraints to check). Constraints alone: the checks run, and a
  feature has no distribution to drift from (its metrics are null).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import numpy.typing as npt

from servekit.services.monitoring.baseline import sagemaker_files as files
from servekit.services.monitoring.baseline.statistics_constraints import monitoring_config
from servekit.services.monitoring.drift.profiles import Baseline, CategoricalProfile, NumericProfile, Profile
from servekit.services.monitoring.drift.schema import Feature, InferredType, Kind
from servekit.services.monitoring.drift.sketch import Binning, CategoricalSummary, NumericSummary
from servekit.services.monitoring.drift.thresholds import Threshold

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
PSI_BINS = 10  # as servekit's own baselines (BaselineConfig.psi_bins)
VERSION = "sagemaker"  # Baseline.version: run.json says the baseline was SageMaker's files


def load_folder(folder: Path) -> Baseline:
    """The baseline of the ``statistics.json`` and/or ``constraints.json`` in ``folder``."""
    stats, cons = folder / files.STATISTICS, folder / files.CONSTRAINTS
    return to_baseline(files.load(stats if stats.is_file() else None, cons if cons.is_file() else None))


def is_sagemaker_folder(folder: Path) -> bool:
    """SageMaker's files without servekit's summaries (``baseline.json``) or versions (``CURRENT``)."""
    return (
        folder.is_dir()
        and not (folder / "baseline.json").exists()
        and not (folder / "CURRENT").exists()
        and ((folder / files.STATISTICS).is_file() or (folder / files.CONSTRAINTS).is_file())
    )


def to_baseline(given: files.SageMakerBaseline) -> Baseline:
    threshold = files.comparison_threshold(given.constraints) if given.constraints is not None else 0.1
    profiles: dict[str, Profile] = {}
    thresholds: dict[str, dict[str, Threshold]] = {}
    for name, s in given.statistics.items():
        if isinstance(s, files.NumericStats):
            profiles[name] = _numeric(s)
            if threshold is not None:
                thresholds[name] = {"ks_statistic": _fixed("ks_statistic", threshold)}
        else:
            profiles[name] = _categorical(name, InferredType(s.inferred_type), s, given.domains.get(name, ()))
    for name, type_ in given.constraint_types.items():  # constraints name features the statistics may not have
        if name not in profiles:
            feature_type = InferredType(type_)
            if feature_type.kind is Kind.NUMERICAL:
                profiles[name] = _empty_numeric(Feature(name, feature_type))
            else:
                profiles[name] = _categorical(name, feature_type, None, given.domains.get(name, ()))
    rows = given.item_count
    if rows is None:
        rows = max((p.summary.present + p.summary.missing for p in profiles.values()), default=0)
    constraints = given.constraints
    if constraints is None:
        # statistics alone: no constraints to check, only the distributions to compare
        constraints = {
            "version": 0.0,
            "features": [{"name": n, "inferred_type": p.feature.inferred_type.value} for n, p in profiles.items()],
            "monitoring_config": {**monitoring_config(), "evaluate_constraints": "Disabled"},
        }
    return Baseline(tuple(profiles), int(rows), profiles, thresholds, constraints, {}, version=VERSION)


def _fixed(metric: str, value: float) -> Threshold:
    nan = float("nan")
    return Threshold(metric, nan, nan, 3.0, 0.0, 0.0, fixed=value)


def _numeric(s: files.NumericStats) -> NumericProfile:
    feature = Feature(s.name, InferredType(s.inferred_type))
    if s.present == 0:
        return _empty_numeric(feature)
    if s.sketch:
        points = np.array([v for v, _ in s.sketch], dtype=np.float64)
        weights = np.array([w for _, w in s.sketch], dtype=np.float64)
        at = points
    elif s.buckets:
        lows = np.array([b[0] for b in s.buckets], dtype=np.float64)
        points = np.array([b[1] for b in s.buckets], dtype=np.float64)
        weights = np.array([b[2] for b in s.buckets], dtype=np.float64)
        at = (lows + points) / 2
    else:  # only the moments: one atom at the mean
        centre = s.mean if s.mean is not None else (s.minimum if s.minimum is not None else 0.0)
        points = at = np.array([centre], dtype=np.float64)
        weights = np.ones(1)
    if weights.sum() <= 0:
        points = at = np.array([s.mean if s.mean is not None else float(points.mean())])
        weights = np.ones(1)
    lo = s.minimum if s.minimum is not None else float(points.min())
    hi = s.maximum if s.maximum is not None else float(points.max())
    edges = np.unique(np.concatenate([points, [lo, hi]]))
    binning = Binning(edges)
    index = binning.index(points)
    counts = _scaled(weights, s.present)
    bin_counts = np.bincount(index, weights=counts, minlength=binning.size).astype(np.int64)
    bin_sums = np.bincount(index, weights=counts * at, minlength=binning.size).astype(np.float64)
    mean = s.mean if s.mean is not None else float(bin_sums.sum() / max(s.present, 1))
    std = s.std_dev if s.std_dev is not None else 0.0
    summary = NumericSummary(
        bin_counts,
        bin_sums,
        missing=s.missing,
        negative=int(counts[points < 0].sum()),
        shifted_sum=0.0,  # the sum of (x - mean): 0 by definition of the mean
        shifted_sumsq=s.present * std * std,
        shift=mean,
    )
    buckets = tuple((b[0], b[1], round(b[2])) for b in s.buckets)
    return NumericProfile(feature, binning, summary, _psi_groups(bin_counts), lo, hi, buckets, None)


def _empty_numeric(feature: Feature) -> NumericProfile:
    """A feature with no distribution to compare with (constraints alone, or no present value): metrics are null."""
    summary = NumericSummary(np.zeros(2, np.int64), np.zeros(2, np.float64))
    return NumericProfile(feature, Binning(np.zeros(1)), summary, np.zeros(2, np.int64), math.nan, math.nan, (), None)


def _scaled(weights: FloatArray, total: int) -> IntArray:
    """Whole counts in proportion to ``weights`` summing to ``total`` (largest remainders get the rest)."""
    exact = weights / weights.sum() * total
    out: IntArray = np.floor(exact).astype(np.int64)
    short = total - int(out.sum())
    if short > 0:
        out[np.argsort(-(exact - out), kind="stable")[:short]] += 1
    return out


def _psi_groups(counts: IntArray) -> IntArray:
    """The PSI group of each fine bin, by the rule of servekit's own baselines (build.py)."""
    n = max(int(counts.sum()), 1)
    before = (np.cumsum(counts) - counts) / n
    raw = np.minimum(np.floor(before * PSI_BINS + 1e-9), PSI_BINS - 1).astype(np.int64)
    return np.unique(raw, return_inverse=True)[1].astype(np.int64)


def _categorical(
    name: str, type_: InferredType, s: files.StringStats | None, domain_extra: tuple[str, ...]
) -> CategoricalProfile:
    ranked = sorted(s.buckets, key=lambda kv: (-kv[1], kv[0])) if s is not None else []
    values = [v for v, _ in ranked]
    counts = [round(c) for _, c in ranked]
    seen = set(values)
    for v in domain_extra:  # allowed by the constraints, never seen in the statistics
        if v not in seen:
            seen.add(v)
            values.append(v)
            counts.append(0)
    present = s.present if s is not None else 0
    other = max(0, present - sum(counts))
    complete = other == 0 and (s is None or s.distinct is None or s.distinct <= len(ranked))
    summary = CategoricalSummary(np.array([*counts, other], dtype=np.int64), s.missing if s is not None else 0)
    distinct = s.distinct if s is not None and s.distinct is not None else len(ranked)
    return CategoricalProfile(Feature(name, type_), tuple(values), complete, summary, distinct)
