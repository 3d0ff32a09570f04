"""ONNX models that tests and benchmarks build in place (nothing is downloaded): a deep MLP of square layers, the
shape model parallelism cuts into stages. Needs the ``onnx`` package (the demo/optimize extras, the test install)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np


def write_deep_mlp(path: Path, width: int, layers: int, outputs: int = 16, seed: int = 29) -> int:
    """Write an MLP of ``layers`` ``width`` x ``width`` MatMul/Add/Relu blocks then a ``width`` x ``outputs`` one
    (float32 weights from ``seed``; input ``x``, batch dimension ``N``) to ``path``; returns the file's bytes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    dims = [width] * (layers + 1) + [outputs]
    nodes: list[Any] = []
    inits: list[Any] = []
    x = "x"
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.full(b, 0.01, np.float32), f"b{i}")]
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"h{i}"]),
        ]
        x = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", outputs])],
        inits,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path.stat().st_size
