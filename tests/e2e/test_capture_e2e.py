"""Capture in a real ``servekit serve``: sampled records land in hourly partitions, flushed on shutdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
from tests.e2e.conftest import ServerProcess

from servekit.tools.demo.build import iris_onnx

pytestmark = pytest.mark.e2e

ROW = [5.1, 3.5, 1.4, 0.2]


def records(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(root.rglob("*.jsonl")) for line in f.read_text().splitlines()]


@pytest.mark.parametrize(("percentage", "low", "high"), [(100, 300, 300), (10, 10, 55)])
def test_sampled_capture(server_factory: Any, tmp_path: Path, percentage: int, low: int, high: int) -> None:
    iris_onnx(tmp_path / "iris" / "1")
    dest = tmp_path / "capture"
    srv: ServerProcess = server_factory(
        "--model_base_path",
        str(tmp_path / "iris"),
        "--model_name",
        "iris",
        "--capture_destination",
        str(dest),
        "--capture_sampling_percentage",
        str(percentage),
    )
    srv.wait_ready()
    with requests.Session() as s:
        for _ in range(300):
            r = s.post(f"{srv.url}/v1/models/iris:predict", json={"instances": [ROW]}, timeout=10)
            assert r.status_code == 200
    srv.stop()  # graceful shutdown flushes the buffer and publishes open files
    recs = records(dest)
    # 10% of 300: mean 30, sd ~5.2; the bounds are about four sd wide on each side
    assert low <= len(recs) <= high, len(recs)
    parts = {f.parent.relative_to(dest).parts[:2] for f in dest.rglob("*.jsonl")}
    assert parts == {("iris", "1")}
    assert not list(dest.rglob("*.tmp"))
    first = recs[0]["captureData"]
    (x,) = json.loads(first["endpointInput"]["data"])["inputs"]  # the tensor the model got, as V2 JSON
    assert x["name"] == "X" and x["shape"] == [1, 4] and x["data"] == pytest.approx(ROW)
    assert {o["name"] for o in json.loads(first["endpointOutput"]["data"])["outputs"]}


def test_captured_traffic_is_read_by_the_monitor(server_factory: Any, tmp_path: Path) -> None:
    """Serve with capture, shift one feature in the traffic, and let `servekit monitor` find it."""
    import subprocess
    import sys

    import numpy as np

    iris_onnx(tmp_path / "iris" / "1")
    rng = np.random.default_rng(3)
    base = np.array(ROW) + rng.normal(0, 0.3, size=(3000, 4))
    train = tmp_path / "train.csv"
    header = "sepal_length,sepal_width,petal_length,petal_width"
    train.write_text(header + "\n" + "\n".join(",".join(f"{v:.4f}" for v in r) for r in base) + "\n")
    dest = tmp_path / "capture"
    srv: ServerProcess = server_factory(
        "--model_base_path", str(tmp_path / "iris"), "--model_name", "iris", "--capture_destination", str(dest)
    )
    srv.wait_ready()
    live = np.array(ROW) + rng.normal(0, 0.3, size=(300, 4))
    live[:, 0] += 3.0  # sepal_length drifts; the other three do not
    with requests.Session() as s:
        for row in live:
            r = s.post(f"{srv.url}/v1/models/iris:predict", json={"instances": [row.round(4).tolist()]}, timeout=10)
            assert r.status_code == 200
    srv.stop()

    def monitor(*args: str) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "servekit.cli.main", "monitor", *args], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr

    monitor("baseline", "--data", str(train), "--out", str(tmp_path / "baseline"))
    monitor(
        "run",
        "--baseline",
        str(tmp_path / "baseline"),
        "--data",
        str(dest),
        "--out",
        str(tmp_path / "out"),
        "--window",
        "24h",
        "--min-window-rows",
        "100",
        "--consecutive",
        "1",
    )
    doc = json.loads((tmp_path / "out" / "metrics.json").read_text())
    windows = [w for w in doc["windows"] if w["status"] == "ok"]
    assert sum(w["rows"] for w in windows) == 300  # every captured request was read back
    (window,) = windows
    features = window["features"]
    assert features["sepal_length"]["drifted"]
    # The shifted feature stands far apart; the unshifted ones sit near their thresholds (a single window
    # may cross one by chance, which is what the consecutive-window rule is for).
    shifted = features["sepal_length"]["metrics"]["wasserstein_norm"]
    for name in ("sepal_width", "petal_length", "petal_width"):
        assert features[name]["metrics"]["wasserstein_norm"] < shifted / 10, name
