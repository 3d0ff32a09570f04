"""Capture through the whole app: which exchanges are captured, in which partition, with what content."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from starlette.testclient import TestClient
from tests.conftest import wait_ready

from servekit.config.models import CaptureConfig, ServerConfig
from servekit.testing.app_client import serving_app


def read_records(root: Path) -> list[dict[str, object]]:
    out = []
    for f in sorted(root.rglob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines()]
    return out


def test_every_protocol_is_captured_and_nothing_else(demo_config: ServerConfig, tmp_path: Path) -> None:
    dest = tmp_path / "capture"
    cfg = ServerConfig(
        models=demo_config.models,
        file_system_poll_wait_seconds=0,
        capture=CaptureConfig(destination=str(dest), flush_seconds=3600),
    )
    row = [5.1, 3.5, 1.4, 0.2]
    with TestClient(serving_app(cfg), raise_server_exceptions=False) as c:
        wait_ready(c)
        assert c.post("/v1/models/iris/versions/1:predict", json={"instances": [row]}).status_code == 200
        v2 = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": row}]}
        assert c.post("/v2/models/iris/versions/1/infer", json=v2).status_code == 200
        npy = io.BytesIO()
        np.save(npy, np.array([row]))
        r = c.post(
            "/invocations",
            content=npy.getvalue(),
            headers={
                "Content-Type": "application/x-npy",
                "X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=iris_sklearn",
            },
        )
        assert r.status_code == 200
        handler = c.post(
            "/invocations",
            json={"features": [row]},
            headers={"X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=iris_handler"},
        )
        assert handler.status_code == 200
        # not captured: errors, status and metadata reads
        assert c.post("/v1/models/iris:predict", json={"instances": [[1, 2]]}).status_code == 400
        assert c.get("/v1/models/iris/metadata").status_code == 200
        assert c.get("/v2/models/iris").status_code == 200
    recs = read_records(dest)
    assert len(recs) == 4
    by_model = {}
    for f in dest.rglob("*.jsonl"):
        model, version = f.relative_to(dest).parts[:2]
        by_model.setdefault(model, set()).add(version)
    assert by_model == {"iris": {"1"}, "iris_sklearn": {"1"}, "iris_handler": {"1"}}
    # Tensor models: the named tensors the model was given and gave back, as V2 JSON, whatever the protocol.
    inputs = [r["captureData"]["endpointInput"] for r in recs]  # type: ignore[index]
    tensor_inputs = [json.loads(i["data"]) for i in inputs if i["observedContentType"] == "application/json"]
    tensor_inputs = [d for d in tensor_inputs if "inputs" in d]
    assert len(tensor_inputs) == 3  # TF REST, KServe V2 and SageMaker npy
    for doc in tensor_inputs:
        (x,) = doc["inputs"]
        assert x["shape"] == [1, 4]
        assert np.allclose(x["data"], row)
    outputs = [json.loads(r["captureData"]["endpointOutput"]["data"]) for r in recs]  # type: ignore[index]
    tensor_outputs = [d for d in outputs if isinstance(d, dict) and "outputs" in d]
    assert len(tensor_outputs) == 3
    for doc in tensor_outputs:
        assert all(o["shape"][0] == 1 and len(o["data"]) >= 1 for o in doc["outputs"]), doc
    # A handler model (inference.py) decodes its own body: captured byte for byte.
    handler = next(i for i in inputs if i["data"].startswith('{"features"'))
    assert json.loads(handler["data"]) == {"features": [row]}
    handler_out = [
        r["captureData"]["endpointOutput"]
        for r in recs  # type: ignore[index]
        if "labels" in r["captureData"]["endpointOutput"]["data"]
    ]  # type: ignore[index]
    assert json.loads(handler_out[0]["data"])["labels"] == ["setosa"]


def test_capture_metrics(demo_config: ServerConfig, tmp_path: Path) -> None:
    cfg = ServerConfig(
        models=demo_config.models,
        file_system_poll_wait_seconds=0,
        capture=CaptureConfig(destination=str(tmp_path), sampling_percentage=0),
    )
    with TestClient(serving_app(cfg), raise_server_exceptions=False) as c:
        wait_ready(c)
        for _ in range(3):
            c.post("/v1/models/iris:predict", json={"instances": [[5.1, 3.5, 1.4, 0.2]]})
        text = c.get("/metrics").text
    assert "servekit_capture_sampled_out_total 3.0" in text
    assert "servekit_capture_records_total 0.0" in text
    assert read_records(tmp_path) == []


def test_the_callers_inference_id_is_recorded(demo_config: ServerConfig, tmp_path: Path) -> None:
    dest = tmp_path / "capture"
    cfg = ServerConfig(
        models=demo_config.models,
        file_system_poll_wait_seconds=0,
        capture=CaptureConfig(destination=str(dest), flush_seconds=3600),
    )
    with TestClient(serving_app(cfg), raise_server_exceptions=False) as c:
        wait_ready(c)
        for model, body in (("iris", [[5.1, 3.5, 1.4, 0.2]]), ("iris_handler", {"features": [[5.1, 3.5, 1.4, 0.2]]})):
            r = c.post(
                "/invocations",
                json=body,
                headers={
                    "X-Amzn-SageMaker-Custom-Attributes": f"tfs-model-name={model}",
                    "X-Amzn-SageMaker-Inference-Id": f"order-{model}",
                },
            )
            assert r.status_code == 200, r.text
        assert c.post("/v1/models/iris:predict", json={"instances": [[5.1, 3.5, 1.4, 0.2]]}).status_code == 200
    ids = sorted(str(r["eventMetadata"].get("inferenceId")) for r in read_records(dest))  # type: ignore[index]
    assert ids == ["None", "order-iris", "order-iris_handler"]  # tensors and raw bodies alike; none when not sent
