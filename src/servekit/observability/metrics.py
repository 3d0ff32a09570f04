"""The one Prometheus registry of a server: TF Serving's metric names plus servekit's own."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from servekit.serving.state import ServableState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# TF Serving's request_latency buckets: exp(10, 1.8, 33) microseconds.
TF_LATENCY_BUCKETS_US = tuple(10 * 1.8**i for i in range(33))
# TF Serving labels request_count with absl status names; map the HTTP status back to them.
_TF_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _TfRequestCount(Collector):
    """``:tensorflow:serving:request_count{model_name,status}`` exactly as TF Serving names it (no _total)."""

    NAME = ":tensorflow:serving:request_count"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = defaultdict(int)

    def inc(self, model: str, status: str) -> None:
        with self._lock:
            self._counts[(model, status)] += 1

    def collect(self) -> Iterator[Metric]:
        m = Metric(self.NAME, "The total number of requests.", "unknown")
        with self._lock:
            for (model, status), n in sorted(self._counts.items()):
                m.add_sample(self.NAME, {"model_name": model, "status": status}, float(n))
        yield m


class Metrics:
    """Implements the request and lifecycle observer ports over one registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._tf_count = _TfRequestCount()
        self.registry.register(self._tf_count)
        self._tf_latency = Histogram(
            ":tensorflow:serving:request_latency",
            "Distribution of request latency in microseconds.",
            ["model_name", "API", "entrypoint"],
            buckets=TF_LATENCY_BUCKETS_US,
            registry=self.registry,
        )
        self._requests = Counter(
            "servekit_requests",
            "Requests by model, version, protocol, API and HTTP status.",
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
        self._state = Gauge(
            "servekit_servable_state",
            "1 for the state each model version is in.",
            ["model", "version", "state"],
            registry=self.registry,
        )

    # RequestObserver
    def on_request(self, *, model: str, version: str, api: str, protocol: str, status: int, seconds: float) -> None:
        self._tf_count.inc(model, "OK" if status < 400 else _TF_STATUS.get(status, "INVALID_ARGUMENT"))
        self._requests.labels(model, version, protocol, api, str(status)).inc()
        if status == 200:
            self._tf_latency.labels(model, api, "REST").observe(seconds * 1e6)
            self._latency.labels(model, version, protocol).observe(seconds)

    # LifecycleObserver
    def on_state(self, model: str, version: int, state: ServableState) -> None:
        for s in ServableState:
            self._state.labels(model, str(version), s.value).set(1.0 if s is state else 0.0)

    def on_load(self, model: str, version: int, seconds: float, ok: bool) -> None:
        self._load_time.labels(model, "ok" if ok else "error").observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
