"""Cutting an ONNX graph into pipeline stages (servekit.parallel.split) and a stage's micro-batches
(servekit.parallel.stage): cut points balanced by weight bytes, only where one activation crosses, refused when
there are more stages than layers; the stage graphs, run one after another in onnxruntime, answer as the whole
graph does; micro-batches split and join back in order."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servekit.parallel.split import SplitError, choose_cuts, stage_bytes
from servekit.parallel.stage import Stage, join_rows, micro_batches_from, split_rows

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def mlp(dims: list[int], seed: int = 3, residual: bool = False) -> Any:
    """An MLP of MatMul/Add/Relu layers; ``residual`` adds the first hidden layer's output to the last one's (a skip
    connection: no single-tensor boundary between them)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(rng.random(b, np.float32), f"b{i}")]
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"h{i}"]),
        ]
        x = f"h{i}"
    if residual:
        nodes.append(helper.make_node("Add", [x, "h0"], ["out"]))
        x = "out"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dims[0]])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", dims[-1]])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run_chain(paths: list[Path], x: np.ndarray) -> np.ndarray:
    for p in paths:
        s = ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
        x = s.run(None, {s.get_inputs()[0].name: x})[0]
    return x


def test_cuts_balance_the_weight_bytes() -> None:
    weights = [10, 0, 0, 80, 0, 0, 10, 0, 0, 100, 0, 0]
    every = list(range(1, len(weights)))
    two = choose_cuts(weights, every, 2)
    assert stage_bytes(weights, two) == [100, 100] and 7 <= two[0] <= 9  # anywhere between the last two weights
    three = choose_cuts(weights, every, 3)
    assert max(stage_bytes(weights, three)) == 100 and len(three) == 2
    # only the boundaries given may be cut: with just 1 and 6 allowed, the best 2-way split is 90 | 110
    assert choose_cuts(weights, [1, 6], 2) == (6,)
    assert choose_cuts(weights, every, 1) == ()


def test_more_stages_than_layers_is_refused() -> None:
    with pytest.raises(SplitError, match=r"3 layer.*DEGREE=4 needs at least 4"):
        choose_cuts([1, 1, 1, 1], [1, 3], 4)
    with pytest.raises(SplitError, match="at least 1"):
        choose_cuts([1], [], 0)


def test_boundaries_are_where_one_activation_crosses() -> None:
    from servekit.parallel.split import graph_layers

    node_bytes, plain = graph_layers(mlp([4, 8, 8, 2]))
    assert node_bytes[0] == 4 * 8 * 4 and node_bytes[1] == 8 * 4 and node_bytes[2] == 0
    assert [b.index for b in plain] == list(range(1, 9)) and plain[2].tensor == "h0"
    _, skip = graph_layers(mlp([4, 8, 8, 8], residual=True))
    # h0 is read again by the final Add: right after h0 is made it is the one tensor crossing; after that both h0
    # and the next layer's activation cross, so the layers inside the skip cannot be cut
    assert [b.index for b in skip] == [1, 2, 3] and skip[2].tensor == "h0"


def test_stages_compose_to_the_whole_models_answers(tmp_path: Path) -> None:
    from servekit.parallel.split import split_model

    model = mlp([16, 64, 64, 32, 4])
    whole = tmp_path / "whole.onnx"
    onnx.save(model, str(whole))
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    expected = run_chain([whole], x)
    for degree in (2, 3, 4):
        out = tmp_path / f"d{degree}"
        plan = split_model(whole, degree, out)
        paths = [out / f"stage-{k}" / "1" / "model.onnx" for k in range(degree)]
        np.testing.assert_allclose(run_chain(paths, x), expected, rtol=1e-5, atol=1e-6)
        manifest = json.loads((out / "stages.json").read_text())
        assert manifest["bytes"] == list(plan.bytes)
        assert sum(plan.bytes) == sum(int(np.prod(t.dims)) * 4 for t in model.graph.initializer)
        # each stage file holds only its own weights: together they hold each weight once
        owned = [{t.name for t in onnx.load(str(p)).graph.initializer} for p in paths]
        assert sum(len(o) for o in owned) == len(set().union(*owned)) == len(model.graph.initializer)
        assert all(owned) and all(b > 0 for b in plan.bytes)
        assert all((p.parent / "code" / "inference.py").read_text().startswith("from servekit.parallel") for p in paths)
    with pytest.raises(SplitError):
        split_model(whole, 20, tmp_path / "too-many")


def test_micro_batches_split_and_join_in_order() -> None:
    batch = np.arange(20, dtype=np.float32).reshape(10, 2)
    parts = split_rows(batch, 4)
    assert [len(p) for p in parts] == [3, 3, 3, 1]
    np.testing.assert_array_equal(join_rows(parts), batch)
    assert [len(p) for p in split_rows(batch[:2], 4)] == [1, 1]
    assert len(split_rows(batch, 1)) == 1 and len(split_rows(batch[:1], 8)) == 1
    assert micro_batches_from({"OPTION_PIPELINE_PARALLEL_DEGREE": "3"}) == 1  # off unless asked for
    assert micro_batches_from({"OPTION_PIPELINE_MICRO_BATCHES": "8", "OPTION_PIPELINE_PARALLEL_DEGREE": "3"}) == 8
    assert micro_batches_from({"OPTION_PIPELINE_MICRO_BATCHES": "x"}) == 1


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_stage_zero_drives_micro_batches_through_the_later_stages_and_counts_its_compute() -> None:
    clock = ManualClock()
    seen: list[int] = []

    def own(x: np.ndarray) -> np.ndarray:
        clock.now += 0.5  # each micro-batch takes half a second of this stage's compute
        return x * 2

    def later(x: np.ndarray) -> np.ndarray:
        seen.append(len(x))
        return x + 1

    stage = Stage(own, [later], micro_batches=3, clock=clock)
    batch = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.testing.assert_array_equal(stage.predict(batch), batch * 2 + 1)
    assert sorted(seen) == [2, 2, 2] and stage.batches == 3 and stage.compute_s == pytest.approx(1.5)
    clock.now = 4.0
    assert stage.stats() == {"compute_s": 1.5, "wall_s": 4.0, "batches": 3}
    last = Stage(lambda x: x - 1, clock=clock)  # a later stage runs the whole request it gets
    np.testing.assert_array_equal(last.predict([[1.0, 2.0]]), np.array([[0.0, 1.0]], dtype=np.float32))
