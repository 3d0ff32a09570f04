"""Small models built in the test (no downloads): a scikit-learn MLP, an ONNX MLP made with onnx.helper, and
their validation rows as JSON Lines."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def write_rows(path: Path, rows: Any) -> Path:
    path.write_text("".join(json.dumps([float(v) for v in row]) + "\n" for row in rows))
    return path


def write_labels(path: Path, labels: Any) -> Path:
    path.write_text("".join(json.dumps(v.item() if hasattr(v, "item") else v) + "\n" for v in labels))
    return path


def sklearn_mlp(version_dir: Path, seed: int = 0) -> tuple[Any, Any, Any]:
    """An MLPClassifier on a synthetic 3-class problem, saved with joblib; returns (model, x, y)."""
    import joblib
    from sklearn.datasets import make_classification
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    x, y = make_classification(400, 12, n_informative=8, n_classes=3, random_state=seed)
    with warnings.catch_warnings():  # a few hundred iterations is plenty for the test; sklearn warns anyway
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MLPClassifier((32,), max_iter=300, random_state=seed).fit(x, y)
    version_dir.mkdir(parents=True)
    joblib.dump(model, version_dir / "model.joblib")
    (version_dir / "servekit.toml").write_text('class_labels = ["a", "b", "c"]\n')
    return model, x, y


def onnx_mlp(version_dir: Path, n_in: int = 16, hidden: int = 64, n_out: int = 4, seed: int = 0) -> Path:
    """A float32 two-layer MLP (MatMul, Add, Relu, MatMul, Add) with random weights; output ``logits``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = {
        "w1": rng.standard_normal((n_in, hidden)) / np.sqrt(n_in),
        "b1": rng.standard_normal(hidden) * 0.1,
        "w2": rng.standard_normal((hidden, n_out)) / np.sqrt(hidden),
        "b2": rng.standard_normal(n_out) * 0.1,
    }
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["o0"]),
        helper.make_node("Add", ["o0", "b2"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, n_in])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, n_out])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    version_dir.mkdir(parents=True)
    onnx.save(model, str(version_dir / "model.onnx"))
    return version_dir / "model.onnx"


def run_onnx(path: Path, inputs: dict[str, Any]) -> list[Any]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return list(session.run(None, inputs))


class Builders:
    """The helpers above, handed to tests as a fixture (test modules here are not a package to import from)."""

    write_rows = staticmethod(write_rows)
    write_labels = staticmethod(write_labels)
    sklearn_mlp = staticmethod(sklearn_mlp)
    onnx_mlp = staticmethod(onnx_mlp)
    run_onnx = staticmethod(run_onnx)


@pytest.fixture
def build() -> type[Builders]:
    return Builders
