"""Admission under overload on a real ``servekit serve``: once admitted requests have kept waiting past the target,
requests past the limit are answered 503 with Retry-After (the connection answers them as their heads are parsed),
the model never sees them, and a client that sends again at once on the same connection is refused too."""

from __future__ import annotations

import http.client
import json
import textwrap
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

HANDLER = textwrap.dedent(
    """
    import time
    from pathlib import Path

    import numpy as np

    CALLS = Path({calls!r})


    def model_fn(model_dir):
        return 2.0


    def predict_fn(data, model):
        with open(CALLS, "a") as f:
            f.write("1\\n")
        time.sleep(0.1)
        return np.asarray(data, dtype=np.float64) * model
    """
).lstrip()

MANIFEST = textwrap.dedent(
    """
    [[signatures]]
    name = "serving_default"
    inputs = [{name = "inputs", datatype = "FP64", shape = [-1, 4]}]
    outputs = [{name = "outputs", datatype = "FP64", shape = [-1, 4]}]
    """
).lstrip()

BODY = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0]]})


def post(url: str) -> requests.Response:
    return requests.post(url, data=BODY, timeout=30)


def shed_total(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "servekit_overload_shed_total":
                return float(sample.value)
    raise AssertionError("servekit_overload_shed_total is not in /metrics")


def test_past_the_limit_requests_are_refused_with_retry_after_and_never_run(
    server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    version = tmp_path / "slow" / "1"
    (version / "code").mkdir(parents=True)
    calls = tmp_path / "calls"
    (version / "code" / "inference.py").write_text(HANDLER.format(calls=str(calls)))
    (version / "servekit.toml").write_text(MANIFEST)
    srv = server_factory(
        "--model_base_path",
        str(tmp_path / "slow"),
        "--model_name",
        "slow",
        "--num_inference_threads",
        "1",
        "--file_system_poll_wait_seconds",
        "0",
        # Any wait past three runs of the model (0.3 s) is over this target; each answer closes an interval.
        "--overload_target_ms",
        "1",
        "--overload_interval_ms",
        "0.001",
    )
    srv.wait_ready()
    url = f"{srv.url}/v1/models/slow:predict"

    # 16 at once on one model thread: the k-th waits (k-1) x 0.1 s, so from the 5th on each answer halves the limit.
    with ThreadPoolExecutor(16) as pool:
        first = list(pool.map(lambda _: post(url), range(16)))
    assert all(r.status_code == 200 for r in first), [r.text for r in first]

    # 24 at once: about as many as the limit's floor (4) get in before the first answer (0.1 s) can grow it.
    runs_before = len(calls.read_text().splitlines())
    with ThreadPoolExecutor(24) as pool:
        second = list(pool.map(lambda _: post(url), range(24)))
    ok = [r for r in second if r.status_code == 200]
    refused = [r for r in second if r.status_code != 200]
    assert ok, "nothing was let in"
    assert len(refused) >= 12, f"{len(ok)} of 24 were let in"
    for r in refused:
        assert r.status_code == 503 and r.headers["Retry-After"] == "1", (r.status_code, r.headers)
        assert "overloaded" in r.json()["error"]
    assert len(calls.read_text().splitlines()) == runs_before + len(ok)  # refused requests never ran
    assert shed_total(srv.url) >= len(refused)

    # A client that ignores Retry-After, while others keep the model busy: once one of its requests is refused,
    # the next it sends at once on that connection is read only after Retry-After, and refused as soon as read.
    stop = threading.Event()

    def keep_busy() -> None:
        while not stop.is_set():
            post(url)

    port = int(srv.url.rsplit(":", 1)[1])
    with ThreadPoolExecutor(12) as pool:
        for _ in range(12):
            pool.submit(keep_busy)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        statuses = []
        try:
            for _ in range(50):  # until the gate refuses one of its requests
                status, retry_after, error = send(conn)
                statuses.append(status)
                if status == 503:
                    assert retry_after == "1" and "overloaded" in error
                    break
            assert statuses[-1] == 503, f"no refusal in {len(statuses)} requests"
            assert send(conn)[:2] == (503, "1")  # sent at once: held, then refused
        finally:
            stop.set()
            conn.close()

    # Recovery: sequential requests are served.
    for _ in range(3):
        assert post(url).status_code == 200


def send(conn: http.client.HTTPConnection) -> tuple[int, str | None, str]:
    conn.request("POST", "/v1/models/slow:predict", body=BODY, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    return resp.status, resp.getheader("Retry-After"), str(body.get("error", ""))
