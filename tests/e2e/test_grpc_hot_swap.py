"""Hot swap under gRPC load: TF Serving Predict requests from a thread while a new model version appears and the
old one is unloaded, against a real ``servekit serve --port``. No request fails; once the new version answers,
"latest" never goes back; each answer is the output of the version its response names."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import onnxruntime as ort
import pytest
from numpy.testing import assert_allclose
from tests.e2e.conftest import free_port

from servekit.serving.codecs.tensor_proto import from_ndarray, to_ndarray
from servekit.serving.protos.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from servekit.tools.demo.build import iris_onnx

pytestmark = pytest.mark.e2e
ROW = np.asarray([[5.9, 3.0, 4.2, 1.5]], dtype=np.float32)  # where the two iris versions disagree most


def reference(version_dir: Path) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(version_dir / "model.onnx"))
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {session.get_inputs()[0].name: ROW}), strict=True))


def test_a_new_version_takes_over_under_grpc_load_with_no_failure(
    server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    base, staging = tmp_path / "iris", tmp_path / "staging"
    expected = {1: reference(iris_onnx(base / "1", c=0.05)), 2: reference(iris_onnx(staging / "2", c=1.0))}
    port = free_port()
    poll = ("--file_system_poll_wait_seconds", "0.2")
    srv = server_factory("--model_base_path", str(base), "--model_name", "iris", *poll, "--port", str(port))
    srv_grpc = f"127.0.0.1:{port}"
    srv.wait_ready()
    answers: list[tuple[int, dict[str, np.ndarray]]] = []
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with grpc.insecure_channel(srv_grpc) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            while not stop.is_set():
                req = predict_pb2.PredictRequest()
                req.model_spec.name = "iris"
                req.inputs["X"].CopyFrom(from_ndarray(ROW))
                try:
                    resp = stub.Predict(req, timeout=10)
                except grpc.RpcError as exc:  # counted: the assertion below says how many
                    failures.append(f"{exc.code()}: {exc.details()}")
                    continue
                answers.append((resp.model_spec.version.value, {k: to_ndarray(v) for k, v in resp.outputs.items()}))

    worker = threading.Thread(target=load)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while len(answers) < 20 and time.monotonic() < deadline:  # polling the other thread's progress
            time.sleep(0.01)
        os.rename(staging / "2", base / "2")  # atomic: the version appears whole
        while not any(v == 2 for v, _ in answers[-5:]) and time.monotonic() < deadline + 30:
            time.sleep(0.01)
        shutil.rmtree(base / "1")
        seen = len(answers)
        while len(answers) < seen + 50 and time.monotonic() < deadline + 60:
            time.sleep(0.01)
    finally:
        stop.set()
        worker.join(30)

    assert failures == [], failures[:3]
    versions = [v for v, _ in answers]
    assert versions[0] == 1 and versions[-1] == 2
    first_v2 = versions.index(2)
    assert set(versions[first_v2:]) == {2}, "after the first version-2 answer, latest went back to version 1"
    for version, outputs in answers:
        for name, value in outputs.items():
            if name in expected[version] and value.dtype.kind == "f":
                assert_allclose(value, expected[version][name], rtol=1e-5, atol=1e-6)
