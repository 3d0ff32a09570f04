"""Endpoint metrics on local data, in CloudWatch's model: one-minute aggregates per (namespace, metric,
dimensions), enough to answer ``SampleCount``, ``Sum``, ``Average``, ``Minimum``, ``Maximum`` and percentiles.

The gateway path records samples into an in-memory accumulator (a dict update per sample, no SQLite write per
request); :meth:`MetricsStore.flush` (run each minute by :meth:`MetricsStore.run`, and at shutdown) writes
finished minutes to the ``metrics`` state aggregate and drops minutes older than the retention. Queries
(:meth:`MetricsStore.datapoints`, the :class:`~servekit.control.metric_source.MetricSource` alarms read) merge
the stored minutes with the ones not yet flushed, so the current minute is visible at once.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from servekit.control.metric_source import MetricQuery
from servekit.state.metrics import Dimensions, Metrics, MinuteRow, merge_rows

log = logging.getLogger(__name__)

NAMESPACE = "AWS/SageMaker"
MINUTE = 60
RETENTION_S = 15 * 86_400  # CloudWatch keeps one-minute datapoints 15 days
ALPHA = 0.01  # the percentiles' relative error bound
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(GAMMA)
ZERO_BUCKET = -(2**31)
_MIN_INDEX = -(2**31) + 1
_MAX_INDEX = 2**31 - 1

UNITS = {
    "Invocations": "None",
    "InvocationsPerInstance": "None",
    "Invocation4XXErrors": "None",
    "Invocation5XXErrors": "None",
    "ModelLatency": "Microseconds",
    "OverheadLatency": "Microseconds",
}
BASIC_STATISTICS = ("SampleCount", "Average", "Sum", "Minimum", "Maximum")
_PERCENTILE = re.compile(r"^p(\d{1,3}(?:\.\d+)?)$")


class StatisticError(ValueError):
    """A statistic servekit does not compute (CloudWatch's ``tm90``, ``IQM``…) or a malformed one."""


def bucket_of(value: float) -> int:
    if value <= 0 or math.isnan(value):
        return ZERO_BUCKET
    return max(_MIN_INDEX, min(_MAX_INDEX, math.ceil(math.log(value) / _LOG_GAMMA)))


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
    count: int = 0
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
        b = bucket_of(value)
        self.histogram[b] = self.histogram.get(b, 0) + 1


_Key = tuple[str, str, Dimensions, int]


def _as_row(key: _Key, agg: _Open) -> MinuteRow:
    return MinuteRow(key[0], key[1], key[2], key[3], agg.count, agg.sum, agg.min, agg.max, dict(agg.histogram))


class MetricsStore:
    """Records samples per minute, flushes finished minutes to ``repo`` and answers queries over both.
    Single-threaded: call it from the event loop that records."""

    def __init__(
        self,
        repo: Metrics,
        clock: Callable[[], float] = time.time,
        retention_s: float = RETENTION_S,
        units: dict[str, str] | None = None,
    ) -> None:
        self.repo = repo
        self.clock = clock
        self.retention_s = retention_s
        self.units = dict(UNITS if units is None else units)
        self._open: dict[_Key, _Open] = {}
        self._task: asyncio.Task[None] | None = None

    # ---- recording ---------------------------------------------------------------------------------------------
    def record(
        self, namespace: str, metric: str, dimensions: Dimensions, value: float, at: float | None = None
    ) -> None:
        """One sample; ``dimensions`` sorted (name, value) pairs; ``at`` defaults to the clock's now."""
        t = self.clock() if at is None else at
        key = (namespace, metric, dimensions, int(t // MINUTE) * MINUTE)
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
    ) -> None:
        """One InvokeEndpoint that reached ``variant``; ``error`` the status class counted (4 or 5), if any."""
        t = self.clock()
        dims: Dimensions = (("EndpointName", endpoint), ("VariantName", variant))
        self.record(NAMESPACE, "Invocations", dims, 1.0, t)
        self.record(NAMESPACE, "InvocationsPerInstance", dims, 1.0 / instances if instances > 0 else 1.0, t)
        self.record(NAMESPACE, "Invocation4XXErrors", dims, 1.0 if error == 4 else 0.0, t)
        self.record(NAMESPACE, "Invocation5XXErrors", dims, 1.0 if error == 5 else 0.0, t)
        if model_us is not None:
            self.record(NAMESPACE, "ModelLatency", dims, model_us, t)
        if overhead_us is not None:
            self.record(NAMESPACE, "OverheadLatency", dims, max(0.0, overhead_us), t)

    # ---- flushing ----------------------------------------------------------------------------------------------
    def flush(self, everything: bool = False) -> int:
        """Write the minutes before the current one (all of them with ``everything``) and apply the retention;
        the number of minutes written. On a database error the minutes stay in memory for the next flush."""
        current = int(self.clock() // MINUTE) * MINUTE
        done = [k for k in self._open if everything or k[3] < current]
        if done:
            self.repo.add(_as_row(k, self._open[k]) for k in done)
            for k in done:
                del self._open[k]
        self.repo.delete_before(int((self.clock() - self.retention_s) // MINUTE) * MINUTE)
        return len(done)

    async def run(self) -> None:
        """Flush shortly after each minute ends, forever."""
        while True:
            now = self.clock()
            await asyncio.sleep((math.floor(now / MINUTE) + 1) * MINUTE - now + 0.25)
            try:
                self.flush()
            except Exception:
                log.exception("flushing endpoint metrics failed; they stay in memory for the next flush")

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            self.flush(everything=True)
        except Exception:
            log.exception("flushing endpoint metrics at shutdown failed")

    # ---- queries -----------------------------------------------------------------------------------------------
    def minutes(self, namespace: str, metric: str, dimensions: Dimensions, start: float, end: float) -> list[MinuteRow]:
        """The series' minutes starting in [start rounded down to the minute, end), stored and open, merged."""
        lo = int(start // MINUTE) * MINUTE
        hi = math.ceil(end)
        merged: dict[int, MinuteRow] = {r.minute: r for r in self.repo.minutes(namespace, metric, dimensions, lo, hi)}
        for key, agg in self._open.items():
            if key[0] == namespace and key[1] == metric and key[2] == dimensions and lo <= key[3] < hi:
                row = _as_row(key, agg)
                merged[key[3]] = merge_rows(merged[key[3]], row) if key[3] in merged else row
        return [merged[m] for m in sorted(merged)]

    def periods(
        self, namespace: str, metric: str, dimensions: Dimensions, period_s: int, start: float, end: float
    ) -> list[tuple[int, MinuteRow]]:
        """``(period start, merged aggregate)`` for each epoch-aligned period of ``period_s`` (a multiple of 60)
        from the one holding ``start`` up to ``end`` that has data, oldest first."""
        if period_s <= 0 or period_s % MINUTE:
            raise StatisticError(f"The period must be a positive multiple of {MINUTE} seconds, not {period_s}.")
        lo = int(start // period_s) * period_s
        out: dict[int, MinuteRow] = {}
        for row in self.minutes(namespace, metric, dimensions, lo, end):
            p = row.minute // period_s * period_s
            out[p] = merge_rows(out[p], row) if p in out else row
        return sorted(out.items())

    def datapoints(self, query: MetricQuery, start: float, end: float) -> list[tuple[float, float]]:
        """:class:`~servekit.control.metric_source.MetricSource`: one value of ``query.statistic`` per period
        with data; periods are aligned to multiples of ``period_s`` since the epoch. The store keeps one-minute
        resolution, so a sub-minute period (a high-resolution alarm) has no datapoints: its alarm decides by
        ``TreatMissingData``, as CloudWatch's does for a standard-resolution metric."""
        if query.period_s < 60 or query.period_s % 60:
            return []
        dims = tuple(sorted(query.dimensions))
        rows = self.periods(query.namespace, query.metric_name, dims, query.period_s, start, end)
        return [(float(p), statistic(row, query.statistic)) for p, row in rows]

    def series(self, namespace: str | None = None, metric: str | None = None) -> list[tuple[str, str, Dimensions]]:
        """Every (namespace, metric, dimensions) with data, stored or open."""
        found = set(self.repo.series(namespace, metric))
        for key in self._open:
            if (namespace is None or key[0] == namespace) and (metric is None or key[1] == metric):
                found.add((key[0], key[1], key[2]))
        return sorted(found)

    def unit(self, metric: str) -> str:
        return self.units.get(metric, "None")


def dimensions_of(pairs: Iterable[tuple[str, str]]) -> Dimensions:
    return tuple(sorted(pairs))
