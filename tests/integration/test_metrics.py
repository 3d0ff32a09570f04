"""Prometheus metrics at /monitoring/prometheus/metrics (TF Serving's path) and /metrics.

This module gets its own server (the ``client`` fixture is module-scoped), so the counts here move only
with the requests these tests send.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

PATHS = ("/monitoring/prometheus/metrics", "/metrics")
ROW = [5.1, 3.5, 1.4, 0.2]
SM_IRIS = {"X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=iris"}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: TestClient, path: str = "/metrics") -> Samples:
    r = client.get(path)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, labels: Mapping[str, str]) -> float:
    """The sample with exactly these labels; 0 when it does not exist yet."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def _good_requests(client: TestClient) -> None:
    assert client.post("/v1/models/iris:predict", json={"instances": [ROW]}).status_code == 200
    infer = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": ROW}]}
    assert client.post("/v2/models/iris/infer", json=infer).status_code == 200
    assert client.post("/invocations", json=[ROW], headers=SM_IRIS).status_code == 200


@pytest.mark.parametrize("path", PATHS)
def test_request_count_grows_with_ok_requests(client: TestClient, path: str) -> None:
    name = ":tensorflow:serving:request_count"
    ok = {"model_name": "iris", "status": "OK"}
    before = value(scrape(client, path), name, ok)
    _good_requests(client)
    after = scrape(client, path)
    assert value(after, name, ok) == before + 3
    text = client.get(path).text
    assert f'{name}{{model_name="iris",status="OK"}} {before + 3}' in text


def test_request_count_counts_failures_apart(client: TestClient) -> None:
    name = ":tensorflow:serving:request_count"
    before = scrape(client)
    r = client.post("/v1/models/iris/versions/9:predict", json={"instances": [ROW]})
    assert r.status_code == 404
    after = scrape(client)
    ok = {"model_name": "iris", "status": "OK"}
    assert value(after, name, ok) == value(before, name, ok)
    failed = {"model_name": "iris", "status": "NOT_FOUND"}
    assert value(after, name, failed) == value(before, name, failed) + 1


def test_request_latency_histogram_records_successes_only(client: TestClient) -> None:
    bucket = ":tensorflow:serving:request_latency_bucket"
    count = ":tensorflow:serving:request_latency_count"
    labels = {"model_name": "iris", "API": "predict", "entrypoint": "REST"}
    before = scrape(client)
    assert client.post("/v1/models/iris:predict", json={"instances": [ROW]}).status_code == 200
    assert client.post("/v1/models/iris:predict", json={"instances": [[1, 2]]}).status_code == 400
    after = scrape(client)
    assert value(after, count, labels) == value(before, count, labels) + 1
    inf = {**labels, "le": "+Inf"}
    assert value(after, bucket, inf) == value(before, bucket, inf) + 1
    # TF Serving's buckets: 10us * 1.8^i; the first bound is 10.
    assert (bucket, frozenset({**labels, "le": "10.0"}.items())) in after


@pytest.mark.parametrize(
    ("path", "body", "api"),
    [
        ("/v1/models/iris:classify", {"examples": [{"x": ROW}]}, "classify"),
        ("/v1/models/diabetes:regress", {"examples": [{"x": [0.01] * 10}]}, "regress"),
        ("/v1/models/iris:predict", {"instances": [ROW]}, "predict"),
    ],
)
def test_request_latency_api_label_names_the_method(client: TestClient, path: str, body: object, api: str) -> None:
    count = ":tensorflow:serving:request_latency_count"
    before = scrape(client)
    assert client.post(path, json=body).status_code == 200
    after = scrape(client)
    model = path.split("/")[3].split(":")[0]
    for other in ("predict", "classify", "regress"):
        labels = {"model_name": model, "API": other, "entrypoint": "REST"}
        grew = value(after, count, labels) - value(before, count, labels)
        assert grew == (1 if other == api else 0), other


def test_servekit_requests_total_by_protocol(client: TestClient) -> None:
    name = "servekit_requests_total"
    protocols = ("tfserving", "kserve_v2", "sagemaker")
    before = scrape(client)
    _good_requests(client)
    after = scrape(client)
    for protocol in protocols:
        got = total(after, name, model="iris", protocol=protocol, status="OK", version="2")
        assert got == total(before, name, model="iris", protocol=protocol, status="OK", version="2") + 1, protocol
    r = client.post("/invocations", json=[[1, 2]], headers=SM_IRIS)
    assert r.status_code == 400
    bad = scrape(client)
    assert total(bad, name, model="iris", protocol="sagemaker", status="INVALID_ARGUMENT") == (
        total(after, name, model="iris", protocol="sagemaker", status="INVALID_ARGUMENT") + 1
    )


@pytest.mark.parametrize(
    ("model", "version"),
    [("iris", "1"), ("iris", "2"), ("iris_sklearn", "1"), ("diabetes", "1"), ("iris_handler", "1")],
)
def test_servable_state(client: TestClient, model: str, version: str) -> None:
    samples = scrape(client)
    states = {
        dict(ls)["state"]: v
        for (n, ls), v in samples.items()
        if n == "servekit_servable_state" and dict(ls)["model"] == model and dict(ls)["version"] == version
    }
    assert states["AVAILABLE"] == 1.0
    assert sum(states.values()) == 1.0, states


def test_model_load_seconds(client: TestClient) -> None:
    samples = scrape(client)
    assert value(samples, "servekit_model_load_seconds_count", {"model": "iris", "outcome": "ok"}) == 2
    for model in ("iris_sklearn", "diabetes", "iris_handler"):
        assert value(samples, "servekit_model_load_seconds_count", {"model": model, "outcome": "ok"}) == 1
    assert total(samples, "servekit_model_load_seconds_count", outcome="error") == 0
    assert value(samples, "servekit_model_load_seconds_sum", {"model": "iris", "outcome": "ok"}) > 0


def test_both_paths_serve_the_same_registry(client: TestClient) -> None:
    a, b = (scrape(client, p) for p in PATHS)
    name = ":tensorflow:serving:request_count"
    keys = {k for k in a if k[0] == name}
    assert keys == {k for k in b if k[0] == name}
    assert all(a[k] == b[k] for k in keys)
