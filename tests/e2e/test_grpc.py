"""gRPC fronts against one real ``servekit serve --port`` process holding the demo models, with real clients:
TF Serving's PredictionService/ModelService through stubs generated from the real protos, KServe V2 through
``tritonclient.grpc`` (and tritonclient's own generated stubs for typed contents), the ``grpc.health.v1`` health
check and server reflection. Answers are checked against the model files run in this process and against what
the REST front of the same server says; errors against the REST status and message."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as tritongrpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from numpy.testing import assert_allclose
from tests.e2e.conftest import free_port
from tests.e2e.test_clients import DIABETES_ROWS, FLOAT_TOL, ROWS, onnx_reference
from tritonclient.grpc import service_pb2 as triton_pb2
from tritonclient.grpc import service_pb2_grpc as triton_grpc

from servekit.serving.codecs.tensor_proto import from_ndarray, to_ndarray
from servekit.serving.protos.tensorflow.core.framework import types_pb2
from servekit.serving.protos.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

pytestmark = pytest.mark.e2e
MAX_MESSAGE = 1_000_000


@dataclass
class Served:
    rest: str
    grpc: str
    repo: Path


@pytest.fixture(scope="module")
def served(demo_repo: Path, module_server_factory: Callable[..., Any]) -> Served:
    port = free_port()
    srv = module_server_factory(
        *("--model_config_file", str(demo_repo / "models.config"), "--file_system_poll_wait_seconds", "0"),
        *("--port", str(port), "--grpc_max_message_bytes", str(MAX_MESSAGE)),
    )
    srv.wait_ready()
    return Served(srv.url, f"127.0.0.1:{port}", demo_repo)


@pytest.fixture(scope="module")
def channel(served: Served) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(served.grpc) as ch:
        yield ch


@pytest.fixture(scope="module")
def tfs(channel: grpc.Channel) -> prediction_service_pb2_grpc.PredictionServiceStub:
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


def _predict(model: str, rows: Any, *, name: str = "X", dtype: Any = np.float32, **spec: Any) -> Any:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    for key, value in spec.items():
        if key == "version":
            req.model_spec.version.value = value
        else:
            setattr(req.model_spec, key, value)
    req.inputs[name].CopyFrom(from_ndarray(np.asarray(rows, dtype=dtype)))
    return req


def _error(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


# ---- TF Serving PredictionService / ModelService ---------------------------------------------------------


def test_predict_matches_the_model_file_and_the_rest_front(served: Served, tfs: Any) -> None:
    resp = tfs.Predict(_predict("iris", ROWS, version=1), timeout=10)
    ref = onnx_reference(served.repo / "iris" / "1" / "model.onnx", ROWS)
    got = {name: to_ndarray(t) for name, t in resp.outputs.items()}
    assert_allclose(got["probabilities"], ref["probabilities"], **FLOAT_TOL)
    assert got["label"].tolist() == ref["label"].tolist()
    assert (resp.model_spec.name, resp.model_spec.version.value) == ("iris", 1)
    assert resp.model_spec.signature_name == "serving_default"
    assert resp.outputs["probabilities"].tensor_content  # numbers go out as tensor_content, as TF Serving's do
    rest = requests.post(f"{served.rest}/v1/models/iris/versions/1:predict", json={"inputs": ROWS}, timeout=10)
    assert_allclose(got["probabilities"], np.asarray(rest.json()["outputs"]["probabilities"]), **FLOAT_TOL)


def test_typed_values_labels_and_output_filter(served: Served, tfs: Any) -> None:
    req = _predict("iris", ROWS[:1], version_label="canary")
    typed = req.inputs["X"]
    typed.ClearField("tensor_content")
    typed.float_val.extend(np.asarray(ROWS[0], dtype=np.float32).tolist())
    req.output_filter.append("probabilities")
    resp = tfs.Predict(req, timeout=10)
    assert list(resp.outputs) == ["probabilities"]
    assert resp.model_spec.version.value == 2  # the canary label
    ref = onnx_reference(served.repo / "iris" / "2" / "model.onnx", ROWS[:1])
    assert_allclose(to_ndarray(resp.outputs["probabilities"]), ref["probabilities"], **FLOAT_TOL)


def test_classify_regress_and_multi_inference_answer_what_rest_does(served: Served, tfs: Any) -> None:
    features = ("sepal_length", "sepal_width", "petal_length", "petal_width")
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name = "iris_sklearn"
    ctx = req.input.example_list_with_context
    ctx.context.features.feature["petal_width"].float_list.value.append(0.5)
    for row in ROWS:
        ex = ctx.examples.add()
        for f, v in zip(features[:3], row[:3], strict=True):
            ex.features.feature[f].float_list.value.append(v)
    got = tfs.Classify(req, timeout=10)
    examples = [dict(zip(features[:3], row[:3], strict=True)) for row in ROWS]
    body = {"context": {"petal_width": 0.5}, "examples": examples}
    rest = requests.post(f"{served.rest}/v1/models/iris_sklearn:classify", json=body, timeout=10).json()["results"]
    assert [[(c.label, pytest.approx(c.score, abs=1e-6)) for c in r.classes] for r in got.result.classifications] == [
        [tuple(pair) for pair in row] for row in rest
    ]
    assert got.model_spec.signature_name == "classify"

    reg = regression_pb2.RegressionRequest()
    reg.model_spec.name = "diabetes"
    for row in DIABETES_ROWS:
        reg.input.example_list.examples.add().features.feature["x"].float_list.value.extend(row)
    values = [r.value for r in tfs.Regress(reg, timeout=10).result.regressions]
    body = {"examples": [{"x": row} for row in DIABETES_ROWS]}
    rest_values = requests.post(f"{served.rest}/v1/models/diabetes:regress", json=body, timeout=10).json()["results"]
    assert values == pytest.approx(rest_values, rel=1e-5)

    multi = inference_pb2.MultiInferenceRequest()
    task = multi.tasks.add(method_name="tensorflow/serving/classify")
    task.model_spec.name = "iris_sklearn"
    multi.input.CopyFrom(req.input)
    (result,) = tfs.MultiInference(multi, timeout=10).results
    assert result.classification_result == got.result


def test_metadata_and_status_answer_what_rest_does(served: Served, tfs: Any, channel: grpc.Channel) -> None:
    req = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    req.model_spec.name = "iris"
    md = tfs.GetModelMetadata(req, timeout=10)
    sigs = get_model_metadata_pb2.SignatureDefMap()
    assert md.metadata["signature_def"].Unpack(sigs)
    rest = requests.get(f"{served.rest}/v1/models/iris/metadata", timeout=10).json()
    rest_sigs = rest["metadata"]["signature_def"]["signature_def"]
    assert set(sigs.signature_def) == set(rest_sigs)
    for name, sd in sigs.signature_def.items():
        assert sd.method_name == rest_sigs[name]["method_name"]
        for tensor, info in sd.inputs.items():
            want = rest_sigs[name]["inputs"][tensor]
            assert types_pb2.DataType.Name(info.dtype) == want["dtype"]
            assert [d.size for d in info.tensor_shape.dim] == [int(d["size"]) for d in want["tensor_shape"]["dim"]]
    assert md.model_spec.version.value == int(rest["model_spec"]["version"])

    status_req = get_model_status_pb2.GetModelStatusRequest()
    status_req.model_spec.name = "iris"
    status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status_req, timeout=10)
    rest_status = requests.get(f"{served.rest}/v1/models/iris", timeout=10).json()["model_version_status"]
    assert [
        (str(s.version), get_model_status_pb2.ModelVersionStatus.State.Name(s.state))
        for s in status.model_version_status
    ] == [(s["version"], s["state"]) for s in rest_status]


def test_errors_carry_the_rest_message_under_the_grpc_code(served: Served, tfs: Any) -> None:
    err = _error(lambda: tfs.Predict(_predict("nope", ROWS), timeout=10))
    rest = requests.post(f"{served.rest}/v1/models/nope:predict", json={"inputs": ROWS}, timeout=10)
    assert (err.code(), err.details()) == (grpc.StatusCode.NOT_FOUND, rest.json()["error"])
    assert rest.status_code == 404

    err = _error(lambda: tfs.Predict(_predict("iris", ROWS, name="wrong"), timeout=10))
    rest = requests.post(f"{served.rest}/v1/models/iris:predict", json={"inputs": {"wrong": ROWS}}, timeout=10)
    assert (err.code(), err.details()) == (grpc.StatusCode.INVALID_ARGUMENT, rest.json()["error"])

    err = _error(lambda: tfs.Predict(_predict("iris", ROWS, version=9), timeout=10))
    rest = requests.post(f"{served.rest}/v1/models/iris/versions/9:predict", json={"inputs": ROWS}, timeout=10)
    assert (err.code(), err.details()) == (grpc.StatusCode.NOT_FOUND, rest.json()["error"])

    bad = _predict("iris", ROWS)
    bad.inputs["X"].tensor_content = b"\0" * 3
    err = _error(lambda: tfs.Predict(bad, timeout=10))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "tensor_content holds 3 bytes" in err.details()

    huge = _predict("iris", np.zeros((MAX_MESSAGE // 16 + 1, 4)), dtype=np.float32)
    assert _error(lambda: tfs.Predict(huge, timeout=10)).code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_reflection_lists_the_services_and_health_says_serving(channel: grpc.Channel) -> None:
    services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {
        "tensorflow.serving.PredictionService",
        "tensorflow.serving.ModelService",
        "inference.GRPCInferenceService",
        "grpc.health.v1.Health",
    } <= services
    db = ProtoReflectionDescriptorDatabase(channel)
    assert (
        db.FindFileContainingSymbol("tensorflow.serving.PredictRequest").name == "tensorflow_serving/apis/predict.proto"
    )
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "tensorflow.serving.PredictionService", "inference.GRPCInferenceService"):
        assert health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status == (
            health_pb2.HealthCheckResponse.SERVING
        )


# ---- KServe V2 (tritonclient.grpc) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def triton(served: Served) -> Iterator[tritongrpc.InferenceServerClient]:
    client = tritongrpc.InferenceServerClient(served.grpc)
    yield client
    client.close()


def test_tritonclient_health_metadata_and_raw_infer(served: Served, triton: Any) -> None:
    assert triton.is_server_live() and triton.is_server_ready()
    assert triton.is_model_ready("iris", "1") and not triton.is_model_ready("iris", "7")
    md = triton.get_model_metadata("iris", as_json=True)
    rest_md = requests.get(f"{served.rest}/v2/models/iris", timeout=10).json()
    assert md["inputs"] == [{**t, "shape": [str(d) for d in t["shape"]]} for t in rest_md["inputs"]]
    assert md["versions"] == rest_md["versions"]
    assert triton.get_server_metadata().name == "servekit"
    x = tritongrpc.InferInput("X", [len(ROWS), 4], "FP32")
    x.set_data_from_numpy(np.asarray(ROWS, dtype=np.float32))
    result = triton.infer("iris", [x], model_version="1", outputs=[tritongrpc.InferRequestedOutput("probabilities")])
    ref = onnx_reference(served.repo / "iris" / "1" / "model.onnx", ROWS)
    assert_allclose(result.as_numpy("probabilities"), ref["probabilities"], **FLOAT_TOL)
    assert result.as_numpy("label") is None  # only the output asked for
    assert result.get_response().model_version == "1"
    index = {(m.name, m.version): m.state for m in triton.get_model_repository_index().models}
    assert index[("iris", "1")] == index[("iris", "2")] == "READY"


def test_typed_contents_through_tritonclients_own_stubs(served: Served, channel: grpc.Channel) -> None:
    stub = triton_grpc.GRPCInferenceServiceStub(channel)
    req = triton_pb2.ModelInferRequest(model_name="iris", model_version="2", id="req-7")
    tensor = req.inputs.add(name="X", datatype="FP32", shape=[len(ROWS), 4])
    tensor.contents.fp32_contents.extend(np.asarray(ROWS, dtype=np.float32).ravel().tolist())
    resp = stub.ModelInfer(req, timeout=10)
    assert resp.id == "req-7" and resp.model_version == "2"
    out = {o.name: (o, raw) for o, raw in zip(resp.outputs, resp.raw_output_contents, strict=True)}
    meta, raw = out["probabilities"]
    probs = np.frombuffer(raw, dtype="<f4").reshape(list(meta.shape))
    ref = onnx_reference(served.repo / "iris" / "2" / "model.onnx", ROWS)
    assert_allclose(probs, ref["probabilities"], **FLOAT_TOL)


def test_kserve_errors_carry_the_rest_message(served: Served, triton: Any) -> None:
    x = tritongrpc.InferInput("X", [1, 3], "FP32")
    x.set_data_from_numpy(np.zeros((1, 3), dtype=np.float32))
    with pytest.raises(tritongrpc.InferenceServerException) as info:
        triton.infer("iris", [x])
    body = {"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [0.0, 0.0, 0.0]}]}
    rest = requests.post(f"{served.rest}/v2/models/iris/infer", json=body, timeout=10)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == rest.json()["error"]
    with pytest.raises(tritongrpc.InferenceServerException) as info:
        triton.load_model("iris")
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"


# ---- HandleReloadConfigRequest, its own server -----------------------------------------------------------


def test_reload_config_adds_and_removes_models(demo_repo: Path, server_factory: Callable[..., Any]) -> None:
    port = free_port()
    srv = server_factory(
        *("--model_name", "iris", "--model_base_path", str(demo_repo / "iris")),
        *("--file_system_poll_wait_seconds", "0", "--port", str(port)),
    )
    srv.wait_ready()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        models = model_service_pb2_grpc.ModelServiceStub(ch)
        req = model_management_pb2.ReloadConfigRequest()
        entry = req.config.model_config_list.config.add(name="diabetes", base_path=str(demo_repo / "diabetes"))
        entry.model_platform = "sklearn"
        resp = models.HandleReloadConfigRequest(req, timeout=60)
        assert resp.status.error_code == 0
        # Returned once the new model serves: no waiting here.
        status_req = get_model_status_pb2.GetModelStatusRequest()
        status_req.model_spec.name = "diabetes"
        (status,) = models.GetModelStatus(status_req, timeout=10).model_version_status
        assert get_model_status_pb2.ModelVersionStatus.State.Name(status.state) == "AVAILABLE"
        assert requests.get(f"{srv.url}/v1/models/iris", timeout=5).status_code == 404  # left out: unloaded
        tfs = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        resp_predict = tfs.Predict(_predict("diabetes", DIABETES_ROWS, name="inputs", dtype=np.float64), timeout=10)
        assert to_ndarray(resp_predict.outputs["predictions"]).shape == (len(DIABETES_ROWS),)
        bad = model_management_pb2.ReloadConfigRequest()
        bad.config.model_config_list.config.add(name="x")  # no base_path
        assert (
            _error(lambda: models.HandleReloadConfigRequest(bad, timeout=10)).code() == grpc.StatusCode.INVALID_ARGUMENT
        )


def test_workers_share_the_grpc_port(demo_repo: Path, server_factory: Callable[..., Any]) -> None:
    port = free_port()
    srv = server_factory(
        *("--model_name", "iris", "--model_base_path", str(demo_repo / "iris")),
        *("--file_system_poll_wait_seconds", "0", "--port", str(port), "--workers", "2"),
    )
    srv.wait_ready()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        health = health_pb2_grpc.HealthStub(ch)
        health_pb2.HealthCheckRequest()
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        # A worker binds the gRPC port only once its models are loaded, so any answer is a full one.
        resp = stub.Predict(_predict("iris", ROWS), timeout=30, wait_for_ready=True)
        assert to_ndarray(resp.outputs["probabilities"]).shape == (len(ROWS), 3)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING


def test_a_taken_grpc_port_fails_the_start_with_a_message(demo_repo: Path, server_factory: Callable[..., Any]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        srv = server_factory(
            *("--model_name", "iris", "--model_base_path", str(demo_repo / "iris")),
            *("--file_system_poll_wait_seconds", "0", "--port", str(port)),
        )
        assert srv.proc.wait(timeout=60) != 0
    assert f"cannot listen for gRPC on 127.0.0.1:{port}" in srv.log()
