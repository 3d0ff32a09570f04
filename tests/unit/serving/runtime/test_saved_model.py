"""The TensorFlow SavedModel runtime (``make test-extras``) against SavedModels built here: signatures from the
SignatureDef map, outputs equal to TensorFlow's own in-process result, and TF Serving warmup records written with
the real ``tensorflow-serving-api`` messages. ``servekit inspect`` against ``saved_model_cli show --all`` (a child
process) is tests/integration/runtime/test_saved_model_cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

tf = pytest.importorskip("tensorflow")

from tests.extras_models import CLASSES, example, tf1_half_plus_three, tf1_saved_model, tf2_saved_model  # noqa: E402

from servekit.errors import ConfigError, ErrorCode, ServekitError  # noqa: E402
from servekit.serving.runtime.base import concurrency_of  # noqa: E402
from servekit.serving.runtime.registry import RuntimeRegistry  # noqa: E402
from servekit.serving.runtime.saved_model_warmup import MAX_RECORDS, WARMUP_FILE, decode_record  # noqa: E402
from servekit.types import CLASSIFY_METHOD, PREDICT_METHOD, REGRESS_METHOD  # noqa: E402

pytestmark = pytest.mark.extras


@pytest.fixture(scope="module")
def tf1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tf1_saved_model(tmp_path_factory.mktemp("tf1") / "1")


@pytest.fixture(scope="module")
def tf2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tf2_saved_model(tmp_path_factory.mktemp("tf2") / "1")


def _reference(path: Path, signature: str, **inputs: Any) -> dict[str, np.ndarray]:
    """TensorFlow's own answer: the signature of the SavedModel loaded in this process, called directly."""
    fn = tf.saved_model.load(str(path)).signatures[signature]
    return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in inputs.items()}).items()}


def test_signatures_come_from_the_signature_defs(tf1: Path, tf2: Path) -> None:
    s = RuntimeRegistry().load(tf1)
    assert s.platform == "tensorflow"
    assert set(s.signatures) == {"classify", "regress", "serving_default"}
    predict = s.signatures["serving_default"]
    assert [(t.name, t.datatype, t.shape) for t in predict.inputs] == [("bias", "FP32", (-1,)), ("x", "FP32", (-1, 2))]
    assert [(t.name, t.datatype, t.shape) for t in predict.outputs] == [
        ("label", "INT64", (-1,)),
        ("y", "FP32", (-1, 2)),
    ]
    assert predict.method == PREDICT_METHOD
    classify = s.signatures["classify"]
    assert classify.method == CLASSIFY_METHOD
    assert [(t.name, t.datatype) for t in classify.inputs] == [("inputs", "BYTES")]
    assert [t.name for t in classify.outputs] == ["scores", "classes"]  # scores first: what the encoders read
    assert classify.feature_names == ("a", "b")  # read from the graph's ParseExample op
    assert classify.class_labels == CLASSES  # from the model's classes output
    assert s.signatures["regress"].method == REGRESS_METHOD
    s2 = RuntimeRegistry().load(tf2)
    assert set(s2.signatures) == {"serving_default", "lengths"}  # __saved_model_init_op is not servable
    assert [(t.name, t.datatype) for t in s2.signatures["lengths"].inputs] == [("text", "BYTES")]
    assert concurrency_of(s2).releases_gil and concurrency_of(s2).threads >= 1


def test_predict_equals_tensorflow(tf1: Path, tf2: Path) -> None:
    x = np.array([[1.0, 2.0], [-0.5, 3.0], [0.0, 0.25]], dtype=np.float32)
    bias = np.array([0.5, -2.0, 1.0], dtype=np.float32)
    got = RuntimeRegistry().load(tf1).predict("serving_default", {"x": x, "bias": bias})
    ref = _reference(tf1, "serving_default", x=x, bias=bias)
    assert_allclose(got["y"], ref["y"])
    assert_array_equal(got["label"], ref["label"])
    text = np.array([b"ab", b"servekit"], dtype=object)
    got2 = RuntimeRegistry().load(tf2).predict("lengths", {"text": text})
    ref2 = _reference(tf2, "lengths", text=text)
    assert_array_equal(got2["length"], ref2["length"])
    assert got2["upper"].tolist() == ref2["upper"].tolist()


def test_classify_and_regress_rows_become_examples(tf1: Path) -> None:
    s = RuntimeRegistry().load(tf1)
    rows = [(1.0, 2), (0.5, -3), (-1.5, 7)]
    serialized = [example(a, b).SerializeToString() for a, b in rows]
    ref = _reference(tf1, "classify", inputs=np.array(serialized, dtype=object))
    got = s.predict("classify", {"inputs": np.array(rows, dtype=np.float64)})
    assert_allclose(got["scores"], ref["scores"])
    assert list(got) == ["scores", "classes"]
    # serialized examples (gRPC Predict on the signature, warmup) go in as they are
    got_serialized = s.predict("classify", {"inputs": np.array(serialized, dtype=object)})
    assert_allclose(got_serialized["scores"], ref["scores"])
    reg_ref = _reference(tf1, "regress", inputs=np.array(serialized, dtype=object))
    assert_allclose(s.predict("regress", {"inputs": np.array(rows, dtype=np.float64)})["outputs"], reg_ref["outputs"])
    with pytest.raises(ServekitError) as info:
        s.predict("classify", {"inputs": np.array([[0.5, 1.5]])})  # b is an int64 feature
    assert info.value.code is ErrorCode.INVALID_ARGUMENT and "feature 'b' takes int64 values" in info.value.message


# ---- TF Serving warmup records -----------------------------------------------------------------------------


def _log_module() -> Any:
    return pytest.importorskip("tensorflow_serving.apis.prediction_log_pb2")


def _predict_log(inputs: dict[str, np.ndarray], signature: str = "") -> Any:
    pl = _log_module().PredictionLog()
    req = pl.predict_log.request
    req.model_spec.name = "m"
    req.model_spec.signature_name = signature
    for k, v in inputs.items():
        req.inputs[k].CopyFrom(tf.make_tensor_proto(v))
    return pl


def _classify_log(rows: list[tuple[float, int]], context_b: int) -> Any:
    pl = _log_module().PredictionLog()
    ctx = pl.classify_log.request.input.example_list_with_context
    ctx.context.features.feature["b"].int64_list.value.append(context_b)
    for a, _ in rows:
        ex = ctx.examples.add()
        ex.features.feature["a"].float_list.value.append(a)
    pl.classify_log.request.model_spec.signature_name = "classify"
    return pl


def _write(path: Path, logs: list[Any]) -> None:
    (path / WARMUP_FILE).parent.mkdir(exist_ok=True)
    with tf.io.TFRecordWriter(str(path / WARMUP_FILE)) as writer:
        for log in logs:
            writer.write(log.SerializeToString())


def test_prediction_logs_decode_as_tf_serving_writes_them() -> None:
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    (req,) = decode_record(
        _predict_log({"x": x, "bias": np.zeros(1, np.float32)}, "serving_default").SerializeToString()
    )
    assert (req.kind, req.signature) == ("predict", "serving_default")
    assert_array_equal(req.tensors["x"], x)
    (cls,) = decode_record(_classify_log([(1.5, 0), (2.5, 0)], context_b=4).SerializeToString())
    assert (cls.kind, cls.signature) == ("classify", "classify")
    merged = [tf.train.Example.FromString(e) for e in cls.examples]
    assert [
        (e.features.feature["a"].float_list.value[0], e.features.feature["b"].int64_list.value[0]) for e in merged
    ] == [
        (1.5, 4),
        (2.5, 4),
    ]
    multi = _log_module().PredictionLog()
    multi.multi_inference_log.request.input.example_list.examples.add().CopyFrom(example(1.0, 2))
    for name in ("classify", "regress"):
        multi.multi_inference_log.request.tasks.add().model_spec.signature_name = name
    assert [(r.kind, r.signature, len(r.examples)) for r in decode_record(multi.SerializeToString())] == [
        ("task", "classify", 1),
        ("task", "regress", 1),
    ]
    session_run = _log_module().PredictionLog()
    session_run.session_run_log.request.model_spec.name = "m"
    with pytest.raises(ConfigError, match="SessionRun logs are not supported"):
        decode_record(session_run.SerializeToString())


def test_warmup_records_are_replayed_and_a_failing_one_fails_the_load(tmp_path: Path, tf1: Path) -> None:
    import shutil

    version = tmp_path / "1"
    shutil.copytree(tf1, version)
    x, bias = np.ones((2, 2), np.float32), np.zeros(2, np.float32)
    regress = _log_module().PredictionLog()
    regress.regress_log.request.input.example_list.examples.add().CopyFrom(example(0.5, 1))
    _write(version, [_predict_log({"x": x, "bias": bias}), _classify_log([(1.0, 0)], 2), regress])
    s = RuntimeRegistry().load(version)  # replays the three records; a failure would raise
    assert "classify" in s.signatures
    _write(version, [_predict_log({"x": x, "bias": bias}), _predict_log({"wrong": x})])
    with pytest.raises(ConfigError, match=r"warmup record 2 of .*tf_serving_warmup_requests: inputs \['wrong'\]"):
        RuntimeRegistry().load(version)
    # the model itself failing (bias has 3 rows, x 2) fails the load too
    _write(version, [_predict_log({"x": x, "bias": np.zeros(3, np.float32)})])
    with pytest.raises(ConfigError, match=r"warmup record 1 of .* failed: InvalidArgumentError"):
        RuntimeRegistry().load(version)
    _write(version, [_predict_log({"x": x, "bias": bias})] * (MAX_RECORDS + 1))
    with pytest.raises(ConfigError, match=r"Number of warmup records exceeds the maximum \(1000\)"):
        RuntimeRegistry().load(version)


def test_a_tf1_model_runs_in_a_session_fed_as_tf_serving_feeds_it(tmp_path: Path) -> None:
    """The SageMaker SDK's TF Serving test model (issue 45): TensorFlow 2's loader refuses it; servekit runs it in
    a session as TF Serving does, feeding ``x`` (a ``[None, 1]`` tensor) the shape the request holds."""
    path = tf1_half_plus_three(tmp_path / "1")
    with pytest.raises(ValueError, match="rank"):
        tf.saved_model.load(str(path))
    s = RuntimeRegistry().load(path)
    out = s.predict("serving_default", {"x": np.array([1.0, 2.0, 5.0])})
    assert_allclose(out["y"], [3.5, 4.0, 5.5])
    assert out["y"].shape == (3,)
    regress = s.predict("tensorflow/serving/regress", {"inputs": np.array([[2.0], [4.0]])})  # rows become examples
    assert_allclose(regress["outputs"], [[4.0], [5.0]])
    s.unload()
