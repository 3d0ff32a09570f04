"""Real clients against one real ``servekit serve`` process holding the demo models.

TF Serving REST is driven with ``requests`` exactly as the TF Serving REST docs' curl examples do, KServe V2
with ``tritonclient.http`` (JSON and binary tensors), SageMaker with ``requests`` on a second port. Every
prediction is checked against the model file run in this process (onnxruntime, or the pickled estimator).
"""

from __future__ import annotations

import csv
import io
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import requests
import tritonclient.http as httpclient
from numpy.testing import assert_allclose
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.e2e

ROWS = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]]
DIABETES_ROWS = [
    [0.03, 0.05, 0.06, 0.02, -0.04, -0.03, -0.04, -0.002, 0.02, -0.02],
    [-0.01, -0.04, 0.01, -0.03, 0.05, 0.02, 0.01, -0.01, 0.0, 0.03],
]
FLOAT_TOL = {"rtol": 1e-5, "atol": 1e-6}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Demo:
    rest: str  # http://127.0.0.1:<rest port>
    sagemaker: str  # http://127.0.0.1:<sagemaker port>
    hostport: str  # 127.0.0.1:<rest port>, what tritonclient wants
    repo: Path


@pytest.fixture(scope="module")
def demo(demo_repo: Path, module_server_factory: Callable[..., Any]) -> Demo:
    sm_port = _free_port()
    srv = module_server_factory(
        "--model_config_file",
        str(demo_repo / "models.config"),
        "--sagemaker_port",
        str(sm_port),
        "--file_system_poll_wait_seconds",
        "0",
    )
    srv.wait_ready()
    demo = Demo(srv.url, f"http://127.0.0.1:{sm_port}", f"127.0.0.1:{srv.port}", demo_repo)
    assert requests.get(demo.sagemaker + "/ping", timeout=5).status_code == 200, srv.log()
    return demo


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


@pytest.fixture(scope="module")
def triton(demo: Demo) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(demo.hostport)
    yield client
    client.close()


_SESSIONS: dict[Path, Any] = {}


def onnx_reference(path: Path, rows: list[list[float]]) -> dict[str, npt.NDArray[Any]]:
    """What the .onnx file computes for ``rows``, run in this process."""
    if path not in _SESSIONS:
        _SESSIONS[path] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sess = _SESSIONS[path]
    names = [o.name for o in sess.get_outputs()]
    values = sess.run(names, {"X": np.asarray(rows, dtype=np.float32)})
    return dict(zip(names, values, strict=True))


def iris_ref(demo: Demo, version: int, rows: list[list[float]] = ROWS) -> dict[str, npt.NDArray[Any]]:
    return onnx_reference(demo.repo / "iris" / str(version) / "model.onnx", rows)


def test_the_two_iris_versions_differ(demo: Demo) -> None:
    # Every version check below relies on v1 and v2 giving different probabilities.
    v1, v2 = iris_ref(demo, 1), iris_ref(demo, 2)
    assert np.abs(v1["probabilities"] - v2["probabilities"]).max() > 0.05


# ---- TF Serving REST ---------------------------------------------------------------------------------------


def test_tfs_model_status_lists_every_version(demo: Demo, http: requests.Session) -> None:
    r = http.get(f"{demo.rest}/v1/models/iris")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
            {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
        ]
    }


@pytest.mark.parametrize(
    ("suffix", "version"), [("/versions/1", "1"), ("/labels/stable", "1"), ("/labels/canary", "2")]
)
def test_tfs_model_status_of_one_version(demo: Demo, http: requests.Session, suffix: str, version: str) -> None:
    r = http.get(f"{demo.rest}/v1/models/iris{suffix}")
    assert r.status_code == 200, r.text
    statuses = r.json()["model_version_status"]
    assert [(s["version"], s["state"]) for s in statuses] == [(version, "AVAILABLE")]


def test_tfs_metadata_of_latest_and_of_a_version(demo: Demo, http: requests.Session) -> None:
    latest = http.get(f"{demo.rest}/v1/models/iris/metadata")
    assert latest.status_code == 200, latest.text
    doc = latest.json()
    assert doc["model_spec"]["name"] == "iris"
    assert doc["model_spec"]["version"] == "2"
    sig = doc["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["method_name"] == "tensorflow/serving/predict"
    x = sig["inputs"]["X"]
    assert x["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in x["tensor_shape"]["dim"]] == ["-1", "4"]
    assert sig["outputs"]["probabilities"]["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in sig["outputs"]["probabilities"]["tensor_shape"]["dim"]] == ["-1", "3"]
    assert sig["outputs"]["label"]["dtype"] == "DT_INT64"

    v1 = http.get(f"{demo.rest}/v1/models/iris/versions/1/metadata")
    assert v1.status_code == 200, v1.text
    assert v1.json()["model_spec"]["version"] == "1"


def test_tfs_predict_row_format(demo: Demo, http: requests.Session) -> None:
    # curl -d '{"instances": [[...], ...]}' -X POST http://localhost:8501/v1/models/iris:predict
    r = http.post(f"{demo.rest}/v1/models/iris:predict", data=json.dumps({"instances": ROWS}))
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "2"
    preds = r.json()["predictions"]
    assert len(preds) == len(ROWS)
    ref = iris_ref(demo, 2)
    assert_allclose([p["probabilities"] for p in preds], ref["probabilities"], **FLOAT_TOL)
    assert [p["label"] for p in preds] == ref["label"].tolist()


def test_tfs_predict_row_format_with_named_inputs(demo: Demo, http: requests.Session) -> None:
    body = {"signature_name": "serving_default", "instances": [{"X": row} for row in ROWS]}
    r = http.post(f"{demo.rest}/v1/models/iris/versions/1:predict", data=json.dumps(body))
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "1"
    preds = r.json()["predictions"]
    assert_allclose([p["probabilities"] for p in preds], iris_ref(demo, 1)["probabilities"], **FLOAT_TOL)


def test_tfs_predict_columnar_format_on_a_version(demo: Demo, http: requests.Session) -> None:
    r = http.post(f"{demo.rest}/v1/models/iris/versions/1:predict", data=json.dumps({"inputs": {"X": ROWS}}))
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "1"
    outputs = r.json()["outputs"]
    ref = iris_ref(demo, 1)
    assert set(outputs) == {"label", "probabilities"}
    assert_allclose(outputs["probabilities"], ref["probabilities"], **FLOAT_TOL)
    assert outputs["label"] == ref["label"].tolist()


def test_tfs_predict_columnar_bare_tensor(demo: Demo, http: requests.Session) -> None:
    # A model with one input takes the tensor itself as "inputs".
    r = http.post(f"{demo.rest}/v1/models/iris:predict", data=json.dumps({"inputs": ROWS[:1]}))
    assert r.status_code == 200, r.text
    assert_allclose(r.json()["outputs"]["probabilities"], iris_ref(demo, 2, ROWS[:1])["probabilities"], **FLOAT_TOL)


@pytest.mark.parametrize(("label", "version"), [("stable", 1), ("canary", 2)])
def test_tfs_predict_by_label(demo: Demo, http: requests.Session, label: str, version: int) -> None:
    r = http.post(f"{demo.rest}/v1/models/iris/labels/{label}:predict", data=json.dumps({"instances": ROWS}))
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == str(version)
    probs = [p["probabilities"] for p in r.json()["predictions"]]
    assert_allclose(probs, iris_ref(demo, version)["probabilities"], **FLOAT_TOL)


def test_tfs_classify_and_regress(demo: Demo, http: requests.Session) -> None:
    example = dict(zip(("sepal_length", "sepal_width", "petal_length", "petal_width"), ROWS[1], strict=True))
    r = http.post(f"{demo.rest}/v1/models/iris_sklearn:classify", data=json.dumps({"examples": [example]}))
    assert r.status_code == 200, r.text
    (classes,) = r.json()["results"]
    estimator = joblib.load(demo.repo / "iris_sklearn" / "1" / "model.joblib")
    assert [c[0] for c in classes] == ["setosa", "versicolor", "virginica"]
    assert_allclose([c[1] for c in classes], estimator.predict_proba([ROWS[1]])[0], rtol=1e-9)

    body = {"examples": [{"x": row} for row in DIABETES_ROWS]}
    r = http.post(f"{demo.rest}/v1/models/diabetes:regress", data=json.dumps(body))
    assert r.status_code == 200, r.text
    ridge = joblib.load(demo.repo / "diabetes" / "1" / "model.joblib")
    assert_allclose(r.json()["results"], ridge.predict(np.asarray(DIABETES_ROWS)), rtol=1e-9)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "fragment"),
    [
        ("GET", "/v1/models/nope", None, 404, "nope"),
        ("POST", "/v1/models/nope:predict", {"instances": ROWS}, 404, "nope"),
        ("POST", "/v1/models/iris/versions/7:predict", {"instances": ROWS}, 404, "version 7"),
        ("POST", "/v1/models/iris/labels/beta:predict", {"instances": ROWS}, 404, "beta"),
        ("POST", "/v1/models/iris:predict", {"instances": ROWS, "inputs": {"X": ROWS}}, 400, "exactly one"),
        ("POST", "/v1/models/iris:predict", {"instances": [[1.0, 2.0]]}, 400, "X"),
        ("POST", "/v1/models/iris:predict", "{not json", 400, "JSON"),
    ],
)
def test_tfs_errors_are_json_with_the_tf_serving_status(
    demo: Demo, http: requests.Session, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    data = body if isinstance(body, str) or body is None else json.dumps(body)
    r = http.request(method, demo.rest + path, data=data)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert isinstance(error, str) and error
    assert fragment in error


# ---- KServe V2 with tritonclient.http ----------------------------------------------------------------------


def test_v2_health_with_tritonclient(triton: httpclient.InferenceServerClient) -> None:
    assert triton.is_server_live()
    assert triton.is_server_ready()
    assert triton.is_model_ready("iris")
    assert triton.is_model_ready("iris", "1")
    assert triton.is_model_ready("iris_handler")
    assert not triton.is_model_ready("iris", "9")
    assert not triton.is_model_ready("nope")


def test_v2_model_metadata_with_tritonclient(triton: httpclient.InferenceServerClient) -> None:
    md = triton.get_model_metadata("iris")
    assert md["name"] == "iris"
    assert md["versions"] == ["1", "2"]
    assert md["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}]
    outputs = {o["name"]: o for o in md["outputs"]}
    assert outputs["probabilities"] == {"name": "probabilities", "datatype": "FP32", "shape": [-1, 3]}
    assert outputs["label"]["datatype"] == "INT64"
    assert triton.get_model_metadata("iris", "1")["name"] == "iris"
    with pytest.raises(InferenceServerException):
        triton.get_model_metadata("nope")


def _triton_infer(
    triton: httpclient.InferenceServerClient, binary: bool, version: str = ""
) -> tuple[httpclient.InferResult, npt.NDArray[Any]]:
    x = np.asarray(ROWS, dtype=np.float32)
    inp = httpclient.InferInput("X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    outputs = [
        httpclient.InferRequestedOutput("probabilities", binary_data=binary),
        httpclient.InferRequestedOutput("label", binary_data=binary),
    ]
    return triton.infer("iris", [inp], model_version=version, outputs=outputs), x


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("version", ["", "1", "2"], ids=["latest", "v1", "v2"])
def test_v2_infer_with_tritonclient(
    demo: Demo, triton: httpclient.InferenceServerClient, binary: bool, version: str
) -> None:
    result, _ = _triton_infer(triton, binary, version)
    want = int(version or 2)
    resp = result.get_response()
    assert resp["model_name"] == "iris"
    assert resp["model_version"] == str(want)
    for out in resp["outputs"]:
        # The response must honour the requested encoding, not just decode: JSON data or binary sizes.
        if binary:
            assert "data" not in out and out["parameters"]["binary_data_size"] > 0, out
        else:
            assert "data" in out and "binary_data_size" not in (out.get("parameters") or {}), out
    ref = iris_ref(demo, want)
    probs, labels = result.as_numpy("probabilities"), result.as_numpy("label")
    assert probs is not None and labels is not None
    assert probs.dtype == np.float32 and probs.shape == (len(ROWS), 3)
    assert_allclose(probs, ref["probabilities"], **FLOAT_TOL)
    assert labels.tolist() == ref["label"].tolist()


def test_v2_infer_with_default_binary_tensors(demo: Demo, triton: httpclient.InferenceServerClient) -> None:
    # The client's defaults: binary input, no outputs named -> every output, in JSON unless asked otherwise.
    x = np.asarray(ROWS, dtype=np.float32)
    inp = httpclient.InferInput("X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = triton.infer("iris", [inp], request_id="req-42")
    assert result.get_response()["id"] == "req-42"
    probs = result.as_numpy("probabilities")
    assert probs is not None
    assert_allclose(probs, iris_ref(demo, 2)["probabilities"], **FLOAT_TOL)


def test_v2_infer_errors_raise_in_tritonclient(triton: httpclient.InferenceServerClient) -> None:
    bad = np.zeros((2, 3), dtype=np.float32)
    inp = httpclient.InferInput("X", list(bad.shape), "FP32")
    inp.set_data_from_numpy(bad)
    with pytest.raises(InferenceServerException, match="shape"):
        triton.infer("iris", [inp])
    with pytest.raises(InferenceServerException, match="nope"):
        triton.infer("nope", [inp])


# ---- SageMaker container contract ---------------------------------------------------------------------------


def _invoke(
    http: requests.Session, demo: Demo, model: str, body: bytes, content_type: str, accept: str
) -> requests.Response:
    headers = {
        "Content-Type": content_type,
        "Accept": accept,
        "X-Amzn-SageMaker-Custom-Attributes": f"tfs-model-name={model}",
    }
    return http.post(demo.sagemaker + "/invocations", data=body, headers=headers)


def _npy(arr: npt.NDArray[Any]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _csv(rows: list[list[float]]) -> bytes:
    return "\n".join(",".join(str(v) for v in row) for row in rows).encode()


def test_sagemaker_ping(demo: Demo, http: requests.Session) -> None:
    r = http.get(demo.sagemaker + "/ping")
    assert r.status_code == 200


def test_sagemaker_csv_to_json(demo: Demo, http: requests.Session) -> None:
    r = _invoke(http, demo, "iris", _csv(ROWS), "text/csv", "application/json")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-servekit-model-version"] == "2"
    preds = r.json()["predictions"]
    assert_allclose([p["probabilities"] for p in preds], iris_ref(demo, 2)["probabilities"], **FLOAT_TOL)


def test_sagemaker_csv_to_csv(demo: Demo, http: requests.Session) -> None:
    r = _invoke(http, demo, "diabetes", _csv(DIABETES_ROWS), "text/csv", "text/csv")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    values = [float(row[0]) for row in csv.reader(io.StringIO(r.text)) if row]
    ridge = joblib.load(demo.repo / "diabetes" / "1" / "model.joblib")
    assert_allclose(values, ridge.predict(np.asarray(DIABETES_ROWS)), rtol=1e-9)


def test_sagemaker_csv_accept_writes_a_column_per_output_value(demo: Demo, http: requests.Session) -> None:
    r = _invoke(http, demo, "iris", _csv(ROWS), "text/csv", "text/csv")  # label and probabilities: a 406 before
    assert r.status_code == 200, r.text
    table = [[float(c) for c in row] for row in csv.reader(io.StringIO(r.text)) if row]
    ref = iris_ref(demo, 2)
    assert [int(row[0]) for row in table] == list(ref["label"])
    assert_allclose([row[1:] for row in table], ref["probabilities"], **FLOAT_TOL)


def test_sagemaker_jsonlines(demo: Demo, http: requests.Session) -> None:
    body = b"".join(json.dumps(row).encode() + b"\n" for row in ROWS)
    r = _invoke(http, demo, "iris", body, "application/jsonlines", "application/jsonlines")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/jsonlines")
    lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
    assert len(lines) == len(ROWS)
    ref = iris_ref(demo, 2)
    assert_allclose([line["probabilities"] for line in lines], ref["probabilities"], **FLOAT_TOL)
    assert [line["label"] for line in lines] == ref["label"].tolist()


def test_sagemaker_npy_to_npy(demo: Demo, http: requests.Session) -> None:
    x = np.asarray(DIABETES_ROWS, dtype=np.float64)
    r = _invoke(http, demo, "diabetes", _npy(x), "application/x-npy", "application/x-npy")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-npy")
    got = np.load(io.BytesIO(r.content), allow_pickle=False)
    ridge = joblib.load(demo.repo / "diabetes" / "1" / "model.joblib")
    assert got.shape == (len(DIABETES_ROWS),)
    assert_allclose(got, ridge.predict(x), rtol=1e-9)


def test_sagemaker_npy_to_json_with_version(demo: Demo, http: requests.Session) -> None:
    headers = {
        "Content-Type": "application/x-npy",
        "Accept": "application/json",
        "X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=iris,tfs-model-version=1",
    }
    r = http.post(demo.sagemaker + "/invocations", data=_npy(np.asarray(ROWS, np.float32)), headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["x-servekit-model-version"] == "1"
    assert_allclose(r.json()["outputs"]["probabilities"], iris_ref(demo, 1)["probabilities"], **FLOAT_TOL)


def test_sagemaker_handler_model(demo: Demo, http: requests.Session) -> None:
    body = json.dumps({"features": ROWS}).encode()
    r = _invoke(http, demo, "iris_handler", body, "application/json", "application/json")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    estimator = joblib.load(demo.repo / "iris_handler" / "1" / "model.joblib")
    probs = estimator.predict_proba(np.asarray(ROWS))
    assert doc["labels"] == [("setosa", "versicolor", "virginica")[i] for i in probs.argmax(axis=1)]
    assert_allclose(doc["probabilities"], probs.round(6), atol=1e-9)


def test_sagemaker_needs_a_model_name_when_several_are_served(demo: Demo, http: requests.Session) -> None:
    r = http.post(demo.sagemaker + "/invocations", data=_csv(ROWS), headers={"Content-Type": "text/csv"})
    assert r.status_code == 400, r.text
    assert "tfs-model-name" in r.json()["error"]


def test_every_protocol_on_both_ports(demo: Demo, http: requests.Session) -> None:
    # One app serves every protocol; the SageMaker port is a second listener, not a separate app.
    assert http.get(demo.rest + "/ping").status_code == 200
    assert http.get(demo.sagemaker + "/v1/models/iris").status_code == 200
    assert http.get(demo.sagemaker + "/v2/health/ready").status_code == 200
