"""``servekit bench`` against a real ``servekit serve`` of the iris ONNX model, run as the user runs it.

Tests assert correctness (every request sent and answered, errors counted); no rate or latency threshold is asserted:
how fast a machine is belongs to benchmarks/, not the test suite.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servekit.tools.bench.runner import run_bench
from servekit.tools.bench.spec import BenchSpec
from servekit.tools.demo.build import iris_onnx

pytestmark = pytest.mark.e2e


def _servekit() -> list[str]:
    script = Path(sys.executable).parent / "servekit"
    return [str(script)] if script.exists() else [sys.executable, "-m", "servekit.cli.main"]


def bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_servekit(), "bench", *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def url(module_server_factory: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> str:
    base = tmp_path_factory.mktemp("bench-models")
    iris_onnx(base / "iris" / "1")
    srv = module_server_factory("--model_name", "iris", "--model_base_path", str(base / "iris"))
    srv.wait_ready()
    return str(srv.url)


def _phase(report_path: Path) -> dict[str, Any]:
    report = json.loads(report_path.read_text())
    assert report["schema"] == "servekit.bench/1"
    assert len(report["phases"]) == 1
    phase: dict[str, Any] = report["phases"][0]
    return phase


def test_closed_loop_200_requests(url: str, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = bench("--url", url, "--model", "iris", "--requests", "200", "--concurrency", "8", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress when stderr is not a terminal
    assert "c=8" in proc.stdout and "network+client" in proc.stdout
    report = json.loads(out.read_text())
    assert report["interrupted"] is False
    assert report["target"] == {
        "url": url,
        "protocol": "tfserving",
        "model": "iris",
        "version": None,
        "method": "POST",
        "path": "/v1/models/iris:predict",
        "engine": "asyncio",
        "loop": "closed",
        "rows_per_request": 1,
        "distinct_bodies": 16,
    }
    p = _phase(out)
    assert (p["loop"], p["concurrency"], p["target_rate"]) == ("closed", 8, None)
    assert p["requests"] == 200 and p["ok"] == 200 and p["errors"] == {} and p["dropped"] == 0
    lat = p["latency_ms"]
    assert list(lat) == ["mean", "p50", "p90", "p95", "p99", "max"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    tp = p["throughput"]
    assert tp["requests_per_s"] > 0 and tp["rows_per_s"] == pytest.approx(tp["ok_per_s"])
    split = p["server_ms"]
    assert split["samples"] == 200
    for name in ("queue", "model", "total", "overhead"):
        assert set(split[name]) == {"mean", "p99"}, name
    assert 0 < split["model"]["mean"] <= split["total"]["mean"] < lat["mean"]
    assert split["overhead"]["mean"] == pytest.approx(lat["mean"] - split["total"]["mean"], rel=1e-6, abs=1e-6)


def test_open_loop_sends_and_completes_every_request(url: str, tmp_path: Path) -> None:
    out = tmp_path / "open.json"
    proc = bench("--url", url, "--model", "iris", "--rate", "100", "--requests", "150", "--json", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    p = _phase(out)
    assert (p["loop"], p["target_rate"], p["max_outstanding"]) == ("open", 100.0, 1024)
    assert p["requests"] == 150 and p["ok"] == 150 and p["errors"] == {} and p["dropped"] == 0
    assert p["server_ms"]["samples"] == 150


def test_unknown_model_counts_404s(url: str, tmp_path: Path) -> None:
    bodies = tmp_path / "bodies.jsonl"
    bodies.write_text('{"instances": [[5.1, 3.5, 1.4, 0.2]]}\n{"instances": [[6.2, 2.9, 4.3, 1.3]]}\n')
    out = tmp_path / "404.json"
    proc = bench(
        "--url", url, "--model", "nope", "--body-file", str(bodies), "--requests", "50", "--concurrency", "4",
        "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    p = _phase(out)
    assert p["requests"] == 50 and p["ok"] == 0 and p["errors"] == {"404": 50}
    assert p["latency_ms"] is None and p["server_ms"] is None
    assert "404: 50" in proc.stdout


def test_unknown_model_without_bodies_explains(url: str) -> None:
    proc = bench("--url", url, "--model", "nope", "--requests", "5")
    assert proc.returncode == 1
    assert "GET /v2/models/nope answered 404" in proc.stderr and "--body_file" in proc.stderr


def test_bad_options_exit_2(url: str) -> None:
    proc = bench("--url", url, "--model", "iris", "--rate", "10", "--engine", "wrk")
    assert proc.returncode == 2 and "closed loop only" in proc.stderr


@pytest.mark.parametrize(
    "options",
    [
        {"protocol": "tfserving", "version": 1},
        {"protocol": "kserve"},
        {"protocol": "kserve", "binary": True, "version": 1},
        {"protocol": "sagemaker"},
        {"protocol": "sagemaker", "csv": True},
    ],
    ids=["tfserving", "kserve", "kserve-binary", "sagemaker-json", "sagemaker-csv"],
)
def test_every_protocol(url: str, options: dict[str, Any]) -> None:
    report = run_bench(BenchSpec(url=url, model="iris", rows=3, levels=(2.0,), duration_s=None, requests=40, **options))
    p = report["phases"][0]
    assert p["ok"] == 40 and p["errors"] == {}, p["errors"]
    assert p["throughput"]["rows_per_s"] == pytest.approx(3 * p["throughput"]["ok_per_s"])
    assert p["server_ms"]["samples"] == 40


def test_phases_step_the_load(url: str) -> None:
    report = run_bench(BenchSpec(url=url, model="iris", levels=(1.0, 4.0), duration_s=None, requests=30))
    assert [(p["concurrency"], p["ok"]) for p in report["phases"]] == [(1, 30), (4, 30)]
    report = run_bench(BenchSpec(url=url, model="iris", loop="open", levels=(50.0, 100.0), duration_s=0.3))
    assert [p["target_rate"] for p in report["phases"]] == [50.0, 100.0]
    assert all(p["ok"] > 0 and p["errors"] == {} for p in report["phases"])


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_wrk_engine(url: str, tmp_path: Path) -> None:
    out = tmp_path / "wrk.json"
    proc = bench(
        "--url", url, "--model", "iris", "--engine", "wrk", "--duration", "1s", "--concurrency", "2",
        "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    p = _phase(out)
    assert p["ok"] > 0 and p["errors"] == {} and p["concurrency"] == 2
    lat = p["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert p["server_ms"]["samples"] == p["ok"]
    assert json.loads(out.read_text())["target"]["engine"] == "wrk"
