"""Mergeable per-feature summaries: fixed-edge histograms for numerical features, counts for categorical ones.

A summary never holds rows, so memory depends on features x bins, not on how many rows went in. Summaries
of the same feature add (two panes make a window) and subtract (a baseline chunk against the rest of the
baseline). ``summarise_*`` build one summary per group (time pane or baseline chunk) from one record batch
with a handful of vectorised calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from servekit.services.monitoring.drift.schema import Column, to_categorical, to_numeric
from servekit.services.monitoring.drift.values import ValueSample

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MAX_TRACKED_UNSEEN = 1000  # distinct unseen categories remembered by name per summary; the rest are only counted


@dataclass(frozen=True, slots=True)
class Binning:
    """Sorted, unique edges ``e_0 < … < e_{E-1}``; bin 0 is ``x ≤ e_0``, bin ``j`` is ``e_{j-1} < x ≤ e_j``,
    bin ``E`` is ``x > e_{E-1}``. Values are binned with ``searchsorted(edges, x, side="left")``."""

    edges: FloatArray

    @property
    def size(self) -> int:
        return len(self.edges) + 1

    def index(self, values: FloatArray) -> IntArray:
        return np.searchsorted(self.edges, values, side="left").astype(np.int64)


def make_binning(sample: FloatArray, minimum: float, maximum: float, max_bins: int) -> Binning:
    """Edges from a sample of a feature's finite values: every distinct value when there are at most
    ``max_bins`` of them (then binning loses nothing), else ``max_bins`` quantiles (``inverted_cdf``, so each
    edge is a real value); the exact minimum and maximum are always edges."""
    distinct = np.unique(sample)
    if len(distinct) <= max_bins:
        edges = distinct
    else:
        edges = np.unique(np.quantile(sample, np.linspace(0.0, 1.0, max_bins + 1), method="inverted_cdf"))
    edges = np.unique(np.concatenate([edges, [minimum, maximum]]))
    return Binning(edges.astype(np.float64))


@dataclass(slots=True)
class NumericSummary:
    """Counts and value sums per bin, plus missing/mismatched/negative counts and shifted moments.

    ``unbinned`` counts mismatched values that have no number (text); mismatched fractions of an ``Integral``
    feature keep their value and sit in a bin.
    """

    counts: IntArray
    sums: FloatArray
    missing: int = 0
    mismatched: int = 0
    unbinned: int = 0
    negative: int = 0
    shifted_sum: float = 0.0  # sum and sum of squares of (x - shift): mean and std without cancellation
    shifted_sumsq: float = 0.0
    shift: float = 0.0
    # The present values themselves (exact up to a cap, then a uniform sample) for exact statistics; None when
    # they were not kept (baseline chunks, differences of summaries).
    sample: ValueSample | None = None

    @classmethod
    def empty(cls, bins: int, shift: float = 0.0, keep_values: int = 0) -> NumericSummary:
        sample = ValueSample.empty(keep_values) if keep_values else None
        return cls(np.zeros(bins, np.int64), np.zeros(bins, np.float64), shift=shift, sample=sample)

    @property
    def present(self) -> int:
        return int(self.counts.sum())

    @property
    def rows(self) -> int:
        return self.present + self.missing + self.unbinned

    def mean(self) -> float:
        n = self.present
        return self.shift + self.shifted_sum / n if n else float("nan")

    def std(self) -> float:
        """Population standard deviation (ddof 0)."""
        n = self.present
        if n == 0:
            return float("nan")
        var = self.shifted_sumsq / n - (self.shifted_sum / n) ** 2
        return float(np.sqrt(max(var, 0.0)))

    def __iadd__(self, other: NumericSummary) -> NumericSummary:
        self._combine(other, 1)
        return self

    def __sub__(self, other: NumericSummary) -> NumericSummary:
        out = self.copy()
        out._combine(other, -1)
        return out

    def copy(self) -> NumericSummary:
        return NumericSummary(
            self.counts.copy(),
            self.sums.copy(),
            self.missing,
            self.mismatched,
            self.unbinned,
            self.negative,
            self.shifted_sum,
            self.shifted_sumsq,
            self.shift,
            None if self.sample is None else self.sample.copy(),
        )

    def _combine(self, other: NumericSummary, sign: int) -> None:
        if other.shift != self.shift:
            raise ValueError("summaries with different shifts cannot be combined")
        if sign < 0 or other.sample is None:
            # Which values a difference holds is unknown; a part without values makes the whole unknown too
            # (unless it is empty).
            if sign < 0 or other.present:
                self.sample = None
        elif self.sample is None:
            self.sample = other.sample.copy() if self.present == 0 else None
        else:
            self.sample.add(other.sample)
        self.counts += sign * other.counts
        self.sums += sign * other.sums
        self.missing += sign * other.missing
        self.mismatched += sign * other.mismatched
        self.unbinned += sign * other.unbinned
        self.negative += sign * other.negative
        self.shifted_sum += sign * other.shifted_sum
        self.shifted_sumsq += sign * other.shifted_sumsq


@dataclass(slots=True)
class CategoricalSummary:
    """``counts[i]`` counts ``domain[i]``; the last slot counts values outside the domain when the domain was
    capped (then they cannot be told apart from rare baseline values). With a complete domain, values outside
    it are *unseen*: counted by name in ``unseen`` (up to ``MAX_TRACKED_UNSEEN`` names) and in total in
    ``unseen_total``."""

    counts: IntArray
    missing: int = 0
    unseen: dict[str, int] = field(default_factory=dict)
    unseen_total: int = 0

    @classmethod
    def empty(cls, domain_size: int) -> CategoricalSummary:
        return cls(np.zeros(domain_size + 1, np.int64))

    @property
    def present(self) -> int:
        return int(self.counts.sum()) + self.unseen_total

    @property
    def rows(self) -> int:
        return self.present + self.missing

    def __iadd__(self, other: CategoricalSummary) -> CategoricalSummary:
        self.counts += other.counts
        self.missing += other.missing
        self.unseen_total += other.unseen_total
        for value, n in other.unseen.items():
            if value in self.unseen or len(self.unseen) < MAX_TRACKED_UNSEEN:
                self.unseen[value] = self.unseen.get(value, 0) + n
        return self

    def copy(self) -> CategoricalSummary:
        return CategoricalSummary(self.counts.copy(), self.missing, dict(self.unseen), self.unseen_total)


def _group_bincount(group: IntArray, n_groups: int, mask: npt.NDArray[np.bool_]) -> IntArray:
    return np.bincount(group[mask], minlength=n_groups).astype(np.int64)


def summarise_numeric(
    col: Column,
    binning: Binning,
    group: IntArray,
    n_groups: int,
    integral: bool = False,
    shift: float = 0.0,
    keep_values: int = 0,
    rng: np.random.Generator | None = None,
) -> list[NumericSummary]:
    """One summary per group id in ``range(n_groups)`` of the rows of ``col`` (``group[i]`` is row i's group).

    With ``keep_values`` > 0 each summary also keeps its present values (a uniform sample beyond that many,
    drawn with ``rng``)."""
    conv = to_numeric(col, integral)
    bins = binning.size
    present = ~(conv.missing | np.isnan(conv.values))
    g, x = group[present], conv.values[present]
    flat = g * bins + binning.index(x)
    counts = np.bincount(flat, minlength=n_groups * bins).reshape(n_groups, bins).astype(np.int64)
    sums = np.bincount(flat, weights=x, minlength=n_groups * bins).reshape(n_groups, bins)
    dx = x - shift
    s1 = np.bincount(g, weights=dx, minlength=n_groups)
    s2 = np.bincount(g, weights=dx * dx, minlength=n_groups)
    missing = _group_bincount(group, n_groups, conv.missing)
    mismatched = _group_bincount(group, n_groups, conv.mismatched)
    unbinned = _group_bincount(group, n_groups, conv.mismatched & np.isnan(conv.values))
    negative = np.bincount(g[x < 0], minlength=n_groups)
    samples: list[ValueSample | None] = [None] * n_groups
    if keep_values:
        gen = rng if rng is not None else np.random.default_rng(0)
        order = np.argsort(g, kind="stable")
        bounds = np.searchsorted(g[order], np.arange(n_groups + 1))
        samples = [ValueSample.of(x[order[bounds[i] : bounds[i + 1]]], gen, keep_values) for i in range(n_groups)]
    out = []
    for i in range(n_groups):
        out.append(
            NumericSummary(
                counts[i],
                sums[i],
                int(missing[i]),
                int(mismatched[i]),
                int(unbinned[i]),
                int(negative[i]),
                float(s1[i]),
                float(s2[i]),
                shift,
                samples[i],
            )
        )
    return out


def summarise_categorical(
    col: Column, domain: pa.Array, complete: bool, group: IntArray, n_groups: int
) -> list[CategoricalSummary]:
    """Per-group category counts against ``domain`` (a string array); see :class:`CategoricalSummary`."""
    text = to_categorical(col)
    size = len(domain) + 1
    missing_mask = np.asarray(pc.is_null(text).to_numpy(zero_copy_only=False), dtype=bool)
    idx = pc.index_in(text, value_set=domain)
    outside = np.asarray(pc.and_(pc.is_null(idx), pc.is_valid(text)).to_numpy(zero_copy_only=False), dtype=bool)
    known = np.asarray(pc.fill_null(idx, len(domain)).to_numpy(zero_copy_only=False), dtype=np.int64)
    binned = ~missing_mask if not complete else ~(missing_mask | outside)
    flat = group[binned] * size + known[binned]
    counts = np.bincount(flat, minlength=n_groups * size).reshape(n_groups, size).astype(np.int64)
    missing = _group_bincount(group, n_groups, missing_mask)
    out = [CategoricalSummary(counts[i], int(missing[i])) for i in range(n_groups)]
    if complete and outside.any():
        rows = np.flatnonzero(outside)
        table = pa.table({"g": pa.array(group[rows]), "v": text.take(pa.array(rows))})
        grouped = table.group_by(["g", "v"]).aggregate([("v", "count")]).to_pydict()
        for g_id, value, n in zip(grouped["g"], grouped["v"], grouped["v_count"], strict=True):
            s = out[g_id]
            s.unseen_total += n
            if len(s.unseen) < MAX_TRACKED_UNSEEN:
                s.unseen[value] = n
    return out
