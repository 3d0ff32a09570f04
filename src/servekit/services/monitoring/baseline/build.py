"""Building a baseline from training data in two streaming passes.

Pass 1 infers each column's type, its exact minimum and maximum, and keeps every value of a numerical column
up to ``sample_rows`` (then a uniform random sample: bottom-k of seeded random keys); those values place the
quantile edges and are kept, sorted, for exact KS and Wasserstein statistics. Pass 2 bins every value into
those edges, one summary per random chunk, from which come the baseline's own summary (the sum of the chunks)
and the learned thresholds (each chunk against the rest). Memory is bounded by the sample and the summaries.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from servekit.services.monitoring.config import BaselineConfig
from servekit.services.monitoring.drift.profiles import (
    Baseline,
    CategoricalProfile,
    NumericProfile,
    Profile,
    categorical_metrics,
)
from servekit.services.monitoring.drift.schema import (
    Feature,
    InferredType,
    Kind,
    infer_type,
    to_categorical,
    to_numeric,
)
from servekit.services.monitoring.drift.sketch import (
    Binning,
    CategoricalSummary,
    NumericSummary,
    make_binning,
    summarise_numeric,
)
from servekit.services.monitoring.drift.thresholds import JUDGED_METRICS, Threshold, learn
from servekit.services.monitoring.stream.sources import SourceError, SourceStats, read

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BUCKETS = 10  # statistics.json's equal-width buckets
# Where a baseline's rows come from: a fresh pass over the data at each call (build reads it twice), counting what it
# reads into the stats it is given.
Tables = Callable[[SourceStats], Iterator[pa.Table]]


@dataclass(slots=True)
class _ColumnScan:
    present: int = 0
    numeric: int = 0
    integral: int = 0
    minimum: float = math.inf
    maximum: float = -math.inf
    boolean: bool = False
    keys: FloatArray = field(default_factory=lambda: np.empty(0))
    sample: FloatArray = field(default_factory=lambda: np.empty(0))


def _batches(tables: Tables, cfg: BaselineConfig, stats: SourceStats) -> Iterator[pa.Table]:
    for table in tables(stats):
        drop = [c for c in table.column_names if c in cfg.exclude or c == cfg.timestamp_column]
        yield table.drop_columns(drop) if drop else table


def _column(table: pa.Table, name: str) -> pa.ChunkedArray | pa.Array:
    return table.column(name) if name in table.column_names else pa.nulls(table.num_rows)


def build(uri: str, cfg: BaselineConfig, stats: SourceStats | None = None) -> Baseline:
    """The baseline of the data under ``uri`` (any file or folder
    :func:`~servekit.services.monitoring.stream.sources.read` reads)."""

    def tables(counted: SourceStats) -> Iterator[pa.Table]:
        for batch in read(uri, timestamp_column=cfg.timestamp_column, batch_rows=cfg.batch_rows, stats=counted):
            yield batch.table

    return build_from(tables, cfg, stats, what=repr(uri))


def build_from(
    tables: Tables, cfg: BaselineConfig, stats: SourceStats | None = None, what: str = "the data"
) -> Baseline:
    """The baseline of the rows ``tables`` gives (called twice, once per pass); ``what`` names the data in errors."""
    stats = stats if stats is not None else SourceStats()
    scans, rows = _scan(tables, cfg, stats)
    if rows == 0 or not scans:
        raise SourceError(f"{what} has no rows to build a baseline from")
    features = [_feature(name, scan, cfg) for name, scan in scans.items()]
    profiles, chunk_summaries, chunk_rows = _summarise(tables, cfg, features, scans)
    thresholds = {name: _learn_thresholds(profiles[name], chunk_summaries[name], chunk_rows, cfg) for name in profiles}
    for feature, metric, value in cfg.overrides:
        if feature in thresholds and metric in thresholds[feature]:
            thresholds[feature][metric] = thresholds[feature][metric].with_fixed(value)
    return Baseline(tuple(scans), rows, profiles, thresholds, {}, {})


def _scan(tables: Tables, cfg: BaselineConfig, stats: SourceStats) -> tuple[dict[str, _ColumnScan], int]:
    rng = np.random.default_rng(cfg.seed)
    scans: dict[str, _ColumnScan] = {}
    rows = 0
    for table in _batches(tables, cfg, stats):
        keys = rng.random(table.num_rows)
        rows += table.num_rows
        for name in table.column_names:
            scan = scans.setdefault(name, _ColumnScan())
            col = table.column(name)
            scan.boolean = scan.boolean or pa.types.is_boolean(col.type)
            conv = to_numeric(col)
            numeric = ~conv.missing & ~conv.mismatched
            finite = conv.values[numeric]
            scan.present += int((~conv.missing).sum())
            scan.numeric += len(finite)
            scan.integral += int((finite == np.floor(finite)).sum())
            if len(finite):
                scan.minimum = min(scan.minimum, float(finite.min()))
                scan.maximum = max(scan.maximum, float(finite.max()))
            if scan.numeric == scan.present and len(finite):  # still a numerical candidate: keep sampling
                all_keys = np.concatenate([scan.keys, keys[numeric]])
                all_values = np.concatenate([scan.sample, finite])
                if len(all_keys) > 2 * cfg.sample_rows:  # prune at twice the cap: amortised O(1) per value
                    all_keys, all_values = _bottom_k(all_keys, all_values, cfg.sample_rows)
                scan.keys, scan.sample = all_keys, all_values
    for scan in scans.values():
        if len(scan.keys) > cfg.sample_rows:
            scan.keys, scan.sample = _bottom_k(scan.keys, scan.sample, cfg.sample_rows)
        scan.keys = np.empty(0)
    return scans, rows


def _bottom_k(keys: FloatArray, values: FloatArray, k: int) -> tuple[FloatArray, FloatArray]:
    keep = np.argpartition(keys, k)[:k]
    return keys[keep], values[keep]


def _feature(name: str, scan: _ColumnScan, cfg: BaselineConfig) -> Feature:
    if scan.present == 0:
        return Feature(name, InferredType.UNKNOWN)
    if name in cfg.categorical or scan.boolean:
        return Feature(name, InferredType.STRING)
    return Feature(name, infer_type(scan.present, scan.numeric, scan.integral))


def _summarise(
    tables: Tables, cfg: BaselineConfig, features: list[Feature], scans: dict[str, _ColumnScan]
) -> tuple[dict[str, Profile], dict[str, list[NumericSummary] | list[IntArray]], IntArray]:
    k = cfg.chunks
    rng = np.random.default_rng(cfg.seed + 1)
    numeric = {f.name: f for f in features if f.kind is Kind.NUMERICAL}
    binnings = {n: make_binning(scans[n].sample, scans[n].minimum, scans[n].maximum, cfg.fine_bins) for n in numeric}
    shifts = {n: float(scans[n].sample.mean()) for n in numeric}
    num_chunks = {n: [NumericSummary.empty(binnings[n].size, shifts[n]) for _ in range(k)] for n in numeric}
    buckets = {n: np.zeros(BUCKETS, np.int64) for n in numeric}
    cat_counts: dict[str, list[collections.Counter[str]]] = {
        f.name: [collections.Counter() for _ in range(k)] for f in features if f.kind is Kind.CATEGORICAL
    }
    cat_missing = {n: np.zeros(k, np.int64) for n in cat_counts}
    chunk_rows = np.zeros(k, np.int64)
    for table in _batches(tables, cfg, SourceStats()):
        chunk = rng.integers(0, k, table.num_rows).astype(np.int64)
        chunk_rows += np.bincount(chunk, minlength=k)
        for name, f in numeric.items():
            col = _column(table, name)
            integral = f.inferred_type is InferredType.INTEGRAL
            for acc, s in zip(
                num_chunks[name], summarise_numeric(col, binnings[name], chunk, k, integral, shifts[name]), strict=True
            ):
                acc += s
            values = to_numeric(col).values
            values = values[np.isfinite(values)]
            lo, hi = scans[name].minimum, scans[name].maximum
            buckets[name] += np.histogram(values, bins=BUCKETS, range=(lo, hi) if hi > lo else None)[0]
        for name in cat_counts:
            text = to_categorical(_column(table, name))
            valid = np.asarray(pc.is_valid(text).to_numpy(zero_copy_only=False), dtype=bool)
            cat_missing[name] += np.bincount(chunk[~valid], minlength=k)
            grouped = (
                pa.table({"c": pa.array(chunk), "v": text})
                .filter(pa.array(valid))
                .group_by(["c", "v"])
                .aggregate([("v", "count")])
                .to_pydict()
            )
            for c, v, n in zip(grouped["c"], grouped["v"], grouped["v_count"], strict=True):
                cat_counts[name][c][v] += n
    profiles: dict[str, Profile] = {}
    chunk_summaries: dict[str, list[NumericSummary] | list[IntArray]] = {}
    for f in features:
        if f.kind is Kind.NUMERICAL:
            total = NumericSummary.empty(binnings[f.name].size, shifts[f.name])
            for s in num_chunks[f.name]:
                total += s
            profiles[f.name] = _numeric_profile(f, binnings[f.name], total, scans[f.name], buckets[f.name], cfg)
            chunk_summaries[f.name] = num_chunks[f.name]
        else:
            profile, per_chunk = _categorical_profile(f, cat_counts[f.name], cat_missing[f.name], cfg)
            profiles[f.name] = profile
            chunk_summaries[f.name] = per_chunk
    return profiles, chunk_summaries, chunk_rows


def _numeric_profile(
    f: Feature, binning: Binning, total: NumericSummary, scan: _ColumnScan, buckets: IntArray, cfg: BaselineConfig
) -> NumericProfile:
    n = max(total.present, 1)
    before = (np.cumsum(total.counts) - total.counts) / n  # baseline share below each fine bin
    raw = np.minimum(np.floor(before * cfg.psi_bins + 1e-9), cfg.psi_bins - 1).astype(np.int64)
    psi_groups = np.unique(raw, return_inverse=True)[1].astype(np.int64)
    lo, hi = scan.minimum, scan.maximum
    edges = np.linspace(lo, hi, BUCKETS + 1) if hi > lo else np.linspace(lo - 0.5, hi + 0.5, BUCKETS + 1)
    table = tuple((float(edges[i]), float(edges[i + 1]), int(buckets[i])) for i in range(BUCKETS))
    # Pass 1's sample is every present value when there were at most ``sample_rows`` of them (exact
    # statistics), else a uniform sample of that many.
    return NumericProfile(f, binning, total, psi_groups, lo, hi, table, np.sort(scan.sample))


def _categorical_profile(
    f: Feature, counts: list[collections.Counter[str]], missing: IntArray, cfg: BaselineConfig
) -> tuple[CategoricalProfile, list[IntArray]]:
    total: collections.Counter[str] = collections.Counter()
    for c in counts:
        total.update(c)
    ranked = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))
    domain = tuple(v for v, _ in ranked[: cfg.max_categories])
    complete = len(ranked) <= cfg.max_categories
    index = {v: i for i, v in enumerate(domain)}
    per_chunk = []
    for c in counts:
        arr = np.zeros(len(domain) + 2, np.int64)  # domain, "other", then the chunk's missing count
        for v, n in c.items():
            arr[index.get(v, len(domain))] += n
        per_chunk.append(arr)
    for arr, miss in zip(per_chunk, missing, strict=True):
        arr[-1] = miss
    whole = np.sum(per_chunk, axis=0)
    summary = CategoricalSummary(whole[:-1].copy(), int(whole[-1]))
    return CategoricalProfile(f, domain, complete, summary, len(ranked)), per_chunk


def _learn_thresholds(
    profile: Profile,
    chunks: list[NumericSummary] | list[IntArray],
    chunk_rows: IntArray,
    cfg: BaselineConfig,
) -> dict[str, Threshold]:
    values: dict[str, list[float | None]] = collections.defaultdict(list)
    if isinstance(profile, NumericProfile):
        for s in chunks:
            assert isinstance(s, NumericSummary)
            for metric, v in profile.compare(s, profile.summary - s).items():
                values[metric].append(v)
    else:
        whole = profile.summary.counts
        for arr in chunks:
            assert isinstance(arr, np.ndarray)
            cur, miss = arr[:-1], int(arr[-1])
            rest = whole - cur
            unseen = int(cur[rest == 0].sum()) if profile.complete else None
            for metric, v in categorical_metrics(rest, cur, miss, int(cur.sum()) + miss, unseen).items():
                values[metric].append(v)
    total = int(chunk_rows.sum())
    mean_chunk = total / len(chunk_rows)
    return {
        metric: learn(metric, vals, mean_chunk, total - mean_chunk, cfg.k)
        for metric, vals in values.items()
        if metric in JUDGED_METRICS
    }
