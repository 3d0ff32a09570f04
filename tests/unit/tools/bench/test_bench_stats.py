"""servekit bench: percentile maths against numpy, per-phase summaries and the report's shape."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from servekit.tools.bench.client import Response
from servekit.tools.bench.stats import (
    LATENCY_KEYS,
    SCHEMA,
    PhaseStats,
    Samples,
    build_report,
    percentile,
    render,
    summarize,
)

QS = (0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100)
DATASETS = {
    "one": [3.5],
    "two": [1.0, 2.0],
    "ties": [1.0, 1.0, 1.0, 2.0, 2.0, 9.0],
    "ints": list(range(1, 101)),
    "normal": np.random.default_rng(7).normal(10, 3, 997).tolist(),
    "lognormal": np.random.default_rng(8).lognormal(0, 1, 5000).tolist(),
}


@pytest.mark.parametrize("name", DATASETS)
def test_percentile_matches_numpy(name: str) -> None:
    data = DATASETS[name]
    ordered = sorted(data)
    for q in QS:
        assert percentile(ordered, q) == pytest.approx(float(np.percentile(data, q)), rel=1e-12, abs=1e-12), q


def test_percentile_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarize_against_numpy() -> None:
    data = DATASETS["lognormal"]
    s = summarize(data)
    assert s is not None
    assert list(s) == list(LATENCY_KEYS)
    assert s["mean"] == pytest.approx(np.mean(data))
    for q in (50, 90, 95, 99):
        assert s[f"p{q}"] == pytest.approx(np.percentile(data, q))
    assert s["max"] == max(data)
    assert s["p50"] <= s["p90"] <= s["p95"] <= s["p99"] <= s["max"]
    assert summarize([]) is None


def _resp(status: int, total: str | None = None, queue: str = "0.5", model: str = "1.0") -> Response:
    headers = {b"content-type": b"application/json"}
    if total is not None:
        headers |= {b"x-servekit-total-ms": total.encode(), b"x-servekit-queue-ms": queue.encode()}
        headers[b"x-servekit-model-ms"] = model.encode()
    return Response(status, headers, b"{}", True)


def test_samples_to_phase_stats() -> None:
    s = Samples()
    for i in range(100):
        s.response((i + 1) / 1000, _resp(200, total=f"{(i + 1) / 2:.3f}"), rows=2)  # server took half of it
    s.response(0.001, _resp(404), rows=2)
    s.response(0.001, _resp(404), rows=2)
    s.response(0.001, _resp(503), rows=2)
    s.connection_errors = 4
    s.timeouts = 1
    s.dropped = 7
    assert s.done == 108 and s.failed == 8
    p = PhaseStats.from_samples(s, loop="closed", duration_s=2.0, concurrency=8)
    doc = p.to_json()
    assert doc["requests"] == 108 and doc["ok"] == 100 and doc["dropped"] == 7
    assert doc["errors"] == {"404": 2, "503": 1, "connection": 4, "timeout": 1}
    assert doc["throughput"] == {"requests_per_s": 54.0, "ok_per_s": 50.0, "rows_per_s": 100.0}
    lat = doc["latency_ms"]
    expected = np.arange(1, 101, dtype=float)
    assert lat["p50"] == pytest.approx(np.percentile(expected, 50))
    assert lat["p99"] == pytest.approx(np.percentile(expected, 99))
    server = doc["server_ms"]
    assert server["samples"] == 100
    assert server["total"]["mean"] == pytest.approx(np.mean(expected / 2))
    assert server["overhead"]["mean"] == pytest.approx(np.mean(expected / 2))
    assert server["overhead"]["p99"] == pytest.approx(np.percentile(expected / 2, 99))
    assert server["queue"] == {"mean": 0.5, "p99": 0.5}


def test_no_server_headers_means_no_split_and_bad_headers_are_ignored() -> None:
    s = Samples()
    s.response(0.002, _resp(200), rows=1)
    s.response(0.002, _resp(200, total="garbage"), rows=1)
    doc = PhaseStats.from_samples(s, loop="open", duration_s=1.0, target_rate=10.0, max_outstanding=5).to_json()
    assert doc["server_ms"] is None
    assert doc["ok"] == 2
    assert doc["target_rate"] == 10.0 and doc["concurrency"] is None


def test_all_failed_has_no_latency() -> None:
    s = Samples()
    s.response(0.001, _resp(404), rows=1)
    doc = PhaseStats.from_samples(s, loop="closed", duration_s=1.0, concurrency=1).to_json()
    assert doc["latency_ms"] is None and doc["ok"] == 0 and doc["errors"] == {"404": 1}


def test_report_and_table() -> None:
    s = Samples()
    for i in range(10):
        s.response(0.001 * (i + 1), _resp(200, total="0.4"), rows=1)
    s.response(0.001, _resp(500), rows=1)
    phase = PhaseStats.from_samples(s, loop="closed", duration_s=1.0, concurrency=2)
    target = {"url": "http://x:1", "protocol": "kserve", "model": "m", "version": 3, "engine": "asyncio"}
    report = build_report({**target, "loop": "closed"}, [phase])
    assert report["schema"] == SCHEMA
    assert set(report["phases"][0]) == {
        "loop",
        "concurrency",
        "target_rate",
        "max_outstanding",
        "duration_s",
        "requests",
        "ok",
        "dropped",
        "errors",
        "throughput",
        "latency_ms",
        "server_ms",
    }
    buf = io.StringIO()
    render(report, Console(file=buf, width=160))
    text = buf.getvalue()
    assert "kserve m v3" in text and "c=2" in text and "500: 1" in text
    assert "network+client" in text
