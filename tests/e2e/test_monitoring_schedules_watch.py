"""``servekit monitor watch --metrics-port``: a real watch process serves its latest verdict as Prometheus text."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import requests
from tests.e2e.conftest import free_port

pytestmark = pytest.mark.e2e


def write_csv(path: Path, values: np.ndarray, start: datetime) -> None:
    """Columns ts, x, y; rows a minute apart from ``start``."""
    lines = ["ts,x,y"]
    for i, (a, b) in enumerate(values):
        lines.append(f"{(start + timedelta(minutes=i)).strftime('%Y-%m-%dT%H:%M:%SZ')},{a:.5f},{b:.5f}")
    path.write_text("\n".join(lines) + "\n")


def test_watch_serves_its_latest_verdict_on_a_metrics_port(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    # yesterday (UTC) is a whole window of one day that has ended: the watch's first run judges it
    yesterday = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    write_csv(tmp_path / "train.csv", rng.normal(0, 1, size=(2000, 2)), yesterday - timedelta(days=3))
    live = rng.normal(0, 1, size=(600, 2))
    live[:, 1] += 2.0  # y drifts
    write_csv(tmp_path / "live.csv", live, yesterday)
    cli = [sys.executable, "-m", "servekit.cli.main", "monitor"]
    made = subprocess.run(
        [*cli, "baseline", "--data", str(tmp_path / "train.csv"), "--out", str(tmp_path / "baseline"),
         "--timestamp-column", "ts"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    port = free_port()
    log = tmp_path / "watch.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*cli, "watch", "--baseline", str(tmp_path / "baseline"), "--data", str(tmp_path / "live.csv"),
             "--timestamp-column", "ts", "--out", str(tmp_path / "watch"), "--window", "1d", "--every", "1s",
             "--no-report", "--metrics-port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        text = ""
        while 'servekit_monitor_feature_drifted{feature="y"} 1.0' not in text:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no verdict served:\n{text}\n{log.read_text()}"
            try:
                response = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
                assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = response.text
            except requests.ConnectionError:  # not listening yet
                pass
            time.sleep(0.2)
        assert 'servekit_monitor_feature_drifted{feature="x"} 0.0' in text
        assert 'servekit_monitor_watch_runs_total{outcome="ok"}' in text
        assert "servekit_monitor_watch_last_success_timestamp_seconds" in text
        assert requests.get(f"http://127.0.0.1:{port}/other", timeout=5).status_code == 404
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert proc.returncode == 0, log.read_text()
