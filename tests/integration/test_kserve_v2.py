"""KServe V2 / Open Inference Protocol with Triton's binary tensor extension (/v2/...)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from starlette.testclient import TestClient

from servekit import __version__
from servekit.errors import ServekitError
from servekit.serving.codecs.v2 import decode_bytes_tensor as _decode_bytes_tensor
from servekit.serving.codecs.v2 import encode_bytes_tensor as _encode_bytes_tensor

ROWS = np.array([[5.1, 3.5, 1.4, 0.2], [6.0, 2.7, 4.1, 1.1], [6.7, 3.0, 5.2, 2.3]])
IrisOnnx = Callable[[int, npt.ArrayLike], dict[str, npt.NDArray[Any]]]
V2_DTYPES = {"FP32": "<f4", "FP64": "<f8", "INT64": "<i8"}


def _x(rows: npt.NDArray[Any] = ROWS, nested: bool = False) -> dict[str, Any]:
    return {
        "name": "X",
        "shape": list(rows.shape),
        "datatype": "FP32",
        "data": rows.tolist() if nested else rows.ravel().tolist(),
    }


def _bytes_elements(values: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def _split_binary(r: Any) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
    """Parse a binary-extension response by hand: JSON header, then each binary output in order."""
    n = int(r.headers["inference-header-content-length"])
    header = json.loads(r.content[:n])
    pos, blobs = n, {}
    for out in header["outputs"]:
        size = out.get("parameters", {}).get("binary_data_size")
        if size is None:
            continue
        raw = r.content[pos : pos + size]
        blobs[out["name"]] = np.frombuffer(raw, dtype=V2_DTYPES[out["datatype"]]).reshape(out["shape"])
        pos += size
    assert pos == len(r.content), "the body must end right after the last binary output"
    return header, blobs


# ---- server and model metadata / health ---------------------------------------------------------------


def test_server_metadata(client: TestClient) -> None:
    r = client.get("/v2")
    assert r.status_code == 200
    doc = r.json()
    assert doc["name"] == "servekit"
    assert doc["version"] == __version__
    assert "binary_tensor_data" in doc["extensions"]


@pytest.mark.parametrize("path", ["/v2/health/live", "/v2/health/ready"])
def test_health(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 200
    assert r.content == b""


def test_model_metadata(client: TestClient) -> None:
    r = client.get("/v2/models/iris")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["name"] == "iris"
    assert doc["versions"] == ["1", "2"]
    assert doc["platform"] == "onnxruntime_onnx"
    assert doc["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}]
    assert doc["outputs"] == [
        {"name": "label", "datatype": "INT64", "shape": [-1]},
        {"name": "probabilities", "datatype": "FP32", "shape": [-1, 3]},
    ]


def test_model_metadata_of_a_version(client: TestClient) -> None:
    r = client.get("/v2/models/iris/versions/1")
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "iris"
    assert r.json()["inputs"][0]["name"] == "X"


def test_model_metadata_of_sklearn_model(client: TestClient) -> None:
    r = client.get("/v2/models/iris_sklearn")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["versions"] == ["1"]
    assert doc["platform"] == "sklearn"
    assert doc["inputs"] == [{"name": "inputs", "datatype": "FP64", "shape": [-1, 4]}]


def test_model_config(client: TestClient) -> None:
    r = client.get("/v2/models/iris/config")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["name"] == "iris"
    assert doc["input"] == [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1, 4]}]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/v2/models/iris/ready", 200),
        ("/v2/models/iris/versions/1/ready", 200),
        ("/v2/models/iris/versions/2/ready", 200),
        ("/v2/models/iris/versions/3/ready", 400),
        ("/v2/models/diabetes/ready", 200),
        ("/v2/models/nope/ready", 400),
    ],
)
def test_model_ready(client: TestClient, path: str, status: int) -> None:
    r = client.get(path)
    assert r.status_code == status
    assert r.content == b""


# ---- inference with JSON tensors ---------------------------------------------------------------------


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_infer_json(client: TestClient, iris_onnx: IrisOnnx, nested: bool) -> None:
    r = client.post("/v2/models/iris/infer", json={"id": "req-7", "inputs": [_x(nested=nested)]})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    doc = r.json()
    assert doc["model_name"] == "iris"
    assert doc["model_version"] == "2"
    assert doc["id"] == "req-7"
    outs = {o["name"]: o for o in doc["outputs"]}
    want = iris_onnx(2, ROWS)
    assert outs["label"]["datatype"] == "INT64"
    assert outs["label"]["shape"] == [3]
    assert_array_equal(outs["label"]["data"], want["label"])
    assert outs["probabilities"]["datatype"] == "FP32"
    assert outs["probabilities"]["shape"] == [3, 3]
    assert_allclose(np.reshape(outs["probabilities"]["data"], (3, 3)), want["probabilities"], rtol=1e-6, atol=1e-7)


def test_infer_a_version(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post("/v2/models/iris/versions/1/infer", json={"inputs": [_x()]})
    assert r.status_code == 200, r.text
    assert r.json()["model_version"] == "1"
    assert r.headers["x-servekit-model-version"] == "1"
    probs = next(o for o in r.json()["outputs"] if o["name"] == "probabilities")
    assert_allclose(np.reshape(probs["data"], (3, 3)), iris_onnx(1, ROWS)["probabilities"], rtol=1e-6, atol=1e-7)


def test_infer_fp64_sklearn_with_signature_parameter(client: TestClient, iris_sklearn: Any) -> None:
    body = {
        "inputs": [{"name": "inputs", "shape": [3, 4], "datatype": "FP64", "data": ROWS.ravel().tolist()}],
        "parameters": {"signature_name": "predict_proba"},
    }
    r = client.post("/v2/models/iris_sklearn/infer", json=body)
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    assert out["name"] == "probabilities"
    assert out["datatype"] == "FP64"
    assert_allclose(np.reshape(out["data"], out["shape"]), iris_sklearn.predict_proba(ROWS), rtol=1e-12)


def test_requested_outputs_filter(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post("/v2/models/iris/infer", json={"inputs": [_x()], "outputs": [{"name": "label"}]})
    assert r.status_code == 200, r.text
    outs = r.json()["outputs"]
    assert [o["name"] for o in outs] == ["label"]
    assert_array_equal(outs[0]["data"], iris_onnx(2, ROWS)["label"])


@pytest.mark.parametrize("datatype", ["INT64", "INT32", "UINT8"])
def test_integer_data_is_accepted_for_a_float_input(client: TestClient, iris_onnx: IrisOnnx, datatype: str) -> None:
    rows = np.array([[5, 3, 1, 0], [7, 3, 5, 2]])
    body = {"inputs": [{"name": "X", "shape": [2, 4], "datatype": datatype, "data": rows.ravel().tolist()}]}
    r = client.post("/v2/models/iris/infer", json=body)
    assert r.status_code == 200, r.text
    label = next(o for o in r.json()["outputs"] if o["name"] == "label")
    assert_array_equal(label["data"], iris_onnx(2, rows)["label"])


# ---- binary tensor extension -------------------------------------------------------------------------


def test_infer_binary_input_built_by_hand(client: TestClient, iris_onnx: IrisOnnx) -> None:
    raw = ROWS.astype("<f4").tobytes()
    header = json.dumps(
        {"inputs": [{"name": "X", "shape": [3, 4], "datatype": "FP32", "parameters": {"binary_data_size": len(raw)}}]}
    ).encode()
    r = client.post(
        "/v2/models/iris/infer",
        content=header + raw,
        headers={"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 200, r.text
    # No binary output was asked for: the answer is plain JSON.
    assert r.headers["content-type"] == "application/json"
    assert "inference-header-content-length" not in r.headers
    probs = next(o for o in r.json()["outputs"] if o["name"] == "probabilities")
    assert_allclose(np.reshape(probs["data"], (3, 3)), iris_onnx(2, ROWS)["probabilities"], rtol=1e-6, atol=1e-7)


def test_binary_fp64_input_with_padded_header(client: TestClient, iris_sklearn: Any) -> None:
    """FP64 little-endian bytes for the sklearn model, with the JSON header padded by whitespace."""
    raw = ROWS.astype("<f8").tobytes()
    header = (
        json.dumps(
            {
                "inputs": [
                    {"name": "inputs", "shape": [3, 4], "datatype": "FP64", "parameters": {"binary_data_size": 96}}
                ]
            }
        )
        + "   "
    ).encode()
    r = client.post(
        "/v2/models/iris_sklearn/infer",
        content=header + raw,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == iris_sklearn.predict(ROWS).tolist()


def test_binary_output_per_output_parameter(client: TestClient, iris_onnx: IrisOnnx) -> None:
    body = {
        "inputs": [_x()],
        "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}, {"name": "label"}],
    }
    r = client.post("/v2/models/iris/infer", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    header, blobs = _split_binary(r)
    want = iris_onnx(2, ROWS)
    outs = {o["name"]: o for o in header["outputs"]}
    assert outs["probabilities"]["parameters"]["binary_data_size"] == 3 * 3 * 4
    assert "data" not in outs["probabilities"]
    assert set(blobs) == {"probabilities"}
    assert_allclose(blobs["probabilities"], want["probabilities"], rtol=1e-6, atol=1e-7)
    assert_array_equal(outs["label"]["data"], want["label"])


def test_binary_output_request_parameter_covers_every_output(client: TestClient, iris_onnx: IrisOnnx) -> None:
    raw = ROWS.astype("<f4").tobytes()
    header = json.dumps(
        {
            "inputs": [{"name": "X", "shape": [3, 4], "datatype": "FP32", "parameters": {"binary_data_size": 48}}],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    r = client.post(
        "/v2/models/iris/infer", content=header + raw, headers={"Inference-Header-Content-Length": str(len(header))}
    )
    assert r.status_code == 200, r.text
    header_doc, blobs = _split_binary(r)
    assert [o["name"] for o in header_doc["outputs"]] == ["label", "probabilities"]
    want = iris_onnx(2, ROWS)
    assert blobs["label"].dtype == np.dtype("<i8")
    assert_array_equal(blobs["label"], want["label"])
    assert_allclose(blobs["probabilities"], want["probabilities"], rtol=1e-6, atol=1e-7)


def test_binary_data_false_overrides_request_parameter(client: TestClient) -> None:
    body = {
        "inputs": [_x()],
        "outputs": [{"name": "label", "parameters": {"binary_data": False}}, {"name": "probabilities"}],
        "parameters": {"binary_data_output": True},
    }
    r = client.post("/v2/models/iris/infer", json=body)
    assert r.status_code == 200, r.text
    header, blobs = _split_binary(r)
    assert set(blobs) == {"probabilities"}
    assert "data" in next(o for o in header["outputs"] if o["name"] == "label")


def test_tritonclient_request_and_response_codec(client: TestClient, iris_onnx: IrisOnnx) -> None:
    """Bodies built and parsed by Triton's own HTTP client library round-trip through servekit."""
    httpclient = pytest.importorskip("tritonclient.http")
    inp = httpclient.InferInput("X", [3, 4], "FP32")
    inp.set_data_from_numpy(ROWS.astype(np.float32), binary_data=True)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("label", "probabilities")]
    body, header_len = httpclient.InferenceServerClient.generate_request_body([inp], outputs=outputs)
    headers = {"Content-Type": "application/octet-stream"}
    if header_len is not None:
        headers["Inference-Header-Content-Length"] = str(header_len)
    r = client.post("/v2/models/iris/infer", content=body, headers=headers)
    assert r.status_code == 200, r.text
    result = httpclient.InferenceServerClient.parse_response_body(
        r.content, header_length=int(r.headers["inference-header-content-length"])
    )
    want = iris_onnx(2, ROWS)
    assert_array_equal(result.as_numpy("label"), want["label"])
    assert_allclose(result.as_numpy("probabilities"), want["probabilities"], rtol=1e-6, atol=1e-7)


# ---- BYTES -------------------------------------------------------------------------------------------


def test_bytes_codec_round_trip() -> None:
    values = [b"", b"abc", "héllo".encode(), b"\x00\xff" * 3]
    blob = _encode_bytes_tensor(np.array(values, dtype=object))
    assert blob == b"".join(struct.pack("<I", len(v)) + v for v in values)
    decoded = _decode_bytes_tensor(blob, len(values), "t")
    assert decoded.dtype == object
    assert decoded.tolist() == values


def test_bytes_codec_rejects_truncation_and_count_mismatch() -> None:
    blob = _bytes_elements([b"abc", b"de"])
    with pytest.raises(ServekitError, match="needs 2 bytes, 1 left"):
        _decode_bytes_tensor(blob[:-1], 2, "t")
    with pytest.raises(ServekitError, match="truncated BYTES length prefix"):
        _decode_bytes_tensor(blob + b"\x01\x00", 3, "t")
    with pytest.raises(ServekitError, match="shape holds 3 elements but the binary data holds 2"):
        _decode_bytes_tensor(blob, 3, "t")


def test_bytes_json_input(client: TestClient, iris_handler_model: Any) -> None:
    """The handler model takes any tensor; BYTES elements holding numbers reach predict_fn as strings."""
    data = [str(v) for v in ROWS.ravel().tolist()]
    body = {"inputs": [{"name": "inputs", "shape": [3, 4], "datatype": "BYTES", "data": data}]}
    r = client.post("/v2/models/iris_handler/infer", json=body)
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    assert_allclose(np.reshape(out["data"], out["shape"]), iris_handler_model.predict_proba(ROWS), rtol=1e-12)


def test_bytes_binary_input(client: TestClient, iris_handler_model: Any) -> None:
    blob = _bytes_elements([str(v).encode() for v in ROWS.ravel().tolist()])
    header = json.dumps(
        {
            "inputs": [
                {"name": "inputs", "shape": [3, 4], "datatype": "BYTES", "parameters": {"binary_data_size": len(blob)}}
            ],
            "outputs": [{"name": "predictions", "parameters": {"binary_data": True}}],
        }
    ).encode()
    r = client.post(
        "/v2/models/iris_handler/infer",
        content=header + blob,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert r.status_code == 200, r.text
    _, blobs = _split_binary(r)
    assert_allclose(blobs["predictions"], iris_handler_model.predict_proba(ROWS), rtol=1e-12)
