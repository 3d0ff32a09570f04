"""The benchmark models, built deterministically: ``tiny``, ``mlp`` and ``heavy``.

- tiny: logistic regression on 4 features (scikit-learn, converted with skl2onnx).
- mlp: 64 -> 512 x 3 (ReLU) -> 10, random weights from a fixed seed.
- heavy: a compute-bound MLP (512 -> 1536 x 3 -> 10) where one row costs >= 0.5 ms in process here.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _mlp(path: Path, widths: list[int], seed: int) -> Path:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev = "x"
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        bias = (rng.standard_normal(b) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(bias, f"b{i}")]
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"h{i}"]))
        last = i == len(widths) - 2
        if not last:
            nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"]))
            prev = f"r{i}"
        else:
            nodes.append(helper.make_node("Identity", [f"h{i}"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", widths[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", widths[-1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path / "model.onnx"))
    return path


def tiny(path: Path) -> Path:
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 1.5]) > 0).astype(int)
    model = LogisticRegression().fit(x, y)
    onx = to_onnx(model, x[:1], options={id(model): {"zipmap": False}}, target_opset={"": OPSET, "ai.onnx.ml": 3})
    path.mkdir(parents=True, exist_ok=True)
    (path / "model.onnx").write_bytes(onx.SerializeToString())
    return path


def mlp(path: Path) -> Path:
    return _mlp(path, [64, 512, 512, 512, 10], seed=1)


def heavy(path: Path) -> Path:
    return _mlp(path, [512, 1536, 1536, 1536, 10], seed=2)


BUILDERS = {"tiny": tiny, "mlp": mlp, "heavy": heavy}
INPUT_WIDTH = {"tiny": 4, "mlp": 64, "heavy": 512}
INPUT_NAME = {"tiny": "X", "mlp": "x", "heavy": "x"}


def build_all(base: Path) -> dict[str, Path]:
    """``<base>/<name>/1/model.onnx`` for every benchmark model; returns the model base paths."""
    out = {}
    for name, build in BUILDERS.items():
        build(base / name / "1")
        out[name] = base / name
    return out
