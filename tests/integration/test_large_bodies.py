"""Large bodies are decoded and answered in the large-body process; answers and errors are the same as inline."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterator

import numpy as np
import pytest
from starlette.testclient import TestClient

from servekit.config.models import ServerConfig
from servekit.serving.protocols.large import LARGE_BODY_BYTES, DecodeLane
from servekit.testing.app_client import app_client

ROW = [5.1, 3.5, 1.4, 0.2]
N = LARGE_BODY_BYTES // 16 + 1  # rows: over the threshold in every encoding below


@pytest.fixture(scope="module")
def client(demo_config: ServerConfig) -> Iterator[TestClient]:
    with app_client(dataclasses.replace(demo_config, max_request_bytes=16 << 20)) as c:
        yield c


def test_the_lane_runs_large_work_in_another_process_and_small_work_inline() -> None:
    async def main() -> tuple[int, int]:
        lane = DecodeLane(threshold=100)
        try:
            return await lane.run(100, os.getpid), await lane.run(99, os.getpid)
        finally:
            lane.close()

    large, small = asyncio.run(main())
    assert large != os.getpid()
    assert small == os.getpid()


def test_large_bodies_in_every_protocol_get_the_same_answers(client: TestClient) -> None:
    rows = np.tile(ROW, (N, 1)).tolist()
    small = client.post("/v1/models/iris:predict", json={"instances": [ROW]}).json()["predictions"][0]
    big = client.post("/v1/models/iris:predict", json={"instances": rows})
    assert big.status_code == 200
    preds = big.json()["predictions"]
    assert len(preds) == N
    for p in (preds[0], preds[-1]):  # batch size may move the last float digit, nothing more
        assert p["label"] == small["label"]
        assert np.allclose(p["probabilities"], small["probabilities"], rtol=1e-5, atol=1e-7)

    v2 = {"inputs": [{"name": "X", "shape": [N, 4], "datatype": "FP32", "data": np.tile(ROW, N).tolist()}]}
    r = client.post("/v2/models/iris/infer", json=v2)
    assert r.status_code == 200, r.text[:200]
    assert {o["name"]: o["shape"][0] for o in r.json()["outputs"]} == {"label": N, "probabilities": N}

    csv = ("\n".join(",".join(map(str, ROW)) for _ in range(N)) + "\n").encode()
    r = client.post(
        "/invocations",
        content=csv,
        headers={"Content-Type": "text/csv", "X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=iris"},
    )
    assert r.status_code == 200, r.text[:200]
    assert len(r.json()["predictions"]) == N


def test_a_bad_large_body_gets_the_same_400_as_a_small_one(client: TestClient) -> None:
    rows = np.tile(ROW, (N, 1)).tolist()
    rows[-1] = [1.0, 2.0]
    r = client.post("/v1/models/iris:predict", json={"instances": rows})
    inline = client.post("/v1/models/iris:predict", json={"instances": [ROW, [1.0, 2.0]]})
    assert r.status_code == inline.status_code == 400
    assert r.json() == inline.json()  # the error crossed the process boundary whole


def test_a_large_body_a_handler_model_takes_raw_is_not_refused_by_the_tensor_decoder(client: TestClient) -> None:
    body = b'{"features": [' + b",".join([b"[5.1, 3.5, 1.4, 0.2]"] * N) + b"]}"
    r = client.post(
        "/invocations",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=iris_handler",
        },
    )
    assert r.status_code == 200, r.text[:300]
