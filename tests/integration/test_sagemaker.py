"""SageMaker container contract: GET /ping and POST /invocations with every content and accept type."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from starlette.testclient import TestClient

from servekit.tools.demo.build import IRIS_CLASSES, IRIS_FEATURES

ROWS = np.array([[5.1, 3.5, 1.4, 0.2], [6.0, 2.7, 4.1, 1.1], [6.7, 3.0, 5.2, 2.3]])
IrisOnnx = Callable[[int, npt.ArrayLike], dict[str, npt.NDArray[Any]]]
ATTRS = "X-Amzn-SageMaker-Custom-Attributes"


def _to(model: str, **extra: str) -> dict[str, str]:
    attrs = [f"tfs-model-name={model}"] + [f"tfs-{k.replace('_', '-')}={v}" for k, v in extra.items()]
    return {ATTRS: ",".join(attrs)}


def _npy(arr: npt.NDArray[Any]) -> bytes:
    bio = io.BytesIO()
    np.save(bio, arr, allow_pickle=False)
    return bio.getvalue()


def _csv(arr: npt.NDArray[Any]) -> bytes:
    return "".join(",".join(repr(v) for v in row) + "\n" for row in arr.tolist()).encode()


def test_ping(client: TestClient) -> None:
    r = client.get("/ping")
    assert r.status_code == 200
    assert r.content == b""


# ---- request content types ---------------------------------------------------------------------------


def test_json_bare_list(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post("/invocations", json=ROWS.tolist(), headers=_to("iris"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-servekit-model-version"] == "2"
    preds = r.json()["predictions"]
    want = iris_onnx(2, ROWS)
    assert_array_equal([p["label"] for p in preds], want["label"])
    assert_allclose([p["probabilities"] for p in preds], want["probabilities"], rtol=1e-6, atol=1e-7)


def test_json_instances(client: TestClient, iris_sklearn: Any) -> None:
    r = client.post("/invocations", json={"instances": ROWS.tolist()}, headers=_to("iris_sklearn"))
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": iris_sklearn.predict(ROWS).tolist()}


def test_json_inputs_gives_outputs(client: TestClient, iris_sklearn: Any) -> None:
    r = client.post(
        "/invocations",
        json={"inputs": ROWS.tolist(), "signature_name": "predict_proba"},
        headers=_to("iris_sklearn"),
    )
    assert r.status_code == 200, r.text
    assert_allclose(r.json()["outputs"], iris_sklearn.predict_proba(ROWS), rtol=1e-12)


@pytest.mark.parametrize("content_type", ["application/jsonlines", "application/jsons", "application/x-jsonlines"])
def test_jsonlines_body(client: TestClient, iris_sklearn: Any, content_type: str) -> None:
    body = "".join(json.dumps(row) + "\n" for row in ROWS.tolist()).encode()
    r = client.post("/invocations", content=body, headers={**_to("iris_sklearn"), "Content-Type": content_type})
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": iris_sklearn.predict(ROWS).tolist()}


def test_csv_body(client: TestClient, iris_sklearn: Any) -> None:
    r = client.post(
        "/invocations",
        content=_csv(ROWS),
        headers={**_to("iris_sklearn"), "Content-Type": "text/csv; charset=utf-8"},
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": iris_sklearn.predict(ROWS).tolist()}


def test_npy_body(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post(
        "/invocations",
        content=_npy(ROWS.astype(np.float32)),
        headers={**_to("iris"), "Content-Type": "application/x-npy"},
    )
    assert r.status_code == 200, r.text
    # An .npy body is one columnar tensor, so the answer is {"outputs": ...}.
    out = r.json()["outputs"]
    assert_array_equal(out["label"], iris_onnx(2, ROWS)["label"])


# ---- Accept ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("accept", ["", "*/*", "application/json", "image/png, application/json;q=0.9"])
def test_accept_json(client: TestClient, iris_sklearn: Any, accept: str) -> None:
    headers = _to("iris_sklearn")
    if accept:
        headers["Accept"] = accept
    r = client.post("/invocations", json=ROWS.tolist(), headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"predictions": iris_sklearn.predict(ROWS).tolist()}


def test_accept_jsonlines(client: TestClient, iris_onnx: IrisOnnx) -> None:
    r = client.post("/invocations", json=ROWS.tolist(), headers={**_to("iris"), "Accept": "application/jsonlines"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/jsonlines"
    lines = [json.loads(line) for line in r.text.splitlines()]
    want = iris_onnx(2, ROWS)
    assert len(lines) == len(ROWS)
    assert_array_equal([row["label"] for row in lines], want["label"])
    assert_allclose([row["probabilities"] for row in lines], want["probabilities"], rtol=1e-6, atol=1e-7)


def test_accept_csv(client: TestClient, iris_sklearn: Any) -> None:
    r = client.post(
        "/invocations",
        json={"instances": ROWS.tolist(), "signature_name": "predict_proba"},
        headers={**_to("iris_sklearn"), "Accept": "text/csv"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    got = np.array([[float(v) for v in row] for row in csv.reader(io.StringIO(r.text))])
    assert_allclose(got, iris_sklearn.predict_proba(ROWS), rtol=1e-12)


def test_accept_npy(client: TestClient, iris_sklearn: Any) -> None:
    r = client.post(
        "/invocations",
        content=_npy(ROWS),
        headers={**_to("iris_sklearn"), "Content-Type": "application/x-npy", "Accept": "application/x-npy"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-npy"
    got = np.load(io.BytesIO(r.content), allow_pickle=False)
    assert_array_equal(got, iris_sklearn.predict(ROWS))


def test_csv_in_npy_out(client: TestClient, diabetes: Any) -> None:
    x = np.linspace(-0.04, 0.04, 30).reshape(3, 10)
    r = client.post(
        "/invocations",
        content=_csv(x),
        headers={**_to("diabetes"), "Content-Type": "text/csv", "Accept": "application/x-npy"},
    )
    assert r.status_code == 200, r.text
    assert_allclose(np.load(io.BytesIO(r.content), allow_pickle=False), diabetes.predict(x), rtol=1e-12)


# ---- routing with X-Amzn-SageMaker-Custom-Attributes ---------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_route_to_version(client: TestClient, iris_onnx: IrisOnnx, version: int) -> None:
    r = client.post("/invocations", json=ROWS.tolist(), headers=_to("iris", model_version=str(version)))
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == str(version)
    got = [p["probabilities"] for p in r.json()["predictions"]]
    assert_allclose(got, iris_onnx(version, ROWS)["probabilities"], rtol=1e-6, atol=1e-7)


def test_custom_attributes_tolerate_spaces_and_other_keys(client: TestClient) -> None:
    headers = {ATTRS: "trace=abc, tfs-model-name=iris , tfs-model-version=1"}
    r = client.post("/invocations", json=ROWS.tolist(), headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "1"


def test_classify_method(client: TestClient, iris_sklearn: Any) -> None:
    body = {"examples": [dict(zip(IRIS_FEATURES, row, strict=True)) for row in ROWS.tolist()]}
    r = client.post("/invocations", json=body, headers=_to("iris_sklearn", method="classify"))
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [[c for c, _ in ex] for ex in results] == [list(IRIS_CLASSES)] * len(ROWS)
    assert_allclose([[s for _, s in ex] for ex in results], iris_sklearn.predict_proba(ROWS), rtol=1e-12)


def test_classify_method_on_a_version(client: TestClient, iris_onnx: IrisOnnx) -> None:
    body = {"examples": [dict(zip(IRIS_FEATURES, ROWS[2], strict=True))]}
    r = client.post("/invocations", json=body, headers=_to("iris", model_version="1", method="classify"))
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "1"
    assert_allclose([s for _, s in r.json()["results"][0]], iris_onnx(1, ROWS[2:])["probabilities"][0], rtol=1e-6)


def test_regress_method(client: TestClient, diabetes: Any) -> None:
    x = np.linspace(0.05, -0.05, 10).reshape(1, 10)
    body = {"examples": [{f"x{i}": v for i, v in enumerate(x[0].tolist())}]}
    r = client.post("/invocations", json=body, headers=_to("diabetes", method="regress"))
    assert r.status_code == 200, r.text
    assert_allclose(r.json()["results"], diabetes.predict(x), rtol=1e-12)


def test_no_model_name_with_many_models_lists_them(client: TestClient) -> None:
    r = client.post("/invocations", json=ROWS.tolist())
    assert r.status_code == 400
    msg = r.json()["error"]
    assert "tfs-model-name" in msg
    for model in ("diabetes", "iris", "iris_handler", "iris_sklearn"):
        assert model in msg


# ---- handler (inference.py) model --------------------------------------------------------------------


def _handler_expectation(model: Any, rows: npt.NDArray[Any]) -> tuple[list[str], npt.NDArray[Any]]:
    probs = model.predict_proba(rows)
    return [IRIS_CLASSES[i] for i in probs.argmax(axis=1)], probs.round(6)


def test_handler_json(client: TestClient, iris_handler_model: Any) -> None:
    r = client.post("/invocations", json={"features": ROWS.tolist()}, headers=_to("iris_handler"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-servekit-model-version"] == "1"
    labels, probs = _handler_expectation(iris_handler_model, ROWS)
    doc = r.json()
    assert doc["labels"] == labels
    assert_allclose(doc["probabilities"], probs, atol=1e-9)


def test_handler_csv(client: TestClient, iris_handler_model: Any) -> None:
    r = client.post("/invocations", content=_csv(ROWS), headers={**_to("iris_handler"), "Content-Type": "text/csv"})
    assert r.status_code == 200, r.text
    labels, probs = _handler_expectation(iris_handler_model, ROWS)
    assert r.json()["labels"] == labels
    assert_allclose(r.json()["probabilities"], probs, atol=1e-9)


def test_handler_error_from_input_fn(client: TestClient) -> None:
    r = client.post(
        "/invocations", content=b"\x00", headers={**_to("iris_handler"), "Content-Type": "application/x-npy"}
    )
    assert r.status_code == 400, r.text
    # the handler's own ValueError text goes to the log (it is user code's); the client gets what failed and an id
    rid = r.headers["x-servekit-request-id"]
    assert r.json()["error"] == (
        "the handler's input_fn refused the body as application/x-npy (ValueError) "
        f"(request id {rid}; the server log has the details)"
    )
