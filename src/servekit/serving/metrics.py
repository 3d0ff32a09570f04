"""The one Prometheus registry of a server: TF Serving's metric names plus servekit's own."""

from __future__ import annotations

import glob
import os
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from servekit.errors import ErrorCode
from servekit.serving.batching.policy import ReleaseReason
from servekit.serving.lifecycle import ServableState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# TF Serving's request_latency buckets: exp(10, 1.8, 33) microseconds.
TF_LATENCY_BUCKETS_US = tuple(10 * 1.8**i for i in range(33))
# TF Serving labels request_count with absl status names; servekit's own counter uses the neutral code names.
_TF_STATUS = {
    ErrorCode.INVALID_ARGUMENT: "INVALID_ARGUMENT",
    ErrorCode.NOT_FOUND: "NOT_FOUND",
    ErrorCode.UNAVAILABLE: "UNAVAILABLE",
    ErrorCode.PAYLOAD_TOO_LARGE: "RESOURCE_EXHAUSTED",
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: "INVALID_ARGUMENT",
    ErrorCode.NOT_ACCEPTABLE: "INVALID_ARGUMENT",
    ErrorCode.MODEL_ERROR: "INTERNAL",
    ErrorCode.DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
    ErrorCode.CANCELLED: "CANCELLED",
    ErrorCode.UNIMPLEMENTED: "UNIMPLEMENTED",
    ErrorCode.INTERNAL: "INTERNAL",
}
_TF_BY_NAME = {code.name: status for code, status in _TF_STATUS.items()} | {"OK": "OK"}
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


Flushes = list[Callable[[], None]]


def _observer(child: Any, flushes: Flushes | None) -> Callable[[float], None]:
    """A fast ``observe`` for a labelled histogram child.

    prometheus_client's Histogram.observe scans the buckets linearly, re-checks the metric type and takes a
    lock per bucket and sum on every call. On the request path a bisect into plain per-bucket counts is several
    times cheaper; with ``flushes`` the counts stay plain numbers and a flush (run before every scrape) writes
    their totals into the child, so the registry renders exactly what per-request observes would have made.
    Without ``flushes`` (multiprocess mode: other workers read the child's shared file, so it must be current)
    each observation goes to the child at once. Falls back to the public method if the library's internals
    ever change shape.
    """
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        return child.observe  # type: ignore[no-any-return]
    bounds = list(bounds)
    if flushes is None:

        def observe_now(value: float) -> None:
            total.inc(value)
            buckets[bisect_left(bounds, value)].inc(1)

        return observe_now
    counts = [0] * len(bounds)
    acc = [0.0]

    def observe(value: float) -> None:
        acc[0] += value
        counts[bisect_left(bounds, value)] += 1

    def flush() -> None:
        # Totals, not deltas: the loop thread is the only writer of ``counts``/``acc``, a flush only reads them.
        total.set(acc[0])
        for bucket, n in zip(buckets, counts, strict=True):
            bucket.set(float(n))

    flushes.append(flush)
    return observe


def _incrementer(child: Any, flushes: Flushes | None) -> Callable[[], None]:
    """A counter child's ``inc()``, kept as a plain count until the next flush (see :func:`_observer`)."""
    value = getattr(child, "_value", None)
    if flushes is None or value is None or not hasattr(value, "set"):
        return child.inc  # type: ignore[no-any-return]
    n = [0]

    def inc() -> None:
        n[0] += 1

    flushes.append(lambda: value.set(float(n[0])))
    return inc


def status_label(code: ErrorCode | None) -> str:
    """The ``status`` label of ``servekit_requests``: OK, or the neutral error code's name."""
    return "OK" if code is None else code.name


def tf_status(label: str) -> str:
    """TF Serving's absl status name for a ``servekit_requests`` status label."""
    return _TF_BY_NAME.get(label, "UNKNOWN")


class _TfRequestCount(Collector):
    """``:tensorflow:serving:request_count{model_name,status}`` exactly as TF Serving names it (no _total).

    Derived from ``servekit_requests`` so it also aggregates across worker processes.
    """

    NAME = ":tensorflow:serving:request_count"

    def __init__(self, source: Callable[[], Iterable[Metric]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        counts: dict[tuple[str, str], float] = defaultdict(float)
        for metric in self._source():
            if metric.name != "servekit_requests":
                continue
            for sample in metric.samples:
                if sample.name == "servekit_requests_total":
                    counts[(sample.labels["model"], tf_status(sample.labels["status"]))] += sample.value
        m = Metric(self.NAME, "The total number of requests.", "unknown")
        for (model, status), n in sorted(counts.items()):
            m.add_sample(self.NAME, {"model_name": model, "status": status}, n)
        yield m


class _Fixed(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics


class CaptureStats(Protocol):
    captured: int
    dropped: int
    sampled_out: int


class _CaptureCollector(Collector):
    def __init__(self, stats: CaptureStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        for name, doc, value in (
            ("servekit_capture_records", "Records written by data capture.", self._stats.captured),
            ("servekit_capture_dropped", "Records dropped because the capture buffer was full.", self._stats.dropped),
            ("servekit_capture_sampled_out", "Requests not captured because of sampling.", self._stats.sampled_out),
        ):
            m = Metric(name, doc, "counter")
            m.add_sample(name + "_total", {}, float(value))
            yield m


class Metrics:
    """Implements the request, inference, batch and lifecycle observer ports over one registry.

    ``multiprocess_dir`` (set by the worker supervisor, which also exports PROMETHEUS_MULTIPROC_DIR before
    the workers start) makes ``render`` aggregate every worker's values.

    In one process the per-request and per-batch updates are plain additions to numbers kept beside each
    labelled child (11 locked prometheus_client increments per request cost ~6% of a tiny request's event-loop
    CPU); ``render`` copies them into the children first, so the exposition is the same. Every observer method
    runs on the event loop thread (REST and gRPC share it; batch results are delivered to it).
    """

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        self._multiprocess_dir = multiprocess_dir
        self._flushes: Flushes | None = [] if multiprocess_dir is None else None
        self._request_children: dict[
            tuple[str, str, str, str, ErrorCode | None],
            tuple[Callable[[], None], Callable[[float], None] | None, Callable[[float], None] | None],
        ] = {}
        self._phase_children: dict[tuple[str, int], tuple[Callable[[float], None], ...]] = {}
        self._batch_children: dict[tuple[str, str, ReleaseReason], tuple[Callable[..., None], ...]] = {}
        # One fast updater per labelled child: several request keys share a child (TF Serving's latency has no
        # version or protocol label), and a flush writes totals, so two updaters of one child would overwrite.
        self._updaters: dict[tuple[object, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self._watched: list[Collector] = []  # collectors read at scrape time, beside the multiprocess values
        self._tf_latency = Histogram(
            ":tensorflow:serving:request_latency",
            "Distribution of request latency in microseconds.",
            ["model_name", "API", "entrypoint"],
            buckets=TF_LATENCY_BUCKETS_US,
            registry=self.registry,
        )
        self._requests = Counter(
            "servekit_requests",
            "Requests by model, version, protocol, API and status (OK or the error code, the same for every protocol).",
            ["model", "version", "protocol", "api", "status"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "servekit_request_latency_seconds",
            "Server-side latency of successful requests.",
            ["model", "version", "protocol"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self._load_time = Histogram(
            "servekit_model_load_seconds",
            "Time to load a model version.",
            ["model", "outcome"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=self.registry,
        )
        phase = ["model", "version"]
        self._queue_time = Histogram(
            "servekit_queue_seconds",
            "Time a request waited in its batch queue.",
            phase,
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self._model_time = Histogram(
            "servekit_inference_seconds",
            "Model execution time of the batch holding a request.",
            phase,
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self._tf_queuing = Histogram(
            ":tensorflow:serving:batching_session:queuing_latency",
            "Time in the batching queue, microseconds.",
            ["model_name"],
            buckets=TF_LATENCY_BUCKETS_US,
            registry=self.registry,
        )
        self._batch_size = Histogram(
            ":tensorflow:serving:batching_session:processed_batch_size",
            "Rows per executed batch (with padding).",
            ["model_name"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self._padding = Histogram(
            ":tensorflow:serving:batching_session:padding_size",
            "Padding rows per executed batch.",
            ["model_name"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self._batches = Counter(
            "servekit_batches",
            "Executed batches by why they were released (full, idle, timeout, target).",
            ["model", "version", "reason"],
            registry=self.registry,
        )
        self._batch_rows = Histogram(
            "servekit_batch_size",
            "Request rows per executed batch.",
            ["model", "version"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self._state = Gauge(
            "servekit_servable_state",
            "1 for the state each model version is in.",
            ["model", "version", "state"],
            registry=self.registry,
            multiprocess_mode="max",
        )
        self.registry.register(_TfRequestCount(self._requests.collect))

    def _histogram(self, metric: Histogram, *labels: str) -> Callable[[float], None]:
        key = (metric, labels)
        fn = self._updaters.get(key)
        if fn is None:
            fn = self._updaters[key] = _observer(metric.labels(*labels), self._flushes)
        return fn

    def _counter(self, metric: Counter, *labels: str) -> Callable[[], None]:
        key = (metric, labels)
        fn = self._updaters.get(key)
        if fn is None:
            fn = self._updaters[key] = _incrementer(metric.labels(*labels), self._flushes)
        return fn

    # RequestObserver. Updaters are cached per request key: labels() costs a lock and a tuple build per call.
    def on_request(
        self, *, model: str, version: str, api: str, protocol: str, code: ErrorCode | None, seconds: float
    ) -> None:
        key = (model, version, api, protocol, code)
        children = self._request_children.get(key)
        if children is None:
            ok = code is None
            children = (
                self._counter(self._requests, model, version, protocol, api, status_label(code)),
                self._histogram(self._tf_latency, model, api, "REST") if ok else None,
                self._histogram(self._latency, model, version, protocol) if ok else None,
            )
            self._request_children[key] = children
        count, tf_latency, latency = children
        count()
        if tf_latency is not None and latency is not None:
            tf_latency(seconds * 1e6)
            latency(seconds)

    # InferenceObserver
    def on_inference(self, model: str, version: int, queue_s: float, model_s: float, total_s: float) -> None:
        key = (model, version)
        children = self._phase_children.get(key)
        if children is None:
            v = str(version)
            children = (
                self._histogram(self._queue_time, model, v),
                self._histogram(self._model_time, model, v),
                self._histogram(self._tf_queuing, model),
            )
            self._phase_children[key] = children
        queue, compute, tf_queue = children
        queue(queue_s)
        compute(model_s)
        tf_queue(queue_s * 1e6)

    # BatchObserver
    def on_batch(
        self, key: tuple[str, str], rows: int, padded_rows: int, reason: ReleaseReason, seconds: float
    ) -> None:
        model, version = key
        children = self._batch_children.get((model, version, reason))
        if children is None:
            children = (
                self._histogram(self._batch_size, model),
                self._histogram(self._padding, model),
                self._counter(self._batches, model, version, reason.value),
                self._histogram(self._batch_rows, model, version),
            )
            self._batch_children[(model, version, reason)] = children
        batch_size, padding, count, batch_rows = children
        batch_size(padded_rows)
        padding(padded_rows - rows)
        count()
        batch_rows(rows)

    # LifecycleObserver
    def on_state(self, model: str, version: int, state: ServableState) -> None:
        for s in ServableState:
            self._state.labels(model, str(version), s.value).set(1.0 if s is state else 0.0)

    def on_load(self, model: str, version: int, seconds: float, ok: bool) -> None:
        self._load_time.labels(model, "ok" if ok else "error").observe(seconds)

    def watch_capture(self, stats: CaptureStats) -> None:
        self.registry.register(_CaptureCollector(stats))

    def watch(self, collector: Collector) -> None:
        """Also expose ``collector``'s metrics (read at scrape time in this process: GPU readings)."""
        self.registry.register(collector)
        self._watched.append(collector)

    def flush(self) -> None:
        """Write the plain per-request totals into the registry's children (``render`` does it first)."""
        for flush in self._flushes or ():
            flush()

    def render(self) -> bytes:
        self.flush()
        if self._multiprocess_dir is None:
            return generate_latest(self.registry)
        metrics = _merged(self._multiprocess_dir)
        out = CollectorRegistry()
        out.register(_Fixed(metrics))
        out.register(_TfRequestCount(lambda: metrics))
        for collector in self._watched:  # read by whichever worker answers the scrape
            out.register(collector)
        return generate_latest(out)


def _merged(folder: str) -> list[Metric]:
    """Every worker's values from the multiprocess folder, merged. A file a worker is still creating (it restarts
    while the scrape reads: empty, or shorter than prometheus_client's 8-byte header) is left out of this scrape, not
    an error: the others' values are answered, and it counts from the next one."""
    from prometheus_client.multiprocess import MultiProcessCollector

    files = [f for f in sorted(glob.glob(os.path.join(folder, "*.db"))) if _initialised(f)]
    return list(MultiProcessCollector.merge(files, accumulate=True))  # type: ignore[no-untyped-call]


def _initialised(path: str) -> bool:
    try:
        return os.path.getsize(path) >= 8  # the used size, then the first entry: written when the file is made
    except OSError:  # removed since the listing
        return False
