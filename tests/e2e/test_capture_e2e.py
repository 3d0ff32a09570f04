"""Capture in a real ``servekit serve``: sampled records land in hourly partitions, flushed on shutdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
from tests.e2e.conftest import ServerProcess

from servekit.demo.build import iris_onnx

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
    assert json.loads(first["endpointInput"]["data"]) == {"instances": [ROW]}
    assert "predictions" in json.loads(first["endpointOutput"]["data"])
