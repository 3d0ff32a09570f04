"""The request path's metrics are plain totals copied into the registry at scrape time: the exposition must be
what per-request prometheus_client updates would have written, scrape after scrape."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from servekit.errors import ErrorCode
from servekit.serving.batching.policy import ReleaseReason
from servekit.serving.metrics import (
    BATCH_BUCKETS,
    LATENCY_BUCKETS_S,
    TF_LATENCY_BUCKETS_US,
    Metrics,
    status_label,
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str, names: set[str]) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        if family.name in names
        for s in family.samples
        if not s.name.endswith("_created")  # creation times differ between two registries, nothing else may
    }


class Reference:
    """The same metrics updated through prometheus_client's public API, one call per event."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.tf_latency = Histogram(
            ":tensorflow:serving:request_latency", "", ["model_name", "API", "entrypoint"],
            buckets=TF_LATENCY_BUCKETS_US, registry=r,
        )  # fmt: skip
        self.requests = Counter("servekit_requests", "", ["model", "version", "protocol", "api", "status"], registry=r)
        self.latency = Histogram(
            "servekit_request_latency_seconds",
            "",
            ["model", "version", "protocol"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.queue = Histogram(
            "servekit_queue_seconds", "", ["model", "version"], buckets=LATENCY_BUCKETS_S, registry=r
        )
        self.model = Histogram(
            "servekit_inference_seconds", "", ["model", "version"], buckets=LATENCY_BUCKETS_S, registry=r
        )
        self.tf_queue = Histogram(
            ":tensorflow:serving:batching_session:queuing_latency", "", ["model_name"],
            buckets=TF_LATENCY_BUCKETS_US, registry=r,
        )  # fmt: skip
        self.batch_size = Histogram(
            ":tensorflow:serving:batching_session:processed_batch_size", "", ["model_name"],
            buckets=BATCH_BUCKETS, registry=r,
        )  # fmt: skip
        self.padding = Histogram(
            ":tensorflow:serving:batching_session:padding_size", "", ["model_name"], buckets=BATCH_BUCKETS, registry=r
        )
        self.batches = Counter("servekit_batches", "", ["model", "version", "reason"], registry=r)
        self.batch_rows = Histogram("servekit_batch_size", "", ["model", "version"], buckets=BATCH_BUCKETS, registry=r)


NAMES = {
    ":tensorflow:serving:request_latency",
    "servekit_requests",
    "servekit_request_latency_seconds",
    "servekit_queue_seconds",
    "servekit_inference_seconds",
    ":tensorflow:serving:batching_session:queuing_latency",
    ":tensorflow:serving:batching_session:processed_batch_size",
    ":tensorflow:serving:batching_session:padding_size",
    "servekit_batches",
    "servekit_batch_size",
}


def latency(rng: random.Random) -> float:
    # Values on a bucket bound exactly must land in that bucket (le is inclusive), as prometheus_client puts them.
    if rng.random() < 0.2:
        return rng.choice(LATENCY_BUCKETS_S)
    return rng.expovariate(200.0)


def test_scrapes_show_what_per_request_updates_would() -> None:
    rng = random.Random(16)
    metrics, ref = Metrics(), Reference()
    codes = [None, None, None, ErrorCode.NOT_FOUND, ErrorCode.UNAVAILABLE]
    for step in range(3000):
        model, version = rng.choice(["a", "b"]), rng.choice(["1", "2"])
        api, protocol = rng.choice(["predict", "classify"]), rng.choice(["tfserving", "kserve_v2"])
        code, seconds = rng.choice(codes), latency(rng)
        metrics.on_request(model=model, version=version, api=api, protocol=protocol, code=code, seconds=seconds)
        ref.requests.labels(model, version, protocol, api, status_label(code)).inc()
        if code is None:
            ref.tf_latency.labels(model, api, "REST").observe(seconds * 1e6)
            ref.latency.labels(model, version, protocol).observe(seconds)
        queue_s, model_s = latency(rng), latency(rng)
        metrics.on_inference(model, int(version), queue_s, model_s, queue_s + model_s)
        ref.queue.labels(model, version).observe(queue_s)
        ref.model.labels(model, version).observe(model_s)
        ref.tf_queue.labels(model).observe(queue_s * 1e6)
        rows = rng.randint(1, 64)
        padded = rows + rng.choice([0, 0, 3])
        reason = rng.choice(list(ReleaseReason))
        metrics.on_batch((model, version), rows, padded, reason, model_s)
        ref.batch_size.labels(model).observe(padded)
        ref.padding.labels(model).observe(padded - rows)
        ref.batches.labels(model, version, reason.value).inc()
        ref.batch_rows.labels(model, version).observe(rows)
        if step % 700 == 0 or step == 2999:  # scrapes in between: each must show the totals, none may add twice
            got = samples(metrics.render().decode(), NAMES)
            want = samples(generate_latest(ref.registry).decode(), NAMES)
            assert got.keys() == want.keys()
            for key, value in want.items():
                assert abs(got[key] - value) <= 1e-9 * max(1.0, abs(value)), key


def test_request_count_per_tf_status_follows_the_totals() -> None:
    metrics = Metrics()
    for _ in range(3):
        metrics.on_request(model="m", version="1", api="predict", protocol="tfserving", code=None, seconds=0.001)
    metrics.on_request(
        model="m", version="1", api="predict", protocol="tfserving", code=ErrorCode.UNAVAILABLE, seconds=0.001
    )
    text = metrics.render().decode()
    assert ':tensorflow:serving:request_count{model_name="m",status="OK"} 3.0' in text
    assert ':tensorflow:serving:request_count{model_name="m",status="UNAVAILABLE"} 1.0' in text
    metrics.on_request(model="m", version="1", api="predict", protocol="tfserving", code=None, seconds=0.001)
    assert ':tensorflow:serving:request_count{model_name="m",status="OK"} 4.0' in metrics.render().decode()
