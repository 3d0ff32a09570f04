"""TF Serving REST API (/v1/models/...): status, metadata, predict, classify, regress, routing, errors."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from starlette.testclient import TestClient

from servekit.errors import ServekitError
from servekit.serving.codecs import tfjson
from servekit.serving.schema import ONLY_INPUT, InferenceResponse
from servekit.tools.demo.build import IRIS_CLASSES, IRIS_FEATURES

ROWS = np.array([[5.1, 3.5, 1.4, 0.2], [6.0, 2.7, 4.1, 1.1], [6.7, 3.0, 5.2, 2.3]])
VERSION_HEADER = "x-servekit-model-version"
IrisOnnx = Callable[[int, npt.ArrayLike], dict[str, npt.NDArray[Any]]]


def _b64(text: str) -> dict[str, str]:
    return {"b64": base64.b64encode(text.encode()).decode()}


# ---- model status ------------------------------------------------------------------------------------


def test_status_lists_every_version(client: TestClient) -> None:
    r = client.get("/v1/models/iris")
    assert r.status_code == 200, r.text
    statuses = r.json()["model_version_status"]
    assert [s["version"] for s in statuses] == ["1", "2"]
    for s in statuses:
        assert s["state"] == "AVAILABLE"
        assert s["status"] == {"error_code": "OK", "error_message": ""}


def test_status_of_one_version(client: TestClient) -> None:
    r = client.get("/v1/models/iris/versions/1")
    assert r.status_code == 200, r.text
    assert [s["version"] for s in r.json()["model_version_status"]] == ["1"]


@pytest.mark.parametrize(("label", "version"), [("stable", "1"), ("canary", "2")])
def test_status_by_label(client: TestClient, label: str, version: str) -> None:
    r = client.get(f"/v1/models/iris/labels/{label}")
    assert r.status_code == 200, r.text
    (only,) = r.json()["model_version_status"]
    assert only["version"] == version
    assert only["state"] == "AVAILABLE"


def test_status_of_single_version_model(client: TestClient) -> None:
    r = client.get("/v1/models/diabetes")
    assert r.status_code == 200
    assert [s["version"] for s in r.json()["model_version_status"]] == ["1"]


# ---- metadata ----------------------------------------------------------------------------------------


def test_metadata_describes_latest_version(client: TestClient) -> None:
    r = client.get("/v1/models/iris/metadata")
    assert r.status_code == 200, r.text
    assert r.headers[VERSION_HEADER] == "2"
    doc = r.json()
    assert doc["model_spec"] == {"name": "iris", "signature_name": "", "version": "2"}
    sigs = doc["metadata"]["signature_def"]["signature_def"]
    assert set(sigs) == {"serving_default", "classify"}
    default = sigs["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    x = default["inputs"]["X"]
    assert x["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in x["tensor_shape"]["dim"]] == ["-1", "4"]
    assert default["outputs"]["label"]["dtype"] == "DT_INT64"
    assert [d["size"] for d in default["outputs"]["probabilities"]["tensor_shape"]["dim"]] == ["-1", "3"]
    assert sigs["classify"]["method_name"] == "tensorflow/serving/classify"


@pytest.mark.parametrize(("suffix", "version"), [("versions/1", "1"), ("labels/stable", "1"), ("labels/canary", "2")])
def test_metadata_of_version_or_label(client: TestClient, suffix: str, version: str) -> None:
    r = client.get(f"/v1/models/iris/{suffix}/metadata")
    assert r.status_code == 200, r.text
    assert r.json()["model_spec"]["version"] == version
    assert r.headers[VERSION_HEADER] == version


def test_metadata_of_sklearn_model(client: TestClient) -> None:
    r = client.get("/v1/models/iris_sklearn/metadata")
    assert r.status_code == 200, r.text
    sigs = r.json()["metadata"]["signature_def"]["signature_def"]
    assert set(sigs) == {"serving_default", "predict", "predict_proba", "classify"}
    assert sigs["predict_proba"]["inputs"]["inputs"]["dtype"] == "DT_DOUBLE"
    assert sigs["classify"]["method_name"] == "tensorflow/serving/classify"
    assert sigs["predict_proba"]["outputs"]["probabilities"]["dtype"] == "DT_DOUBLE"


# ---- predict -----------------------------------------------------------------------------------------


def test_predict_row_format(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post("/v1/models/iris:predict", json={"instances": ROWS.tolist()})
    assert r.status_code == 200, r.text
    assert r.headers[VERSION_HEADER] == "2"
    preds = r.json()["predictions"]
    want = iris_onnx(2, ROWS)
    assert len(preds) == len(ROWS)
    assert_array_equal([p["label"] for p in preds], want["label"])
    assert_allclose([p["probabilities"] for p in preds], want["probabilities"], rtol=1e-6, atol=1e-7)


def test_predict_row_format_with_named_instances(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post("/v1/models/iris:predict", json={"instances": [{"X": row} for row in ROWS.tolist()]})
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert_array_equal([p["label"] for p in preds], iris_onnx(2, ROWS)["label"])


def test_predict_columnar_bare_tensor(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post("/v1/models/iris:predict", json={"inputs": ROWS.tolist()})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"]
    want = iris_onnx(2, ROWS)
    assert_array_equal(out["label"], want["label"])
    assert_allclose(out["probabilities"], want["probabilities"], rtol=1e-6, atol=1e-7)


def test_predict_columnar_named(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post("/v1/models/iris:predict", json={"inputs": {"X": ROWS[:1].tolist()}})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"]
    assert "predictions" not in r.json()
    assert_array_equal(out["label"], iris_onnx(2, ROWS[:1])["label"])


def test_single_output_drops_the_name(client: TestClient, iris_sklearn: Any) -> None:
    rows = client.post("/v1/models/iris_sklearn:predict", json={"instances": ROWS.tolist()})
    cols = client.post("/v1/models/iris_sklearn:predict", json={"inputs": ROWS.tolist()})
    assert rows.status_code == cols.status_code == 200, (rows.text, cols.text)
    want = iris_sklearn.predict(ROWS).tolist()
    assert rows.json() == {"predictions": want}
    assert cols.json() == {"outputs": want}


@pytest.mark.parametrize("signature", ["predict_proba", "classify"])
def test_predict_with_signature_name(client: TestClient, iris_sklearn: Any, signature: str) -> None:
    r = client.post("/v1/models/iris_sklearn:predict", json={"signature_name": signature, "instances": ROWS.tolist()})
    assert r.status_code == 200, r.text
    assert_allclose(r.json()["predictions"], iris_sklearn.predict_proba(ROWS), rtol=1e-12)


def test_predict_signature_name_predict_gives_labels(client: TestClient, iris_sklearn: Any) -> None:
    r = client.post("/v1/models/iris_sklearn:predict", json={"signature_name": "predict", "inputs": ROWS.tolist()})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"] == iris_sklearn.predict(ROWS).tolist()


def test_predict_path_is_case_insensitive(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post("/v1/models/iris:PREDICT", json={"instances": ROWS[:1].tolist()})
    assert r.status_code == 200, r.text
    assert r.json()["predictions"][0]["label"] == int(iris_onnx(2, ROWS[:1])["label"][0])


def test_predict_accepts_nan_token(client: TestClient) -> None:
    """TF Serving accepts the non-RFC tokens NaN/Infinity in request JSON."""
    r = client.post("/v1/models/iris:predict", content=b'{"instances": [[NaN, 3.5, 1.4, Infinity]]}')
    assert r.status_code == 200, r.text
    assert len(r.json()["predictions"]) == 1


# ---- {"b64": ...} values -----------------------------------------------------------------------------


def test_b64_values_decode_to_bytes_at_codec_level() -> None:
    arr = tfjson.to_array([[_b64("héllo"), _b64("")], [{"b64": "AAEC"}, _b64("x")]], "s")
    assert arr.dtype == object
    assert arr.shape == (2, 2)
    assert arr.tolist() == [["héllo".encode(), b""], [b"\x00\x01\x02", b"x"]]


def test_b64_in_predict_body_at_codec_level() -> None:
    inputs, rows = tfjson.decode_predict({"instances": [_b64("a"), _b64("bc")]}, ())
    assert rows is True
    assert inputs[ONLY_INPUT].tolist() == [b"a", b"bc"]
    inputs, rows = tfjson.decode_predict({"inputs": {"text": [_b64("zz")], "n": [1]}}, ())
    assert rows is False
    assert inputs["text"].tolist() == [b"zz"]
    assert inputs["n"].tolist() == [1]


def test_b64_garbage_is_rejected_at_codec_level() -> None:
    with pytest.raises(ServekitError, match="invalid base64"):
        tfjson.to_array([{"b64": "not*base64"}], "s")
    with pytest.raises(ServekitError, match="b64"):
        tfjson.to_array([{"b64": "QQ==", "extra": 1}], "s")


def test_outputs_named_bytes_are_b64_encoded() -> None:
    out = np.empty(2, dtype=object)
    out[:] = [b"\xff\x00", b"ok"]
    resp = InferenceResponse(model="m", version=1, signature="s", outputs={"image_bytes": out})
    doc = tfjson.encode_predict(resp, rows=True)
    assert doc == {"predictions": [{"b64": base64.b64encode(b"\xff\x00").decode()}, {"b64": "b2s="}]}
    assert [base64.b64decode(v["b64"]) for v in doc["predictions"]] == [b"\xff\x00", b"ok"]


def test_b64_values_end_to_end(client: TestClient, iris_handler_model: Any) -> None:
    """The handler model takes any tensor; b64 strings of numbers reach its predict_fn as bytes."""
    instances = [[_b64(str(v)) for v in row] for row in ROWS.tolist()]
    r = client.post("/v1/models/iris_handler:predict", json={"instances": instances})
    assert r.status_code == 200, r.text
    assert_allclose(r.json()["predictions"], iris_handler_model.predict_proba(ROWS), rtol=1e-12)


# ---- classify / regress ------------------------------------------------------------------------------


def test_classify_with_context_and_examples(client: TestClient, iris_onnx: IrisOnnx) -> None:
    # sepal_length is shared by both examples and sent once in "context".
    rows = np.array([[5.8, 3.5, 1.4, 0.2], [5.8, 2.7, 5.1, 1.9]])
    body = {
        "context": {"sepal_length": 5.8},
        "examples": [dict(zip(IRIS_FEATURES[1:], row[1:], strict=True)) for row in rows.tolist()],
    }
    r = client.post("/v1/models/iris:classify", json=body)
    assert r.status_code == 200, r.text
    assert r.headers[VERSION_HEADER] == "2"
    results = r.json()["results"]
    want = iris_onnx(2, rows)["probabilities"]
    assert len(results) == 2
    for got, probs in zip(results, want, strict=True):
        assert [c for c, _ in got] == list(IRIS_CLASSES)
        assert_allclose([s for _, s in got], probs, rtol=1e-6, atol=1e-7)


def test_classify_sklearn_with_feature_lists(client: TestClient, iris_sklearn: Any) -> None:
    examples = [{f: [v] for f, v in zip(IRIS_FEATURES, row, strict=True)} for row in ROWS.tolist()]
    r = client.post("/v1/models/iris_sklearn:classify", json={"examples": examples})
    assert r.status_code == 200, r.text
    scores = [[s for _, s in ex] for ex in r.json()["results"]]
    assert_allclose(scores, iris_sklearn.predict_proba(ROWS), rtol=1e-12)
    labels = [max(ex, key=lambda pair: pair[1])[0] for ex in r.json()["results"]]
    assert labels == [IRIS_CLASSES[i] for i in iris_sklearn.predict(ROWS)]


def test_classify_on_a_version(client: TestClient, iris_onnx: IrisOnnx) -> None:
    body = {"examples": [dict(zip(IRIS_FEATURES, ROWS[0], strict=True))]}
    r = client.post("/v1/models/iris/versions/1:classify", json=body)
    assert r.status_code == 200, r.text
    assert r.headers[VERSION_HEADER] == "1"
    assert_allclose([s for _, s in r.json()["results"][0]], iris_onnx(1, ROWS[:1])["probabilities"][0], rtol=1e-6)


def test_regress_returns_results(client: TestClient, diabetes: Any) -> None:
    x = np.linspace(-0.05, 0.05, 20).reshape(2, 10)
    examples = [{f"x{i}": v for i, v in enumerate(row)} for row in x.tolist()]
    r = client.post("/v1/models/diabetes:regress", json={"examples": examples})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert set(doc) == {"results"}
    assert_allclose(doc["results"], diabetes.predict(x), rtol=1e-12)


def test_regress_with_one_feature_holding_all_values(client: TestClient, diabetes: Any) -> None:
    x = np.full((1, 10), 0.02)
    r = client.post("/v1/models/diabetes:regress", json={"examples": [{"x": x[0].tolist()}]})
    assert r.status_code == 200, r.text
    assert_allclose(r.json()["results"], diabetes.predict(x), rtol=1e-12)


# ---- versions and labels -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "version"),
    [
        ("/v1/models/iris:predict", 2),
        ("/v1/models/iris/versions/1:predict", 1),
        ("/v1/models/iris/versions/2:predict", 2),
        ("/v1/models/iris/labels/stable:predict", 1),
        ("/v1/models/iris/labels/canary:predict", 2),
    ],
)
def test_version_and_label_routing(client: TestClient, iris_onnx: IrisOnnx, path: str, version: int) -> None:
    r = client.post(path, json={"instances": ROWS.tolist()})
    assert r.status_code == 200, r.text
    assert r.headers[VERSION_HEADER] == str(version)
    got = [p["probabilities"] for p in r.json()["predictions"]]
    assert_allclose(got, iris_onnx(version, ROWS)["probabilities"], rtol=1e-6, atol=1e-7)


def test_the_two_versions_really_differ(client: TestClient) -> None:
    """Guards the routing test: if v1 and v2 answered alike, routing mistakes would go unseen."""
    body = {"instances": ROWS.tolist()}
    one = client.post("/v1/models/iris/labels/stable:predict", json=body).json()["predictions"]
    two = client.post("/v1/models/iris/labels/canary:predict", json=body).json()["predictions"]
    assert not np.allclose([p["probabilities"] for p in one], [p["probabilities"] for p in two], atol=1e-3)


# ---- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "needle"),
    [
        ("GET", "/v1/models/nope", None, 404, "models: diabetes, iris, iris_handler, iris_sklearn"),
        ("GET", "/v1/models/iris/versions/5", None, 404, "versions: 1, 2"),
        ("GET", "/v1/models/iris/labels/zzz/metadata", None, 404, "labels: canary, stable"),
        ("POST", "/v1/models/iris", {}, 400, "need GET"),
        ("POST", "/v1/models/iris:predict", {"instances": [[1, 2, 3]]}, 400, "expected [-1, 4]"),
        ("POST", "/v1/models/iris:predict", {"instances": [[1, 2, 3, 4]], "signature_name": "x"}, 404, "signatures"),
        ("GET", "/v1/nothing", None, 404, "/v1/models/<model>"),
    ],
)
def test_error_bodies_use_tf_serving_status_codes(
    client: TestClient, method: str, path: str, body: Any, status: int, needle: str
) -> None:
    r = client.request(method, path, json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    doc = r.json()
    assert list(doc) == ["error"]
    assert needle in doc["error"]
