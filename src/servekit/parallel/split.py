"""Cut an ONNX graph into pipeline stages of consecutive layers, balanced by weight bytes.

A cut may fall only where exactly one activation tensor crosses it (a *single-tensor boundary*): every tensor made
before the cut and read after it, graph inputs included, counts; initializers do not (each goes with the nodes that
read it). The stages are then extracted with ``onnx.utils.Extractor``, so each stage file holds only its own
initializers and a stage process never reads the others' weights.

Run as a one-shot process by the control plane (``python -m servekit.parallel.split MODEL DEGREE OUT_DIR``), which
caches the result by the model's hash, outside every instance's memory envelope: the only step that holds the whole
model. ``onnx`` is an extra
(``servekit[optimize]``); the cut-point choice (:func:`choose_cuts`) is pure and needs no onnx.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STAGES_FILE = "stages.json"  # the split's manifest: degree, cut tensors, weight bytes per stage
HANDLER = "from servekit.parallel.stage import model_fn  # noqa: F401  (a pipeline stage: servekit.parallel)\n"
MODEL_FILE = "model.onnx"
WEIGHTS_FILE = "model.onnx.data"


class SplitError(ValueError):
    """The model cannot be split as asked; the message says why (it becomes the endpoint's FailureReason)."""


@dataclass(frozen=True, slots=True)
class Boundary:
    """A place the graph may be cut: before node ``index``; ``tensor`` is the one activation that crosses."""

    index: int
    tensor: str


def choose_cuts(node_bytes: Sequence[int], boundaries: Sequence[int], degree: int) -> tuple[int, ...]:
    """The ``degree - 1`` cut indices (each from ``boundaries``: cut before that node) that minimise the largest
    stage's weight bytes (``node_bytes[i]``: the initializer bytes node ``i`` brings); ties go to the cuts that also
    balance the rest, by the sum of squared stage bytes. :class:`SplitError` when there are fewer boundaries than
    cuts (more stages than layers)."""
    if degree < 1:
        raise SplitError(f"a pipeline degree must be at least 1, got {degree}")
    cands = sorted({b for b in boundaries if 0 < b < len(node_bytes)})
    if len(cands) < degree - 1:
        raise SplitError(
            f"the model has {len(cands) + 1} layer(s) between single-tensor boundaries; "
            f"OPTION_PIPELINE_PARALLEL_DEGREE={degree} needs at least {degree}"
        )
    prefix = [0]
    for b in node_bytes:
        prefix.append(prefix[-1] + b)
    points = [0, *cands, len(node_bytes)]  # stage k spans points[i]..points[j]
    n = len(points)
    # best[k][j]: (largest stage, sum of squares) of k stages covering nodes points[0]..points[j]
    inf = (float("inf"), float("inf"))
    best: list[list[tuple[float, float]]] = [[inf] * n for _ in range(degree + 1)]
    back: list[list[int]] = [[-1] * n for _ in range(degree + 1)]
    best[0][0] = (0.0, 0.0)
    for k in range(1, degree + 1):
        for j in range(1, n):
            for i in range(j):
                prev = best[k - 1][i]
                if prev == inf:
                    continue
                size = prefix[points[j]] - prefix[points[i]]
                cost = (max(prev[0], size), prev[1] + float(size) ** 2)
                if cost < best[k][j]:
                    best[k][j], back[k][j] = cost, i
    cuts: list[int] = []
    j = n - 1
    for k in range(degree, 0, -1):
        i = back[k][j]
        if i > 0:
            cuts.append(points[i])
        j = i
    return tuple(sorted(cuts))


def stage_bytes(node_bytes: Sequence[int], cuts: Sequence[int]) -> list[int]:
    """Weight bytes of each stage the ``cuts`` make."""
    edges = [0, *cuts, len(node_bytes)]
    return [sum(node_bytes[a:b]) for a, b in itertools.pairwise(edges)]


# ---- over an ONNX graph (needs the onnx package) -------------------------------------------------------------


def _tensor_bytes(t: Any) -> int:
    from onnx import numpy_helper

    return int(numpy_helper.to_array(t).nbytes) if not t.raw_data else len(t.raw_data)


def graph_layers(model: Any) -> tuple[list[int], list[Boundary]]:
    """Per node, the initializer bytes it is the first to read; and every single-tensor boundary of the graph."""
    graph = model.graph
    inits = {t.name: _tensor_bytes(t) for t in graph.initializer}
    seen: set[str] = set()
    node_bytes: list[int] = []
    for node in graph.node:
        own = [n for n in node.input if n in inits and n not in seen]
        seen.update(own)
        node_bytes.append(sum(inits[n] for n in own))
    # last_use[t]: the last node reading tensor t (graph outputs are read "after" the last node)
    end = len(graph.node)
    last_use: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in inits:
                last_use[name] = i
    for out in graph.output:
        last_use[out.name] = end
    born: dict[str, int] = {i.name: -1 for i in graph.input if i.name not in inits}
    for i, node in enumerate(graph.node):
        for name in node.output:
            born[name] = i
    boundaries: list[Boundary] = []
    for cut in range(1, end):
        crossing = [t for t, b in born.items() if b < cut and last_use.get(t, -1) >= cut]
        if len(crossing) == 1:
            boundaries.append(Boundary(cut, crossing[0]))
    return node_bytes, boundaries


@dataclass(frozen=True, slots=True)
class StagePlan:
    degree: int
    tensors: tuple[str, ...]  # the activation crossing each cut, in order
    bytes: tuple[int, ...]  # weight bytes of each stage


def plan_stages(model: Any, degree: int) -> StagePlan:
    node_bytes, boundaries = graph_layers(model)
    by_index = {b.index: b.tensor for b in boundaries}
    cuts = choose_cuts(node_bytes, list(by_index), degree)
    return StagePlan(degree, tuple(by_index[c] for c in cuts), tuple(stage_bytes(node_bytes, cuts)))


def split_model(model_path: str | os.PathLike[str], degree: int, out_dir: str | os.PathLike[str]) -> StagePlan:
    """Write ``out_dir/stage-<k>/1/{model.onnx, code/inference.py}`` for each stage and ``out_dir/stages.json``."""
    import onnx
    from onnx.utils import Extractor

    model = onnx.load(str(model_path))
    if len(model.graph.output) != 1 or len([i for i in model.graph.input if i.name not in _init_names(model)]) != 1:
        raise SplitError("pipeline parallelism splits ONNX models of one input and one output")
    plan = plan_stages(model, degree)
    # the stage boundaries need their types and shapes: the cut tensors become stage inputs and outputs
    extractor = Extractor(onnx.shape_inference.infer_shapes(model))
    inputs = [i.name for i in model.graph.input if i.name not in _init_names(model)]
    edges = [inputs, *([t] for t in plan.tensors), [model.graph.output[0].name]]
    out = Path(out_dir)
    for k in range(degree):
        stage = extractor.extract_model(edges[k], edges[k + 1])
        version = out / f"stage-{k}" / "1"
        (version / "code").mkdir(parents=True, exist_ok=True)
        # weights beside the graph: onnxruntime maps the file instead of holding a parsed copy and a tensor copy
        onnx.save(stage, str(version / MODEL_FILE), save_as_external_data=True, location=WEIGHTS_FILE)
        (version / "code" / "inference.py").write_text(HANDLER)
    manifest = {"degree": degree, "tensors": list(plan.tensors), "bytes": list(plan.bytes)}
    (out / STAGES_FILE).write_text(json.dumps(manifest))
    return plan


def _init_names(model: Any) -> set[str]:
    return {t.name for t in model.graph.initializer}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        sys.stderr.write("usage: python -m servekit.parallel.split MODEL.onnx DEGREE OUT_DIR\n")
        return 2
    try:
        split_model(args[0], int(args[1]), args[2])
    except SplitError as exc:
        sys.stderr.write(f"{exc}\n")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
