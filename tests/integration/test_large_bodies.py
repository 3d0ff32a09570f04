"""Large bodies are decoded and answered off the event loop, on the large-body lane; small ones inline."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from servekit.codecs import sagemaker as sagemaker_codec
from servekit.codecs import v2 as v2_codec
from servekit.config.models import ServerConfig
from servekit.protocols import kserve_v2, large, tfserving_rest
from servekit.testing.app_client import app_client

ROW = [5.1, 3.5, 1.4, 0.2]


@pytest.fixture(scope="module")
def client(demo_config: ServerConfig) -> Iterator[TestClient]:
    with app_client(dataclasses.replace(demo_config, max_request_bytes=16 << 20)) as c:
        yield c


def record_threads(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[str]:
    seen: list[str] = []
    real: Callable[..., Any] = getattr(module, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


def test_tf_predict_decodes_a_large_body_on_the_lane(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = record_threads(monkeypatch, tfserving_rest, "decode_predict")
    rows = np.tile(ROW, (large.LARGE_BODY_BYTES // 16 + 1, 1)).tolist()  # 18 bytes a row in JSON
    big = client.post("/v1/models/iris:predict", json={"instances": rows})
    assert big.status_code == 200 and len(big.json()["predictions"]) == len(rows)
    small = client.post("/v1/models/iris:predict", json={"instances": [ROW]})
    assert small.status_code == 200
    assert seen[0].startswith("servekit-large-body")
    assert not seen[1].startswith("servekit-large-body")  # a small body stays on the loop: no hop


def test_kserve_and_sagemaker_decode_large_bodies_on_the_lane(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_v2 = record_threads(monkeypatch, kserve_v2, "parse_infer_request")
    n = large.LARGE_BODY_BYTES // 16 + 1
    data = np.tile(ROW, n).tolist()
    r = client.post(
        "/v2/models/iris/infer", json={"inputs": [{"name": "X", "shape": [n, 4], "datatype": "FP32", "data": data}]}
    )
    assert r.status_code == 200, r.text[:200]
    assert seen_v2 == ["servekit-large-body-0"]

    seen_sm = record_threads(monkeypatch, sagemaker_codec, "decode_csv")
    csv = ("\n".join(",".join(map(str, ROW)) for _ in range(n)) + "\n").encode()
    r = client.post(
        "/invocations",
        content=csv,
        headers={"Content-Type": "text/csv", "X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=iris"},
    )
    assert r.status_code == 200, r.text[:200]
    assert seen_sm == ["servekit-large-body-0"]
    assert v2_codec.HEADER_LENGTH  # the codec module the adapter uses is the one patched above


def test_a_large_body_a_handler_model_takes_raw_is_not_refused_by_the_tensor_decoder(client: TestClient) -> None:
    body = b'{"features": [' + b",".join([b"[5.1, 3.5, 1.4, 0.2]"] * (large.LARGE_BODY_BYTES // 20 + 1)) + b"]}"
    r = client.post(
        "/invocations",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=iris_handler",
        },
    )
    assert r.status_code == 200, r.text[:300]
