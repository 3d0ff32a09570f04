"""A version that failed to load is loaded again, without a restart, once its files are fixed (issue 9, item 9).

Against a real ``servekit serve`` polling a real model directory: the only version's model file is garbage, so it
fails (every retry), reads END with a non-OK error code and the model answers 503; the file is then replaced by
a good model and the next poll, seeing the version's files changed, loads it. (Tests run as root, where chmod 000
does not stop reads, so a corrupt file that is then fixed stands in for unreadable permissions.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from servekit.tools.demo.build import iris_onnx

pytestmark = pytest.mark.e2e

ROW = [5.9, 3.0, 4.2, 1.5]
GARBAGE = b"this is not an ONNX protobuf \x00\xff\x13\x37" * 64


def _wait_status(url: str, done: Callable[[dict[str, Any]], bool], what: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = requests.get(url, timeout=5)
        assert r.status_code == 200, r.text
        last = {s["version"]: s for s in r.json()["model_version_status"]}
        if done(last):
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last status: {last}")


def test_a_failed_version_is_served_once_its_model_file_is_fixed(
    server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    base = tmp_path / "iris"
    (base / "1").mkdir(parents=True)
    (base / "1" / "model.onnx").write_bytes(GARBAGE)
    srv = server_factory(
        "--model_base_path",
        str(base),
        "--model_name",
        "iris",
        "--file_system_poll_wait_seconds",
        "0.2",
        "--max_num_load_retries",
        "1",
        "--load_retry_interval_micros",
        "100000",
    )
    srv.wait_ready(path="/v2/health/live")
    status_url = f"{srv.url}/v1/models/iris"
    status = _wait_status(status_url, lambda s: s.get("1", {}).get("state") == "END", "version 1 to fail")
    assert status["1"]["status"]["error_code"] != "OK"
    assert "model.onnx" in status["1"]["status"]["error_message"]
    r = requests.post(f"{srv.url}/v1/models/iris:predict", json={"instances": [ROW]}, timeout=5)
    assert r.status_code == 503, r.text

    # Fix the cause in place: a good model replaces the garbage (atomically, as a deploy would).
    good = iris_onnx(tmp_path / "staging" / "1")
    os.replace(good / "model.onnx", base / "1" / "model.onnx")

    srv.wait_ready(timeout=30)  # no restart: the running server picks the fixed version up
    r = requests.post(f"{srv.url}/v1/models/iris:predict", json={"instances": [ROW]}, timeout=5)
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "1"
    assert len(r.json()["predictions"][0]["probabilities"]) == 3
    status = _wait_status(status_url, lambda s: s["1"]["state"] == "AVAILABLE", "version 1 to be available")
    assert status["1"]["status"] == {"error_code": "OK", "error_message": ""}

    log = srv.log()
    # --max_num_load_retries 1: two failed attempts, none while the files stayed the same, then one good load.
    failed = [line for line in log.splitlines() if "loading iris version 1 failed" in line]
    assert len(failed) == 2, "\n".join(failed)
    assert "version 1 changed on disk since it failed to load" in log, log
    assert log.count("model iris version 1 is AVAILABLE") == 1, log
    assert srv.proc.poll() is None, log
    assert "Traceback" not in log, log
