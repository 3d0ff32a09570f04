"""SavedModel and TorchScript models behind a real ``servekit serve --port`` (``make test-extras``): TF Serving
REST (row and columnar, ``signature_name``, :classify/:regress) and gRPC Predict/Classify/Regress/
GetModelMetadata with stubs from the real protos, answers equal to the frameworks' own in-process results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from numpy.testing import assert_allclose, assert_array_equal

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from tests.e2e.conftest import free_port  # noqa: E402
from tests.extras_models import CLASSES, example, scripted_torch_model, tf1_saved_model  # noqa: E402

from servekit.serving.codecs.tensor_proto import from_ndarray, to_ndarray  # noqa: E402
from servekit.serving.protos.tensorflow_serving.apis import (  # noqa: E402
    classification_pb2,
    get_model_metadata_pb2,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

pytestmark = [pytest.mark.e2e, pytest.mark.extras]
X = np.array([[1.0, 2.0], [-0.5, 3.0]], dtype=np.float32)
BIAS = np.array([0.5, -2.0], dtype=np.float32)
ROWS = [(1.0, 2), (0.5, -3), (-1.5, 7)]


@dataclass
class Served:
    rest: str
    stub: Any
    tf_model: Path
    torch_module: Any
    grpc_target: str = ""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, module_server_factory: Callable[..., Any]) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("extras-models")
    tf_model = tf1_saved_model(base / "tfm" / "1")
    module = scripted_torch_model(base / "torchm" / "1")
    torch.save((torch.zeros(1, 4), torch.ones(1)), base / "torchm" / "1" / "example_inputs.pt")
    (base / "models.config").write_text(
        "model_config_list {\n"
        f"  config {{ name: 'tfm' base_path: '{base / 'tfm'}' }}\n"
        f"  config {{ name: 'torchm' base_path: '{base / 'torchm'}' }}\n"
        "}\n"
    )
    port = free_port()
    srv = module_server_factory(
        "--model_config_file", str(base / "models.config"), "--file_system_poll_wait_seconds", "0", "--port", str(port)
    )
    srv.wait_ready(timeout=120)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        yield Served(srv.url, stub, tf_model, module, f"127.0.0.1:{port}")


def _tf(path: Path, signature: str, **inputs: Any) -> dict[str, np.ndarray]:
    fn = tf.saved_model.load(str(path)).signatures[signature]
    return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in inputs.items()}).items()}


def test_rest_predict_rows_and_columns(served: Served) -> None:
    ref = _tf(served.tf_model, "serving_default", x=X, bias=BIAS)
    rows = [{"x": x, "bias": float(b)} for x, b in zip(X.tolist(), BIAS.tolist(), strict=True)]
    r = requests.post(f"{served.rest}/v1/models/tfm:predict", json={"instances": rows}, timeout=30)
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert_allclose([p["y"] for p in preds], ref["y"], rtol=1e-6)
    assert [p["label"] for p in preds] == ref["label"].tolist()
    body = {"inputs": {"x": X.tolist(), "bias": BIAS.tolist()}, "signature_name": "serving_default"}
    cols = requests.post(f"{served.rest}/v1/models/tfm/versions/1:predict", json=body, timeout=30).json()["outputs"]
    assert_allclose(cols["y"], ref["y"], rtol=1e-6)
    bad = requests.post(f"{served.rest}/v1/models/tfm:predict", json={"inputs": {"x": X.tolist()}}, timeout=30)
    assert bad.status_code == 400 and "missing input(s) 'bias'" in bad.json()["error"]


def test_rest_classify_and_regress(served: Served) -> None:
    serialized = np.array([example(a, b).SerializeToString() for a, b in ROWS], dtype=object)
    ref = _tf(served.tf_model, "classify", inputs=serialized)
    examples = [{"a": a, "b": b} for a, b in ROWS]
    r = requests.post(f"{served.rest}/v1/models/tfm:classify", json={"examples": examples}, timeout=30)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [[label for label, _ in row] for row in results] == [list(CLASSES)] * len(ROWS)
    assert_allclose([[s for _, s in row] for row in results], ref["scores"], rtol=1e-6)
    reg = requests.post(f"{served.rest}/v1/models/tfm:regress", json={"examples": examples}, timeout=30).json()
    assert_allclose(
        reg["results"], _tf(served.tf_model, "regress", inputs=serialized)["outputs"].reshape(-1), rtol=1e-6
    )


def test_grpc_predict_classify_regress_and_metadata(served: Served) -> None:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "tfm"
    req.inputs["x"].CopyFrom(from_ndarray(X))
    req.inputs["bias"].CopyFrom(from_ndarray(BIAS))
    resp = served.stub.Predict(req, timeout=30)
    ref = _tf(served.tf_model, "serving_default", x=X, bias=BIAS)
    assert_allclose(to_ndarray(resp.outputs["y"]), ref["y"], rtol=1e-6)
    assert_array_equal(to_ndarray(resp.outputs["label"]), ref["label"])

    creq = classification_pb2.ClassificationRequest()
    creq.model_spec.name = "tfm"
    ctx = creq.input.example_list_with_context
    ctx.context.features.feature["b"].int64_list.value.append(2)
    for a, _ in ROWS:
        ctx.examples.add().features.feature["a"].float_list.value.append(a)
    got = served.stub.Classify(creq, timeout=30)
    serialized = np.array([example(a, 2).SerializeToString() for a, _ in ROWS], dtype=object)
    ref_scores = _tf(served.tf_model, "classify", inputs=serialized)["scores"]
    assert [[c.label for c in r.classes] for r in got.result.classifications] == [list(CLASSES)] * len(ROWS)
    assert_allclose([[c.score for c in r.classes] for r in got.result.classifications], ref_scores, rtol=1e-6)

    rreq = regression_pb2.RegressionRequest()
    rreq.model_spec.name = "tfm"
    for a, b in ROWS:
        rreq.input.example_list.examples.add().CopyFrom(_servekit_example(a, b))
    values = [r.value for r in served.stub.Regress(rreq, timeout=30).result.regressions]
    ref_values = _tf(
        served.tf_model,
        "regress",
        inputs=np.array([example(a, b).SerializeToString() for a, b in ROWS], dtype=object),
    )["outputs"]
    assert_allclose(values, ref_values.reshape(-1), rtol=1e-6)

    mreq = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    mreq.model_spec.name = "tfm"
    meta = served.stub.GetModelMetadata(mreq, timeout=30)
    sig_map = get_model_metadata_pb2.SignatureDefMap()
    meta.metadata["signature_def"].Unpack(sig_map)
    assert set(sig_map.signature_def) == {"classify", "regress", "serving_default"}
    assert sig_map.signature_def["classify"].method_name == "tensorflow/serving/classify"
    assert [d.size for d in sig_map.signature_def["serving_default"].inputs["x"].tensor_shape.dim] == [-1, 2]


def _servekit_example(a: float, b: int) -> Any:
    from servekit.serving.protos.tensorflow.core.example.example_pb2 import Example

    return Example.FromString(example(a, b).SerializeToString())


def test_torchscript_over_rest(served: Served) -> None:
    features = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    scale = np.array([1.0, 0.5, 2.0], dtype=np.float32)
    body = {"inputs": {"features": features.tolist(), "scale": scale.tolist()}}
    r = requests.post(f"{served.rest}/v1/models/torchm:predict", json=body, timeout=30)
    assert r.status_code == 200, r.text
    with torch.inference_mode():
        probs, total = served.torch_module(torch.from_numpy(features), torch.from_numpy(scale))
    assert_allclose(r.json()["outputs"]["output_0"], probs.numpy(), rtol=1e-5)
    assert_allclose(r.json()["outputs"]["output_1"], total.numpy(), rtol=1e-5)
    meta = requests.get(f"{served.rest}/v2/models/torchm", timeout=30).json()
    assert meta["platform"] == "pytorch_libtorch"


def test_tensorflow_serving_api_clients_work_unchanged(served: Served) -> None:
    """What a TF Serving user runs today: tensorflow-serving-api's own stubs and messages, TensorFlow's
    make_tensor_proto / make_ndarray, pointed at servekit's gRPC port."""
    tfs_apis = pytest.importorskip("tensorflow_serving.apis.prediction_service_pb2_grpc")
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc
    from tensorflow_serving.apis import predict_pb2 as tfs_predict_pb2

    with grpc.insecure_channel(served.grpc_target) as channel:
        stub = tfs_apis.PredictionServiceStub(channel)
        req = tfs_predict_pb2.PredictRequest()
        req.model_spec.name = "tfm"
        req.model_spec.signature_name = "serving_default"
        req.inputs["x"].CopyFrom(tf.make_tensor_proto(X))
        req.inputs["bias"].CopyFrom(tf.make_tensor_proto(BIAS))
        resp = stub.Predict(req, timeout=30)
        ref = _tf(served.tf_model, "serving_default", x=X, bias=BIAS)
        assert_allclose(tf.make_ndarray(resp.outputs["y"]), ref["y"], rtol=1e-6)
        assert resp.model_spec.version.value == 1

        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
            get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "tfm"}), timeout=30
        )
        assert [(v.version, v.state) for v in status.model_version_status] == [
            (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE)
        ]
