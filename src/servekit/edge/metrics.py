"""The Prometheus series of ``servekit up``'s /metrics: InvokeEndpoint's outcomes and latencies per endpoint and
variant, instances' setup times, endpoints by status and their cost, and the latest CloudWatch datapoints.

Built by the composition root before the hosting service (which reports each instance's setup time here) and
handed to the plane; each recording also goes to CloudWatch's endpoint metrics store when there is one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from servekit.gateway.service import GatewayError
from servekit.services.cloudwatch.store import NAMESPACE, MetricsStore
from servekit.services.hosting.lifecycle import EndpointStatus
from servekit.services.hosting.store import EndpointRow


class EdgeMetrics:
    def __init__(self, store: MetricsStore | None = None) -> None:
        """``store``: CloudWatch's endpoint metrics, where each recording also goes (None: Prometheus only)."""
        self.store = store
        self.registry = CollectorRegistry()
        self._invocations = Counter(
            "servekit_endpoint_invocations",
            "InvokeEndpoint calls by endpoint, variant and outcome.",
            ["endpoint", "variant", "outcome"],
            registry=self.registry,
        )
        self._errors = Counter(
            "servekit_endpoint_invocation_errors",
            "InvokeEndpoint errors by endpoint, variant and status class (4xx: the model's; 5xx: the model's or none"
            " available), as CloudWatch's Invocation4XXErrors/Invocation5XXErrors count them.",
            ["endpoint", "variant", "status_class"],
            registry=self.registry,
        )
        buckets = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
        self._model_latency = Histogram(
            "servekit_endpoint_model_latency_seconds",
            "CloudWatch's ModelLatency: the instance's own time per InvokeEndpoint, by endpoint and variant.",
            ["endpoint", "variant"],
            buckets=buckets,
            registry=self.registry,
        )
        self._overhead_latency = Histogram(
            "servekit_endpoint_overhead_latency_seconds",
            "CloudWatch's OverheadLatency: the gateway's time per InvokeEndpoint minus ModelLatency.",
            ["endpoint", "variant"],
            buckets=buckets,
            registry=self.registry,
        )
        self._setup_time = Histogram(
            "servekit_endpoint_model_setup_seconds",
            "CloudWatch's ModelSetupTime: each instance's time from start to its first healthy check, by endpoint and"
            " variant.",
            ["endpoint", "variant"],
            buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0),
            registry=self.registry,
        )
        self._datapoint = Gauge(
            "servekit_endpoint_datapoint",
            "The latest complete CloudWatch datapoint (AWS/SageMaker, the metrics resolution) of each hosting metric"
            " by endpoint and variant, in CloudWatch's units (latencies in microseconds).",
            ["endpoint", "variant", "metric", "statistic"],
            registry=self.registry,
        )
        self._datapoint_time = Gauge(
            "servekit_endpoint_datapoint_timestamp_seconds",
            "Start of the period of servekit_endpoint_datapoint.",
            ["endpoint", "variant", "metric"],
            registry=self.registry,
        )
        # endpoint -> the labelled series recorded for it, removed from /metrics when the endpoint is gone
        self._labelled: dict[str, set[tuple[Any, tuple[str, ...]]]] = {}
        # (metric, labels) -> its child series: labels() takes a lock and builds a key on every call, and
        # InvokeEndpoint records three series a request
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self._endpoints = Gauge("servekit_endpoints", "Endpoints by status.", ["status"], registry=self.registry)
        self._cost = Gauge(
            "servekit_endpoint_cost_per_hour",
            "What each endpoint's instances would cost an hour at their instance types' list prices (US dollars).",
            ["endpoint"],
            registry=self.registry,
        )

    def series(self, metric: Any, endpoint: str, *labels: str) -> Any:
        """``metric.labels(endpoint, *labels)``, remembered so the series leaves /metrics with its endpoint."""
        key = (metric, (endpoint, *labels))
        child = self._children.get(key)
        if child is None:
            self._labelled.setdefault(endpoint, set()).add(key)
            child = self._children[key] = metric.labels(*key[1])
        return child

    def invocation(self, endpoint: str, variant: str, outcome: str) -> None:
        self.series(self._invocations, endpoint, variant, outcome).inc()

    def record_ok(
        self,
        endpoint: str,
        variant: str,
        model_s: float | None,
        total_s: float,
        instances: Callable[[str, str], int],
        config_name: str = "",
    ) -> None:
        """A successful InvokeEndpoint: ModelLatency and OverheadLatency here and in CloudWatch's store.
        ``instances``: (endpoint, variant) -> the variant's routed instances, asked only for the store."""
        overhead_s = max(0.0, total_s - model_s) if model_s is not None else None
        if model_s is not None:
            self.series(self._model_latency, endpoint, variant).observe(model_s)
        if overhead_s is not None:
            self.series(self._overhead_latency, endpoint, variant).observe(overhead_s)
        if self.store is not None:
            self.store.record_invocation(
                endpoint,
                variant,
                instances=instances(endpoint, variant),
                model_us=model_s * 1e6 if model_s is not None else None,
                overhead_us=overhead_s * 1e6 if overhead_s is not None else None,
                config_name=config_name or None,
            )

    def record_error(
        self, endpoint: str, exc: GatewayError, total_s: float, instances: Callable[[str, str], int]
    ) -> None:
        """A failed InvokeEndpoint in CloudWatch's terms: counted only once a variant was chosen."""
        variant = exc.extra.get("VariantName")
        if not isinstance(variant, str) or exc.code not in ("ModelError", "ServiceUnavailable"):
            return
        status = exc.extra.get("OriginalStatusCode")
        error = 4 if exc.code == "ModelError" and isinstance(status, int) and 400 <= status < 500 else 5
        self.series(self._errors, endpoint, variant, f"{error}xx").inc()
        model = exc.extra.get("ModelSeconds")
        model_s = float(model) if isinstance(model, (int, float)) else None
        overhead_s = max(0.0, total_s - model_s) if model_s is not None else total_s
        if model_s is not None:
            self.series(self._model_latency, endpoint, variant).observe(model_s)
        self.series(self._overhead_latency, endpoint, variant).observe(overhead_s)
        config = exc.extra.get("EndpointConfigName")
        if self.store is not None:
            self.store.record_invocation(
                endpoint,
                variant,
                instances=instances(endpoint, variant),
                model_us=model_s * 1e6 if model_s is not None else None,
                overhead_us=overhead_s * 1e6,
                error=error,
                config_name=config if isinstance(config, str) and config else None,
            )

    def record_instance_ready(
        self, endpoint: str, config_name: str, variant: str, instance_id: str, setup_s: float
    ) -> None:
        """An instance turned healthy ``setup_s`` after its start (the hosting service's ``on_instance_ready``):
        CloudWatch's ModelSetupTime and its Prometheus histogram."""
        self.series(self._setup_time, endpoint, variant).observe(setup_s)
        if self.store is not None:
            self.store.record_setup_time(endpoint, variant, config_name, setup_s * 1e6)

    def render(self, rows: Sequence[EndpointRow], cost_per_hour: Callable[[EndpointRow], float]) -> bytes:
        """Prometheus text: these series, with the endpoint gauges set from ``rows`` (every endpoint), and the
        series of endpoints no longer among them removed."""
        counts: dict[str, int] = {}
        names = {row.name for row in rows}
        self._cost.clear()  # deleted endpoints leave the series
        for row in rows:
            counts[row.status] = counts.get(row.status, 0) + 1
            self._cost.labels(row.name).set(cost_per_hour(row))
        for status in EndpointStatus:
            self._endpoints.labels(str(status)).set(counts.get(str(status), 0))
        for endpoint in [e for e in self._labelled if e and e not in names]:
            for metric, values in self._labelled.pop(endpoint):
                self._children.pop((metric, values), None)
                with contextlib.suppress(KeyError):
                    metric.remove(*values)
        self._latest_datapoints(names)
        return generate_latest(self.registry)

    def _latest_datapoints(self, endpoints: set[str]) -> None:
        self._datapoint.clear()
        self._datapoint_time.clear()
        if self.store is None:
            return
        for row in self.store.latest(NAMESPACE):
            dims = dict(row.dimensions)
            if set(dims) != {"EndpointName", "VariantName"} or dims["EndpointName"] not in endpoints:
                continue  # the per-config series stay in CloudWatch's API; gone endpoints leave
            endpoint, variant = dims["EndpointName"], dims["VariantName"]
            self._datapoint_time.labels(endpoint, variant, row.metric).set(row.minute)
            average = row.sum / row.count if row.count else 0.0
            for name, value in (("Sum", row.sum), ("SampleCount", row.count), ("Average", average)):
                self._datapoint.labels(endpoint, variant, row.metric, name).set(value)
            self._datapoint.labels(endpoint, variant, row.metric, "Maximum").set(row.max)
