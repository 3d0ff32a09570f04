"""Endpoint metrics on local data, in CloudWatch's model: aggregates per (namespace, metric, dimensions) and
resolution bucket (one minute by default, ``resolution_s``), enough to answer ``SampleCount``, ``Sum``,
``Average``, ``Minimum``, ``Maximum`` and percentiles.

The gateway path records samples into an in-memory accumulator (a dict update per sample, no SQLite write per
request); :meth:`MetricsStore.flush` (run after each bucket by :meth:`MetricsStore.run`, and at shutdown) writes
finished buckets to the ``metrics`` state aggregate and drops buckets older than the retention. Queries
(:meth:`MetricsStore.datapoints`, the :class:`~servekit.services.cloudwatch.source.MetricSource` alarms read) merge
the stored buckets with the ones not yet flushed, so the current bucket is visible at once.

**Resolution.** ``resolution_s`` is 1, 2, 5, 10, 20, 30, 60 or a multiple of 60 (a divisor of a minute or whole
minutes, so every period a query may ask for is whole buckets). A query's period must be a positive multiple of
it: with ``resolution_s=10`` CloudWatch's high-resolution periods 10/20/30 have datapoints; with 2, an alarm of
Period 2 compresses time for tests and demos. As CloudWatch keeps high-resolution data three hours and then
one-minute data, sub-minute buckets older than :data:`HIGH_RESOLUTION_RETENTION_S` are rolled up into minutes.

**Percentiles** come from a fixed log-spaced histogram per minute (DDSketch's buckets): a positive sample
``v`` falls in bucket ``i = ceil(log(v) / log(g))``, i.e. ``(g**(i-1), g**i]``, with ``g = (1+a)/(1-a)`` and
``a = ALPHA = 1%``; zero and negative samples share one bucket valued 0. A percentile ``pN`` is the
nearest-rank sample (the ``ceil(N/100*count)``-th smallest, numpy's ``method="inverted_cdf"``) estimated as its
bucket's ``2*g**i/(g+1)`` and clamped into [Minimum, Maximum] (the first and last rank are Minimum and
Maximum themselves), so **its relative error is at most ALPHA = 1%**
for positive samples (exact for zero). Minimum, Maximum, Sum and SampleCount are exact.

The hosting metrics (namespace ``AWS/SageMaker``, dimensions ``EndpointName`` and ``VariantName``), recorded
per InvokeEndpoint by :meth:`MetricsStore.record_invocation`:

- ``Invocations`` 1 per request that reached a variant (model errors and ServiceUnavailable included; a request
  refused before a variant was chosen, e.g. an unknown endpoint, is not counted);
- ``InvocationsPerInstance`` 1/(the variant's instances serving at the time);
- ``Invocation4XXErrors`` / ``Invocation5XXErrors`` 1 or 0 each: the model's own status class for a
  ``ModelError`` (a timeout, status 0, counts as 5XX), 5XX for ``ServiceUnavailable``;
- ``ModelLatency`` µs: the instance's own time (its ``x-servekit-total-ms`` header), else the upstream round
  trip the gateway measured; ``OverheadLatency`` µs: the gateway's time minus ModelLatency.

Each is recorded twice: under ``EndpointName``/``VariantName`` and, when the caller knows which endpoint config's
fleet answered, also under ``EndpointName``/``VariantName``/``EndpointConfigName`` — during a blue/green
deployment a variant has two fleets, and an alarm on the second series watches the new (green) fleet only, as
SageMaker's guardrail deployments allow. ``ModelSetupTime`` (µs, the same two dimension sets) is the time from an
instance's start to its first healthy check (:meth:`MetricsStore.record_setup_time`). The utilization metrics of
namespace ``/aws/sagemaker/Endpoints`` come from :mod:`servekit.services.hosting.utilization`.

**An idle variant publishes zeros**, as SageMaker's do: for every variant ``live_variants`` names (hosting's
fleets, wired by ``servekit up``), each bucket that ended with no sample of a metric of :data:`IDLE_ZERO_METRICS`
gets a datapoint of Sum, Average, Minimum and Maximum 0 (:meth:`MetricsStore.fill_idle`, run before each flush
and each query). Its SampleCount is 0: SampleCount keeps counting requests, and an Average over busy and idle
buckets stays a per-request ratio. Without these datapoints a target-tracking policy's low alarm would see missing
data, never "below", and an idle variant would never scale in. Latencies are not filled: an idle minute has no
latency, as in CloudWatch.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from servekit._utils.background import BackgroundLoop, until_next_bucket
from servekit.services.cloudwatch.metric_store import Dimensions, Metrics, MinuteRow, merge_rows
from servekit.services.cloudwatch.source import MetricQuery

log = logging.getLogger(__name__)

NAMESPACE = "AWS/SageMaker"
INSTANCE_NAMESPACE = "/aws/sagemaker/Endpoints"  # CloudWatch's namespace of the utilization metrics
MINUTE = 60
RETENTION_S = 15 * 86_400  # CloudWatch keeps one-minute datapoints 15 days
HIGH_RESOLUTION_RETENTION_S = 3 * 3600  # and sub-minute ones three hours, then as one-minute datapoints
SUB_MINUTE_RESOLUTIONS = (1, 2, 5, 10, 20, 30)
ALPHA = 0.01  # the percentiles' relative error bound
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(GAMMA)
ZERO_BUCKET = -(2**31)
_MIN_INDEX = -(2**31) + 1
_MAX_INDEX = 2**31 - 1
_MAX_BUCKET_COUNT = 2**32 - 1

UNITS = {
    "Invocations": "None",
    "InvocationsPerInstance": "None",
    "Invocation4XXErrors": "None",
    "Invocation5XXErrors": "None",
    "ModelLatency": "Microseconds",
    "OverheadLatency": "Microseconds",
    "ModelSetupTime": "Microseconds",
    "CPUUtilization": "Percent",
    "MemoryUtilization": "Percent",
    "DiskUtilization": "Percent",
    # multi-model endpoints
    "ModelCacheHit": "None",
    "ModelLoadingWaitTime": "Microseconds",
    "ModelDownloadingTime": "Microseconds",
    "ModelLoadingTime": "Microseconds",
    "ModelUnloadingTime": "Microseconds",
    "LoadedModelCount": "None",
}
# What SageMaker publishes as 0 for an idle variant (latencies it leaves out)
IDLE_ZERO_METRICS = ("Invocations", "InvocationsPerInstance", "Invocation4XXErrors", "Invocation5XXErrors")
# Filling after a long stall (a suspended process) stops this far back: alarms read the newest periods only
_IDLE_BACKFILL_S = 3600
BASIC_STATISTICS = ("SampleCount", "Average", "Sum", "Minimum", "Maximum")
_PERCENTILE = re.compile(r"^p(\d{1,3}(?:\.\d+)?)$")


class StatisticError(ValueError):
    """A statistic servekit does not compute (CloudWatch's ``tm90``, ``IQM``…) or a malformed one."""


def check_resolution(resolution_s: int) -> int:
    """``resolution_s`` if the store can keep it (see the module's doc), else :class:`ValueError`."""
    if not isinstance(resolution_s, int) or not (
        resolution_s in SUB_MINUTE_RESOLUTIONS or (resolution_s >= MINUTE and resolution_s % MINUTE == 0)
    ):
        raise ValueError(
            f"The metrics resolution must be 1, 2, 5, 10, 20, 30 or a multiple of 60 seconds, not {resolution_s!r}."
        )
    return resolution_s


def bucket_of(value: float) -> int:
    if value <= 0 or math.isnan(value):
        return ZERO_BUCKET
    return max(_MIN_INDEX, min(_MAX_INDEX, math.ceil(math.log(value) / _LOG_GAMMA)))


_BUCKET_OF_ONE = bucket_of(1.0)


def bucket_value(index: int) -> float:
    if index == ZERO_BUCKET:
        return 0.0
    return 2.0 * math.exp(index * _LOG_GAMMA) / (GAMMA + 1.0)


def percentile_of(statistic: str) -> float | None:
    """``p99`` → 99.0; ``None`` for a basic statistic; :class:`StatisticError` for anything else."""
    if statistic in BASIC_STATISTICS:
        return None
    m = _PERCENTILE.match(statistic)
    if m is None or float(m.group(1)) > 100:
        raise StatisticError(
            f"servekit computes {', '.join(BASIC_STATISTICS)} and percentiles p0-p100; not {statistic!r}."
        )
    return float(m.group(1))


def statistic(row: MinuteRow, name: str) -> float:
    """One statistic of an aggregate (a minute or several merged)."""
    p = percentile_of(name)
    if p is None:
        if name == "SampleCount":
            return row.count
        if name == "Sum":
            return row.sum
        if name == "Average":
            return row.sum / row.count if row.count else 0.0
        if name == "Minimum":
            return row.min
        return row.max
    rank = max(1, math.ceil(p / 100.0 * row.count))
    if rank >= row.count:  # the largest sample, and the smallest: known exactly
        return row.max
    if rank == 1:
        return row.min
    seen = 0
    for index in sorted(row.histogram):
        seen += row.histogram[index]
        if seen >= rank:
            return min(row.max, max(row.min, bucket_value(index)))
    return row.max


@dataclass(slots=True)
class _Open:
    count: float = 0
    sum: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    histogram: dict[int, int] = field(default_factory=dict)

    def add(self, value: float) -> None:
        self.count += 1
        self.sum += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        b = _BUCKET_OF_ONE if value == 1.0 else bucket_of(value)  # counts are 1: no logarithm for them
        self.histogram[b] = self.histogram.get(b, 0) + 1

    def add_set(self, count: float, total: float, low: float, high: float, at: float) -> None:
        """``count`` samples summing to ``total`` within [low, high] (a PutMetricData statistic set, or ``Values``
        with ``Counts`` as one value at a time). The histogram holds them at ``at`` (the value itself, or the
        set's average: a set's own samples are unknown, so its percentiles are estimates clamped to [min, max])."""
        self.count += count
        self.sum += total
        self.min = min(self.min, low)
        self.max = max(self.max, high)
        b = bucket_of(at)
        # the histogram's counts are whole and stored as uint32: a huge published count is capped there (only the
        # percentiles' ranks feel it; SampleCount and Sum stay exact)
        self.histogram[b] = min(
            _MAX_BUCKET_COUNT, self.histogram.get(b, 0) + max(1, min(round(count), _MAX_BUCKET_COUNT))
        )


_Key = tuple[str, str, Dimensions, int]
# (endpoint, variant, endpoint config of a fleet serving it or None): the variants whose idle buckets get zeros
LiveVariant = tuple[str, str, str | None]


def _as_row(key: _Key, agg: _Open) -> MinuteRow:
    return MinuteRow(key[0], key[1], key[2], key[3], agg.count, agg.sum, agg.min, agg.max, dict(agg.histogram))


class MetricsStore(BackgroundLoop):
    """Records samples per resolution bucket, flushes finished buckets to ``repo`` and answers queries over both.
    Single-threaded: call it from the event loop that records."""

    def __init__(
        self,
        repo: Metrics,
        clock: Callable[[], float] = time.time,
        retention_s: float = RETENTION_S,
        units: dict[str, str] | None = None,
        resolution_s: int = MINUTE,
        live_variants: Callable[[], Iterable[LiveVariant]] | None = None,
    ) -> None:
        self.repo = repo
        self.live_variants = live_variants
        self._idle_from: dict[Dimensions, int] = {}  # series of a live variant -> first bucket not yet filled
        self.clock = clock
        self.retention_s = retention_s
        self.resolution_s = check_resolution(resolution_s)
        self.units = dict(UNITS if units is None else units)
        self._open: dict[_Key, _Open] = {}
        # each series' newest finished bucket, for Prometheus (kept from the flushes: no query per scrape)
        self._latest: dict[tuple[str, str, Dimensions], MinuteRow] = {}
        self._rolled_up_to = 0  # sub-minute buckets before this are already minutes (see _roll_up)
        self._put_units: dict[tuple[str, str], str] = {}
        self._dims: dict[tuple[str, str, str | None], list[Dimensions]] = {}  # (endpoint, variant, config) -> series

    def bucket(self, t: float) -> int:
        """The start of the resolution bucket holding ``t`` (epoch-aligned)."""
        r = self.resolution_s
        return int(t // r) * r

    # ---- recording ---------------------------------------------------------------------------------------------
    def record(
        self, namespace: str, metric: str, dimensions: Dimensions, value: float, at: float | None = None
    ) -> None:
        """One sample; ``dimensions`` sorted (name, value) pairs; ``at`` defaults to the clock's now."""
        t = self.clock() if at is None else at
        self._add((namespace, metric, dimensions, self.bucket(t)), value)

    def _add(self, key: _Key, value: float) -> None:
        agg = self._open.get(key)
        if agg is None:
            agg = self._open[key] = _Open()
        agg.add(value)

    def record_invocation(
        self,
        endpoint: str,
        variant: str,
        *,
        instances: int,
        model_us: float | None,
        overhead_us: float | None,
        error: int | None = None,
        config_name: str | None = None,
    ) -> None:
        """One InvokeEndpoint that reached ``variant``; ``error`` the status class counted (4 or 5), if any;
        ``config_name`` the endpoint config whose fleet answered (adds the EndpointConfigName series)."""
        # as record() per sample, with the bucket and the series' dimensions worked out once (this runs on every
        # InvokeEndpoint: twelve samples)
        b = self.bucket(self.clock())
        samples = [
            ("Invocations", 1.0),
            ("InvocationsPerInstance", 1.0 / instances if instances > 0 else 1.0),
            ("Invocation4XXErrors", 1.0 if error == 4 else 0.0),
            ("Invocation5XXErrors", 1.0 if error == 5 else 0.0),
        ]
        if model_us is not None:
            samples.append(("ModelLatency", model_us))
        if overhead_us is not None:
            samples.append(("OverheadLatency", max(0.0, overhead_us)))
        for dims in self._invocation_dimensions(endpoint, variant, config_name):
            for metric, value in samples:
                self._add((NAMESPACE, metric, dims, b), value)

    def _invocation_dimensions(self, endpoint: str, variant: str, config_name: str | None) -> list[Dimensions]:
        key = (endpoint, variant, config_name)
        dims = self._dims.get(key)
        if dims is None:
            if len(self._dims) >= _DIMS_KEPT:
                self._dims.clear()
            dims = self._dims[key] = _variant_dimensions(endpoint, variant, config_name)
        return dims

    def record_model_load(
        self,
        endpoint: str,
        variant: str,
        *,
        hit: bool,
        wait_us: float = 0.0,
        download_us: float = 0.0,
        load_us: float = 0.0,
        unload_us: tuple[float, ...] = (),
        loaded_models: int | None = None,
    ) -> None:
        """A multi-model request's model: ``ModelCacheHit`` 1/0 (its Average is the hit ratio); on a miss what it
        waited (``ModelLoadingWaitTime``), the download and load times; one ``ModelUnloadingTime`` sample per model
        the instance unloaded to make room (their SampleCount shows thrashing); ``LoadedModelCount`` of the
        instance that served it, in ``/aws/sagemaker/Endpoints``."""
        t = self.clock()
        dims: Dimensions = (("EndpointName", endpoint), ("VariantName", variant))
        self.record(NAMESPACE, "ModelCacheHit", dims, 1.0 if hit else 0.0, t)
        if not hit:
            self.record(NAMESPACE, "ModelLoadingWaitTime", dims, wait_us, t)
            if download_us or load_us:
                self.record(NAMESPACE, "ModelDownloadingTime", dims, download_us, t)
                self.record(NAMESPACE, "ModelLoadingTime", dims, load_us, t)
        for us in unload_us:
            self.record(NAMESPACE, "ModelUnloadingTime", dims, us, t)
        if loaded_models is not None:
            self.record(INSTANCE_NAMESPACE, "LoadedModelCount", dims, float(loaded_models), t)

    def put(
        self,
        namespace: str,
        metric: str,
        dimensions: Dimensions,
        at: float,
        *,
        values: Sequence[tuple[float, float]] = (),
        statistics: tuple[float, float, float, float] | None = None,
        unit: str | None = None,
    ) -> None:
        """Published data (CloudWatch's PutMetricData): ``values`` as (value, count) pairs, or ``statistics`` as
        (SampleCount, Sum, Minimum, Maximum). Data older than the high-resolution retention goes into its minute,
        as CloudWatch would have rolled it up. ``unit`` is kept per (namespace, metric), the first one seen."""
        if unit is not None:
            self._put_units.setdefault((namespace, metric), unit)
        width = self.resolution_s if at >= self.clock() - HIGH_RESOLUTION_RETENTION_S else MINUTE
        key = (namespace, metric, dimensions, int(at // width) * width)
        agg = self._open.get(key)
        if agg is None:
            agg = self._open[key] = _Open()
        for value, count in values:
            if count > 0:
                agg.add_set(count, value * count, value, value, value)
        if statistics is not None:
            n, total, low, high = statistics
            agg.add_set(n, total, low, high, total / n)

    def record_setup_time(self, endpoint: str, variant: str, config_name: str | None, setup_us: float) -> None:
        """``ModelSetupTime``: one instance of ``variant`` turned healthy ``setup_us`` after it was started."""
        t = self.clock()
        for dims in _variant_dimensions(endpoint, variant, config_name):
            self.record(NAMESPACE, "ModelSetupTime", dims, max(0.0, setup_us), t)

    def fill_idle(self) -> int:
        """A zero datapoint of each :data:`IDLE_ZERO_METRICS` metric in every bucket that ended, since the variant
        was first seen live, without one (see the module's doc); the number of zeros added. A bucket that ended
        is never filled twice (each series remembers where it stopped), and one with traffic keeps its own
        samples only, so SampleCount and Average stay exact."""
        if self.live_variants is None:
            return 0
        current = self.bucket(self.clock())
        floor = current - _IDLE_BACKFILL_S // self.resolution_s * self.resolution_s
        starts: dict[Dimensions, int] = {}
        for endpoint, variant, config_name in self.live_variants():
            for dims in _variant_dimensions(endpoint, variant, config_name):
                starts[dims] = self._idle_from.get(dims, current)  # a new variant starts now, not in the past
        added = 0
        for dims, start in starts.items():
            for b in range(max(start, floor), current, self.resolution_s):
                for metric in IDLE_ZERO_METRICS:
                    key = (NAMESPACE, metric, dims, b)
                    if key not in self._open:
                        self._open[key] = _Open(min=0.0, max=0.0)  # Sum, Average, Min, Max 0; no sample
                        added += 1
        self._idle_from = dict.fromkeys(starts, current)  # a variant gone is forgotten
        return added

    # ---- flushing ----------------------------------------------------------------------------------------------
    def flush(self, everything: bool = False) -> int:
        """Write the buckets before the current one (all of them with ``everything``), apply the retention and
        roll old sub-minute buckets up; the number of buckets written. On a database error the buckets stay in
        memory for the next flush."""
        self.fill_idle()
        now = self.clock()
        current = self.bucket(now)
        done = [k for k in self._open if everything or k[3] < current]
        if done:
            rows = [_as_row(k, self._open[k]) for k in done]
            self.repo.add(rows)
            for k in done:
                del self._open[k]
            for row in rows:
                if row.minute < current:
                    series = (row.namespace, row.metric, row.dimensions)
                    seen = self._latest.get(series)
                    if seen is None or seen.minute <= row.minute:
                        self._latest[series] = row
        cutoff = int((now - self.retention_s) // MINUTE) * MINUTE
        self.repo.delete_before(cutoff)
        self._roll_up(now)
        return len(done)

    def _roll_up(self, now: float) -> None:
        # at most once a minute, and only over the minutes newly past the high-resolution retention
        if self.resolution_s >= MINUTE and self._rolled_up_to:
            return
        before = int((now - HIGH_RESOLUTION_RETENTION_S) // MINUTE) * MINUTE
        if before >= self._rolled_up_to + MINUTE or not self._rolled_up_to:
            self.repo.roll_up(self._rolled_up_to, before, MINUTE)
            self._rolled_up_to = before

    def _interval_s(self) -> float:
        return float(min(self.resolution_s, MINUTE))

    async def run(self) -> None:
        """Flush shortly after each bucket ends (each minute at the most), forever."""
        step = self._interval_s()
        while True:
            await asyncio.sleep(until_next_bucket(self.clock(), step, min(0.25, step / 4)))
            try:
                self.flush()
            except Exception:
                log.exception("flushing endpoint metrics failed; they stay in memory for the next flush")

    async def close(self) -> None:
        await super().close()
        try:
            self.flush(everything=True)
        except Exception:
            log.exception("flushing endpoint metrics at shutdown failed")

    # ---- queries -----------------------------------------------------------------------------------------------
    def minutes(self, namespace: str, metric: str, dimensions: Dimensions, start: float, end: float) -> list[MinuteRow]:
        """The series' buckets starting in [start rounded down to the bucket, end), stored and open, merged
        (named for the one-minute default; each row's ``minute`` is its bucket's start)."""
        self.fill_idle()  # a period that just ended reads its zeros before the next flush writes them
        lo = self.bucket(start)
        hi = math.ceil(end)
        merged: dict[int, MinuteRow] = {r.minute: r for r in self.repo.minutes(namespace, metric, dimensions, lo, hi)}
        for key, agg in self._open.items():
            if key[0] == namespace and key[1] == metric and key[2] == dimensions and lo <= key[3] < hi:
                row = _as_row(key, agg)
                merged[key[3]] = merge_rows(merged[key[3]], row) if key[3] in merged else row
        return [merged[m] for m in sorted(merged)]

    def valid_period(self, period_s: int) -> bool:
        """Whether a query may ask for ``period_s``: a positive multiple of the resolution."""
        return isinstance(period_s, int) and period_s > 0 and period_s % self.resolution_s == 0

    def periods(
        self, namespace: str, metric: str, dimensions: Dimensions, period_s: int, start: float, end: float
    ) -> list[tuple[int, MinuteRow]]:
        """``(period start, merged aggregate)`` for each epoch-aligned period of ``period_s`` (a multiple of the
        resolution) from the one holding ``start`` up to ``end`` that has data, oldest first."""
        if not self.valid_period(period_s):
            raise StatisticError(
                f"The period must be a positive multiple of {self.resolution_s} seconds (the metrics resolution), "
                f"not {period_s}."
            )
        lo = int(start // period_s) * period_s
        out: dict[int, MinuteRow] = {}
        for row in self.minutes(namespace, metric, dimensions, lo, end):
            p = row.minute // period_s * period_s
            out[p] = merge_rows(out[p], row) if p in out else row
        return sorted(out.items())

    def datapoints(self, query: MetricQuery, start: float, end: float) -> list[tuple[float, float]]:
        """:class:`~servekit.services.cloudwatch.source.MetricSource`: one value of ``query.statistic`` per period
        with data; periods are aligned to multiples of ``period_s`` since the epoch. A period finer than the
        resolution, or not a multiple of it (a 10 s alarm on one-minute data), has no datapoints: its alarm
        decides by ``TreatMissingData``, as CloudWatch's does for a standard-resolution metric."""
        if not self.valid_period(query.period_s):
            return []
        dims = tuple(sorted(query.dimensions))
        rows = self.periods(query.namespace, query.metric_name, dims, query.period_s, start, end)
        return [(float(p), statistic(row, query.statistic)) for p, row in rows]

    def latest(self, namespace: str | None = None) -> list[MinuteRow]:
        """Each series' newest finished bucket that was flushed by this process (Prometheus's view)."""
        return [r for r in self._latest.values() if namespace is None or r.namespace == namespace]

    def series(self, namespace: str | None = None, metric: str | None = None) -> list[tuple[str, str, Dimensions]]:
        """Every (namespace, metric, dimensions) with data, stored or open."""
        found = set(self.repo.series(namespace, metric))
        for key in self._open:
            if (namespace is None or key[0] == namespace) and (metric is None or key[1] == metric):
                found.add((key[0], key[1], key[2]))
        return sorted(found)

    def unit(self, metric: str, namespace: str | None = None) -> str:
        """The unit of a metric: a published one's first unit, else the hosting metrics' table, else None."""
        if namespace is not None and (namespace, metric) in self._put_units:
            return self._put_units[(namespace, metric)]
        return self.units.get(metric, "None")


_DIMS_KEPT = 4096


def _variant_dimensions(endpoint: str, variant: str, config_name: str | None) -> list[Dimensions]:
    dims: Dimensions = (("EndpointName", endpoint), ("VariantName", variant))
    if not config_name:
        return [dims]
    return [dims, dimensions_of((*dims, ("EndpointConfigName", config_name)))]


def dimensions_of(pairs: Iterable[tuple[str, str]]) -> Dimensions:
    return tuple(sorted(pairs))
