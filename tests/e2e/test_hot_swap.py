"""Hot swap under load against a real ``servekit serve`` process polling a real model directory.

The guarantees under test (TF Serving's availability-preserving policy with the default ``latest{1}``):
a new version is loaded before the old one is unloaded, so no request fails during a swap; once the new
version answers, "latest" never goes back; a version that fails to load never displaces a working one.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import requests
from numpy.testing import assert_allclose

from servekit.tools.demo.build import iris_onnx

pytestmark = pytest.mark.e2e

ROW = [5.9, 3.0, 4.2, 1.5]  # a versicolor row, where the two iris versions disagree most
POLL_ARGS = (
    "--file_system_poll_wait_seconds",
    "0.2",
    "--max_num_load_retries",
    "1",
    "--load_retry_interval_micros",
    "100000",
)
GARBAGE = b"this is not an ONNX protobuf \x00\xff\x13\x37" * 64


def _reference(version_dir: Path) -> np.ndarray[Any, Any]:
    sess = ort.InferenceSession(str(version_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    (probs,) = sess.run(["probabilities"], {"X": np.asarray([ROW], dtype=np.float32)})
    return np.asarray(probs[0])


@dataclass(frozen=True)
class Record:
    status: int  # -1: no HTTP response at all
    version: str | None  # x-servekit-model-version
    at: float  # time.monotonic() when the response arrived
    probabilities: list[float] | None
    error: str = ""


class Load:
    """One client thread sending :predict back to back until stopped, a request cap or a deadline."""

    def __init__(self, url: str, max_requests: int = 50_000, max_seconds: float = 90.0) -> None:
        self.url = url
        self.records: list[Record] = []
        self._stop = threading.Event()
        self._max_requests = max_requests
        self._deadline = time.monotonic() + max_seconds
        self._thread = threading.Thread(target=self._run, name="e2e-load", daemon=True)

    def _run(self) -> None:
        body = json.dumps({"instances": [ROW]})
        with requests.Session() as s:
            while (
                not self._stop.is_set() and len(self.records) < self._max_requests and time.monotonic() < self._deadline
            ):
                try:
                    r = s.post(self.url, data=body, timeout=10)
                except requests.RequestException as exc:
                    self.records.append(Record(-1, None, time.monotonic(), None, repr(exc)))
                    continue
                probs = r.json()["predictions"][0]["probabilities"] if r.status_code == 200 else None
                self.records.append(
                    Record(
                        r.status_code,
                        r.headers.get("x-servekit-model-version"),
                        time.monotonic(),
                        probs,
                        "" if r.status_code == 200 else r.text,
                    )
                )

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> list[Record]:
        self._stop.set()
        self._thread.join(timeout=15)
        assert not self._thread.is_alive(), "the load thread did not stop"
        return list(self.records)

    def wait(self, what: str, done: Callable[[list[Record]], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._thread.is_alive(), f"the load thread ended early while waiting for {what}"
            if done(list(self.records)):
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; {len(self.records)} requests sent")

    def wait_more(self, n: int, timeout: float = 30.0) -> None:
        target = len(self.records) + n
        self.wait(f"{n} more responses", lambda recs: len(recs) >= target, timeout)


def _status(url: str) -> dict[str, dict[str, Any]]:
    r = requests.get(url, timeout=5)
    assert r.status_code == 200, r.text
    return {s["version"]: s for s in r.json()["model_version_status"]}


def _wait_status(
    url: str, what: str, done: Callable[[dict[str, dict[str, Any]]], bool], timeout: float = 30.0
) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    last: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        last = _status(url)
        if done(last):
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last status: {last}")


def _failed_version3(status: dict[str, dict[str, Any]]) -> bool:
    v3 = status.get("3")
    return v3 is not None and v3["state"] == "END" and v3["status"]["error_code"] != "OK"


def test_hot_swap_under_load_then_a_corrupt_version(
    server_factory: Callable[..., Any], tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    base = tmp_path / "iris"
    staging = tmp_path / "staging"  # outside the model base, same file system: os.rename is atomic
    v1_dir = iris_onnx(base / "1", c=0.05)
    iris_onnx(staging / "2", c=1.0)
    (staging / "3").mkdir()
    (staging / "3" / "model.onnx").write_bytes(GARBAGE)
    expected = {"1": _reference(v1_dir), "2": _reference(staging / "2")}
    assert np.abs(expected["1"] - expected["2"]).max() > 0.05, "the two versions must be told apart by output"

    srv = server_factory("--model_base_path", str(base), "--model_name", "iris", *POLL_ARGS)
    srv.wait_ready()
    status_url = f"{srv.url}/v1/models/iris"
    with Load(f"{srv.url}/v1/models/iris:predict") as load:
        load.wait_more(20)

        # 1. Version 2 appears atomically; latest{1} loads it, serves it, then unloads version 1.
        swap_at = time.monotonic()
        os.rename(staging / "2", base / "2")
        load.wait("a response from version 2", lambda recs: any(r.version == "2" for r in recs))
        first_v2 = next(r for r in load.records if r.version == "2")
        switch_s = first_v2.at - swap_at
        record_property("hot_swap_switch_seconds", round(switch_s, 3))
        print(f"hot swap: first version-2 response {switch_s:.3f}s after the rename")
        shutil.rmtree(base / "1")
        status = _wait_status(
            status_url,
            "version 1 to be unloaded",
            lambda s: s.get("2", {}).get("state") == "AVAILABLE" and s.get("1", {"state": "END"})["state"] == "END",
        )
        assert status["2"]["status"] == {"error_code": "OK", "error_message": ""}
        load.wait_more(20)

        # 2. A corrupt version 3 must not displace version 2.
        os.rename(staging / "3", base / "3")
        status = _wait_status(status_url, "version 3 to fail loading", _failed_version3)
        load.wait_more(20)
        records = load.stop()

    failed = [r for r in records if r.status != 200]
    assert not failed, f"{len(failed)} of {len(records)} requests failed while versions changed; first: {failed[0]}"

    versions = [r.version for r in records]
    assert versions[0] == "1"
    first_v2_index = versions.index("2")
    assert set(versions[:first_v2_index]) == {"1"}
    back = [i for i, v in enumerate(versions[first_v2_index:], first_v2_index) if v != "2"]
    assert not back, f"after the first version-2 response, request {back[0]} got version {versions[back[0]]}"
    # the last 20 responses were sent after version 3 had failed: version 2 kept serving them
    assert versions[-20:] == ["2"] * 20

    for r in records:  # each body came from the version its header names
        assert r.version is not None and r.probabilities is not None
        assert_allclose(r.probabilities, expected[r.version], rtol=1e-5, atol=1e-6)

    assert status["2"]["state"] == "AVAILABLE"
    assert status["2"]["status"]["error_code"] == "OK"
    v3 = status["3"]
    assert v3["state"] == "END"
    assert v3["status"]["error_code"] != "OK"
    message = v3["status"]["error_message"]
    assert "model.onnx" in message and "load" in message.lower(), message

    # Version 2 still answers after the failed load; asking for version 3 by number says why it cannot.
    r = requests.post(f"{srv.url}/v1/models/iris:predict", data=json.dumps({"instances": [ROW]}), timeout=5)
    assert r.status_code == 200 and r.headers["x-servekit-model-version"] == "2", r.text
    r = requests.post(f"{srv.url}/v1/models/iris/versions/3:predict", json={"instances": [ROW]}, timeout=5)
    assert r.status_code == 404, r.text
    assert "failed to load" in r.json()["error"]
    assert requests.get(f"{srv.url}/v2/health/ready", timeout=5).status_code == 200
    assert requests.get(f"{srv.url}/v2/models/iris/versions/3/ready", timeout=5).status_code != 200
    assert srv.proc.poll() is None, srv.log()

    # The order the policy promises, as the server logged it: version 2 available, then version 1 unloaded.
    log = srv.log()
    assert log.index("model iris version 2 is AVAILABLE") < log.index("model iris version 1 unloaded"), log
    assert "Traceback" not in log, log


def test_a_server_whose_only_version_is_corrupt_stays_up(server_factory: Callable[..., Any], tmp_path: Path) -> None:
    base = tmp_path / "iris"
    (base / "1").mkdir(parents=True)
    (base / "1" / "model.onnx").write_bytes(GARBAGE)
    srv = server_factory("--model_base_path", str(base), "--model_name", "iris", *POLL_ARGS)
    srv.wait_ready(path="/v2/health/live")

    status = _wait_status(
        f"{srv.url}/v1/models/iris",
        "version 1 to fail loading",
        lambda s: s.get("1", {}).get("state") == "END",
    )
    v1 = status["1"]
    assert v1["status"]["error_code"] != "OK"
    assert "model.onnx" in v1["status"]["error_message"]

    r = requests.post(f"{srv.url}/v1/models/iris:predict", json={"instances": [ROW]}, timeout=5)
    assert r.status_code == 503, r.text
    error = r.json()["error"]
    assert "version 1" in error and "model.onnx" in error, error
    v2 = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": ROW}]}
    r = requests.post(f"{srv.url}/v2/models/iris/infer", json=v2, timeout=5)
    assert r.status_code == 503, r.text
    assert requests.get(f"{srv.url}/v2/health/ready", timeout=5).status_code == 400
    assert requests.get(f"{srv.url}/ping", timeout=5).status_code == 503
    assert requests.get(f"{srv.url}/v2/health/live", timeout=5).status_code == 200
    assert srv.proc.poll() is None, srv.log()

    # Still alive and still polling: a good version 2 is picked up and served.
    staging = iris_onnx(tmp_path / "staging" / "2")
    os.rename(staging, base / "2")
    srv.wait_ready(timeout=30)
    r = requests.post(f"{srv.url}/v1/models/iris:predict", json={"instances": [ROW]}, timeout=5)
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "2"
    # --max_num_load_retries 1: the corrupt version was tried twice, then left alone by later polls.
    attempts = [line for line in srv.log().splitlines() if "loading iris version 1 failed" in line]
    assert len(attempts) == 2, "\n".join(attempts)
    assert srv.proc.poll() is None, srv.log()
    assert "Traceback" not in srv.log(), srv.log()
