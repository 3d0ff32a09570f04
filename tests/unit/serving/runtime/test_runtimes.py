"""Each built-in runtime against models built in the test (deterministic demo builders)."""

from __future__ import annotations

import json
from pathlib import Path

import joblib
import numpy as np
import onnxruntime as ort
import pytest
from sklearn.datasets import load_iris

from servekit.errors import ConfigError, ErrorCode, ServekitError
from servekit.serving.runtime.handler import HandlerServable
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.tools.demo.build import IRIS_CLASSES, IRIS_FEATURES, iris_handler, iris_onnx, iris_sklearn, regressor
from servekit.types import CLASSIFY_METHOD, REGRESS_METHOD

X, _ = load_iris(return_X_y=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runtimes")
    return {
        "onnx": iris_onnx(base / "onnx" / "1"),
        "sklearn": iris_sklearn(base / "sklearn" / "1"),
        "regressor": regressor(base / "reg" / "1"),
        "handler": iris_handler(base / "handler" / "1"),
    }


def test_choice_by_files(models: dict[str, Path]) -> None:
    reg = RuntimeRegistry()
    assert reg.choose(models["onnx"]).name == "onnx"
    assert reg.choose(models["sklearn"]).name == "sklearn"
    assert reg.choose(models["handler"]).name == "python"  # inference.py wins over model.joblib


def test_choice_by_manifest(tmp_path: Path, models: dict[str, Path]) -> None:
    (tmp_path / "servekit.toml").write_text('runtime = "nonesuch"\n')
    with pytest.raises(
        ConfigError,
        match="unknown runtime 'nonesuch'; available: python, onnx, sklearn, tensorflow, torch, xgboost, lightgbm",
    ):
        RuntimeRegistry().choose(tmp_path)


def test_no_runtime_recognises(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(ConfigError, match=r"expected code/inference.py, a .onnx file"):
        RuntimeRegistry().choose(tmp_path)


def test_onnx_signatures_and_predict(models: dict[str, Path]) -> None:
    s = RuntimeRegistry().load(models["onnx"])
    sig = s.signatures["serving_default"]
    assert [(t.name, t.datatype, t.shape) for t in sig.inputs] == [("X", "FP32", (-1, 4))]
    assert [(t.name, t.datatype, t.shape) for t in sig.outputs] == [
        ("label", "INT64", (-1,)),
        ("probabilities", "FP32", (-1, 3)),
    ]
    assert s.signatures["classify"].method == CLASSIFY_METHOD
    assert s.signatures["classify"].class_labels == IRIS_CLASSES
    x = X[:5].astype(np.float32)
    out = s.predict("serving_default", {"X": x})
    ref = ort.InferenceSession(str(models["onnx"] / "model.onnx")).run(None, {"X": x})
    np.testing.assert_array_equal(out["label"], ref[0])
    np.testing.assert_allclose(out["probabilities"], ref[1])


def test_onnx_corrupt_file(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not a protobuf at all")
    with pytest.raises(ConfigError, match=r"cannot load model.onnx"):
        RuntimeRegistry().load(tmp_path)


def test_sklearn_signatures_and_predict(models: dict[str, Path]) -> None:
    s = RuntimeRegistry().load(models["sklearn"])
    assert set(s.signatures) == {"serving_default", "predict", "predict_proba", "classify"}
    assert s.signatures["serving_default"].inputs[0].shape == (-1, 4)
    assert s.signatures["classify"].feature_names == IRIS_FEATURES
    est = joblib.load(models["sklearn"] / "model.joblib")
    x = X[40:60]
    np.testing.assert_array_equal(s.predict("serving_default", {"inputs": x})["predictions"], est.predict(x))
    np.testing.assert_allclose(s.predict("classify", {"inputs": x})["probabilities"], est.predict_proba(x))


def test_sklearn_regressor(models: dict[str, Path]) -> None:
    s = RuntimeRegistry().load(models["regressor"])
    assert "classify" not in s.signatures
    assert s.signatures["regress"].method == REGRESS_METHOD
    assert s.signatures["regress"].inputs[0].shape == (-1, 10)
    x = np.zeros((3, 10))
    out = s.predict("regress", {"inputs": x})["predictions"]
    assert out.shape == (3,)
    np.testing.assert_allclose(out, joblib.load(models["regressor"] / "model.joblib").predict(x))


def test_sklearn_not_an_estimator(tmp_path: Path) -> None:
    joblib.dump({"a": 1}, tmp_path / "model.joblib")
    with pytest.raises(ConfigError, match="holds a dict, which has no predict"):
        RuntimeRegistry().load(tmp_path)


def test_sklearn_truncated_pickle(tmp_path: Path, models: dict[str, Path]) -> None:
    data = (models["sklearn"] / "model.joblib").read_bytes()
    (tmp_path / "model.joblib").write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError, match=r"cannot load model\.joblib"):
        RuntimeRegistry().load(tmp_path)


def test_handler_invoke_and_predict(models: dict[str, Path]) -> None:
    s = RuntimeRegistry().load(models["handler"])
    assert isinstance(s, HandlerServable)
    body, ctype = s.invoke(json.dumps({"features": X[:2].tolist()}).encode(), "application/json", "application/json")
    assert ctype == "application/json"
    doc = json.loads(body)
    assert doc["labels"] == ["setosa", "setosa"]
    est = joblib.load(models["handler"] / "model.joblib")
    np.testing.assert_allclose(doc["probabilities"], est.predict_proba(X[:2]).round(6))
    out = s.predict("serving_default", {"inputs": X[100:102]})
    np.testing.assert_allclose(out["predictions"], est.predict_proba(X[100:102]))


def _handler(tmp_path: Path, code: str) -> Path:
    (tmp_path / "code").mkdir(parents=True, exist_ok=True)
    (tmp_path / "code" / "inference.py").write_text(code)
    return tmp_path


def test_handler_defaults_and_context(tmp_path: Path) -> None:
    code = (
        "def model_fn(model_dir, context):\n"
        "    assert context.model_dir == model_dir\n"
        "    return 2.0\n"
        "def predict_fn(data, model):\n"
        "    return data * model\n"
    )
    s = RuntimeRegistry().load(_handler(tmp_path, code))
    assert isinstance(s, HandlerServable)
    body, ctype = s.invoke(b"[[1, 2], [3, 4]]", "application/json", "application/json")
    assert (json.loads(body), ctype) == ([[2.0, 4.0], [6.0, 8.0]], "application/json")
    body, ctype = s.invoke(b"1,2\n3,4\n", "text/csv", "text/csv")
    assert ctype == "text/csv" and body.decode().split() == ["2.0,4.0", "6.0,8.0"]
    with pytest.raises(ServekitError) as info:
        s.invoke(b"[1", "application/json", "application/json")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(ServekitError) as info:
        s.invoke(b"[1]", "application/json", "image/png")
    assert info.value.code is ErrorCode.NOT_ACCEPTABLE


def test_handler_transform_fn(tmp_path: Path) -> None:
    code = (
        "def model_fn(model_dir):\n    return 'm'\n"
        "def transform_fn(model, data, content_type, accept):\n"
        "    return data.upper(), 'text/plain'\n"
    )
    s = RuntimeRegistry().load(_handler(tmp_path, code))
    assert isinstance(s, HandlerServable)
    assert s.invoke(b"abc", "text/plain", "*/*") == (b"ABC", "text/plain")


def test_handler_transform_fn_with_pipeline_is_rejected(tmp_path: Path) -> None:
    code = "def model_fn(d):\n    return 1\ndef transform_fn(*a):\n    pass\ndef predict_fn(d, m):\n    pass\n"
    with pytest.raises(ConfigError, match="transform_fn together with predict_fn"):
        RuntimeRegistry().load(_handler(tmp_path, code))


def test_handler_model_fn_raising(tmp_path: Path) -> None:
    code = "def model_fn(d):\n    raise FileNotFoundError('weights.bin missing')\n"
    with pytest.raises(ConfigError, match=r"model_fn raised FileNotFoundError: weights\.bin missing"):
        RuntimeRegistry().load(_handler(tmp_path, code))


def test_handler_predict_raising_is_a_model_error(tmp_path: Path) -> None:
    code = "def model_fn(d):\n    return 1\ndef predict_fn(data, model):\n    raise KeyError('boom')\n"
    s = RuntimeRegistry().load(_handler(tmp_path, code))
    assert isinstance(s, HandlerServable)
    with pytest.raises(ServekitError) as info:
        s.invoke(b"[1]", "application/json", "application/json")
    assert info.value.code is ErrorCode.MODEL_ERROR
    assert info.value.message == "the model's predict_fn failed"  # what a client may see
    assert info.value.details["cause"] == "KeyError: 'boom'"  # what the server log gets


def test_handler_import_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="raised SyntaxError"):
        RuntimeRegistry().load(_handler(tmp_path, "def model_fn(:\n"))


def test_handler_does_not_touch_sys_path(tmp_path: Path) -> None:
    import sys

    before = list(sys.path)
    RuntimeRegistry().load(_handler(tmp_path, "def model_fn(d):\n    return 1\ndef predict_fn(x, m):\n    return x\n"))
    assert sys.path == before


def test_lightgbm_through_the_sklearn_api(tmp_path: Path) -> None:
    import lightgbm

    est = lightgbm.LGBMClassifier(n_estimators=20, verbose=-1, random_state=0).fit(X, load_iris(return_X_y=True)[1])
    joblib.dump(est, tmp_path / "model.joblib")
    s = RuntimeRegistry().load(tmp_path)
    assert s.platform == "sklearn"
    assert s.signatures["classify"].class_labels == ("0", "1", "2")
    assert s.signatures["serving_default"].inputs[0].shape == (-1, 4)
    x = X[::30]
    np.testing.assert_array_equal(s.predict("serving_default", {"inputs": x})["predictions"], est.predict(x))
    np.testing.assert_allclose(s.predict("classify", {"inputs": x})["probabilities"], est.predict_proba(x))
