"""servekit.tools.optimize on small models built here: int8 quantization of an MLP and the agreement it reports, graph
optimization that keeps outputs, sklearn conversion that keeps the wire contract, the refusal path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servekit.errors import ConfigError
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.tools.optimize.onnx_passes import quantized_ops
from servekit.tools.optimize.run import REPORT_NAME, OptimizeOptions, optimize

FAST = {"batch_sizes": (1, 8), "rounds": 2}  # timing is the benchmark's job; here only that it is measured


def test_dynamic_int8_quantizes_a_sklearn_mlp_and_reports_agreement(tmp_path: Path, build: Any) -> None:
    model, x, y = build.sklearn_mlp(tmp_path / "mlp" / "1")
    rows = build.write_rows(tmp_path / "val.jsonl", x)
    labels = build.write_labels(tmp_path / "labels.jsonl", y)
    base = tmp_path / "mlp"

    outcome = optimize(
        OptimizeOptions(model=base, out=base, quantize="int8", validation=rows, labels=labels, **FAST)  # type: ignore[arg-type]
    )

    assert outcome.accepted and outcome.version_dir == base / "2"
    new_file = base / "2" / "model.onnx"
    assert quantized_ops(new_file) > 0, "the MLP's MatMuls were quantized"
    q = outcome.quality
    assert q.task == "classification" and q.rows == len(x)
    # Accuracy before is sklearn's own score; agreement is recomputed here from the written graph.
    assert q.accuracy_before == pytest.approx(model.score(x, y))
    (pred, probs) = build.run_onnx(new_file, {"inputs": x})
    assert q.agreement == pytest.approx(float(np.mean(probs.argmax(axis=1) == model.predict(x))))
    assert q.accuracy_after == pytest.approx(float(np.mean(pred == y)))
    assert q.agreement > 0.9
    assert 0 < q.output_diff["probabilities"]["max_abs"] < 0.2  # int8 changes the numbers, a little
    assert outcome.size_after < outcome.size_before
    assert [lat.batch_size for lat in outcome.latency] == [1, 8]
    assert all(lat.before_p50_ms > 0 and lat.after_p50_ms > 0 for lat in outcome.latency)
    report = json.loads((base / "2" / REPORT_NAME).read_text())
    assert report["accepted"] is True and report["validation"]["agreement"] == q.agreement


def test_the_converted_model_keeps_the_sklearn_runtimes_signatures_and_tensors(tmp_path: Path, build: Any) -> None:
    model, x, _ = build.sklearn_mlp(tmp_path / "m" / "1")
    optimize(OptimizeOptions(model=tmp_path / "m", out=tmp_path / "m", **FAST))  # type: ignore[arg-type]
    registry = RuntimeRegistry()
    old, new = registry.load(tmp_path / "m" / "1"), registry.load(tmp_path / "m" / "2")
    assert (old.platform, new.platform) == ("sklearn", "onnxruntime_onnx")
    for name, sig in old.signatures.items():
        mine = new.signatures[name]
        assert (mine.inputs, mine.outputs, mine.method) == (sig.inputs, sig.outputs, sig.method), name
        assert (mine.class_labels, mine.feature_names) == (sig.class_labels, sig.feature_names), name
    assert new.signatures["classify"].class_labels == ("a", "b", "c")
    out = new.predict("serving_default", {"inputs": x[:20]})
    assert out["predictions"].dtype == np.int64
    assert np.array_equal(out["predictions"], model.predict(x[:20]))
    probs = new.predict("classify", {"inputs": x[:20]})["probabilities"]
    assert probs.dtype == np.float64 and np.allclose(probs, model.predict_proba(x[:20]), atol=1e-5)


def test_a_regressor_is_compared_by_mae_and_keeps_its_1d_output(tmp_path: Path, build: Any) -> None:
    import joblib
    from sklearn.datasets import make_regression
    from sklearn.linear_model import Ridge

    x, y = make_regression(200, 5, noise=5.0, random_state=0)
    model = Ridge().fit(x, y)
    (tmp_path / "r" / "1").mkdir(parents=True)
    joblib.dump(model, tmp_path / "r" / "1" / "model.joblib")
    rows, labels = build.write_rows(tmp_path / "v.jsonl", x), build.write_labels(tmp_path / "l.jsonl", y)
    outcome = optimize(
        OptimizeOptions(model=tmp_path / "r" / "1", out=tmp_path / "opt", validation=rows, labels=labels, **FAST)  # type: ignore[arg-type]
    )
    assert outcome.version_dir == tmp_path / "opt" / "1"  # a new base starts at version 1
    q = outcome.quality
    assert q.task == "regression"
    assert q.mae_before == pytest.approx(float(np.mean(np.abs(model.predict(x) - y))))
    assert q.mae_after == pytest.approx(q.mae_before, rel=1e-4)  # float32 inside: close, not equal
    new = RuntimeRegistry().load(tmp_path / "opt" / "1")
    assert new.predict("regress", {"inputs": x[:3]})["predictions"].shape == (3,)


def test_graph_optimization_of_an_onnx_model_keeps_its_outputs(tmp_path: Path, build: Any) -> None:
    original = build.onnx_mlp(tmp_path / "m" / "1")
    outcome = optimize(OptimizeOptions(model=tmp_path / "m" / "1", out=tmp_path / "m", **FAST))  # type: ignore[arg-type]
    assert outcome.version_dir == tmp_path / "m" / "2"
    new = tmp_path / "m" / "2" / "model.onnx"
    assert quantized_ops(new) == 0
    x = np.random.default_rng(3).standard_normal((50, 16)).astype(np.float32)
    (want,), (got,) = build.run_onnx(original, {"x": x}), build.run_onnx(new, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert outcome.quality.output_diff["logits"]["max_abs"] < 1e-4
    assert outcome.quality.agreement == 1.0


def test_static_int8_calibrates_on_the_given_rows(tmp_path: Path, build: Any) -> None:
    build.onnx_mlp(tmp_path / "m" / "1")
    x = np.random.default_rng(4).standard_normal((64, 16))
    calib = build.write_rows(tmp_path / "calib.jsonl", x)
    outcome = optimize(
        OptimizeOptions(
            model=tmp_path / "m",
            out=tmp_path / "m",
            quantize="int8",
            static=True,
            calibration=calib,
            max_accuracy_drop=0.2,  # random weights and activations: what matters here is that it ran and measured
            **FAST,  # type: ignore[arg-type]
        )
    )
    assert any("static (QDQ, calibrated on 64 rows)" in step for step in outcome.steps)
    assert quantized_ops(tmp_path / "m" / "2" / "model.onnx") > 0
    assert outcome.quality.agreement is not None and outcome.quality.agreement > 0.8


def test_a_drop_over_the_bound_is_refused_and_nothing_is_written(tmp_path: Path, build: Any) -> None:
    # A regression output without labels: the bound applies to the relative difference, which int8 weights
    # (random, so off the int8 grid) cannot make zero.
    build.onnx_mlp(tmp_path / "m" / "1", n_out=1)
    opts = OptimizeOptions(model=tmp_path / "m", out=tmp_path / "m", quantize="int8", max_accuracy_drop=0.0, **FAST)  # type: ignore[arg-type]
    refused = optimize(opts)
    assert not refused.accepted and refused.version_dir is None
    assert refused.quality.task == "regression" and refused.quality.drop > 0
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["1"]  # no version, no staging left behind

    import dataclasses

    forced = optimize(dataclasses.replace(opts, force=True))
    assert forced.accepted and forced.forced and forced.version_dir == tmp_path / "m" / "2"
    assert forced.quality.drop == pytest.approx(refused.quality.drop)


def test_refused_into_a_new_out_leaves_no_directory(tmp_path: Path, build: Any) -> None:
    build.onnx_mlp(tmp_path / "m" / "1", n_out=1)
    out = tmp_path / "new" / "base"
    optimize(OptimizeOptions(model=tmp_path / "m", out=out, quantize="int8", max_accuracy_drop=0.0, **FAST))  # type: ignore[arg-type]
    assert not out.exists()


def test_an_inference_py_model_is_refused_by_name(tmp_path: Path) -> None:
    from servekit.tools.demo.build import iris_handler

    iris_handler(tmp_path / "h" / "1")
    with pytest.raises(ConfigError, match=r"inference\.py handler"):
        optimize(OptimizeOptions(model=tmp_path / "h", out=tmp_path / "o"))
    assert not (tmp_path / "o").exists()
