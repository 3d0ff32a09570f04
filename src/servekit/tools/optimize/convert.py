"""scikit-learn (joblib) estimators to ONNX with skl2onnx, keeping the wire contract of the sklearn runtime.

The graph is converted in float32 (the precision int8 quantization and onnxruntime's fast kernels work in) and
wrapped so that clients see no change: the input is still ``inputs`` FP64, and each output the sklearn runtime
names (``predictions``, ``probabilities``) comes out under that name, dtype and shape. The sklearn runtime's
signatures themselves go into the new version's ``servekit.toml`` (see :mod:`servekit.tools.optimize.manifest`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servekit.errors import ConfigError
from servekit.serving.runtime.sklearn import INPUT
from servekit.types import Signature, TensorSpec

_INNER_INPUT = "servekit_inputs_fp32"
_OPSETS = {"": 17, "ai.onnx.ml": 3}


def _skl2onnx() -> Any:
    try:
        import skl2onnx
    except ImportError:
        raise ConfigError(
            "converting a scikit-learn model to ONNX needs skl2onnx: pip install 'servekit[optimize]'"
        ) from None
    return skl2onnx


def _wanted_outputs(signatures: Mapping[str, Signature]) -> dict[str, TensorSpec]:
    """Every output tensor the sklearn runtime's signatures name, by name."""
    return {t.name: t for sig in signatures.values() for t in sig.outputs}


def sklearn_to_onnx(model_file: Path, signatures: Mapping[str, Signature]) -> Any:
    """An ``onnx.ModelProto`` computing what the sklearn servable computes, under the same tensor names."""
    import joblib
    import onnx
    from onnx import TensorProto, helper

    skl2onnx = _skl2onnx()
    from skl2onnx.common.data_types import FloatTensorType

    estimator = joblib.load(model_file)
    n = int(estimator.n_features_in_)
    is_classifier = hasattr(estimator, "predict_proba") and hasattr(estimator, "classes_")
    options = {id(estimator): {"zipmap": False}} if is_classifier else None
    try:
        onx = skl2onnx.convert_sklearn(
            estimator, initial_types=[(_INNER_INPUT, FloatTensorType([None, n]))], options=options, target_opset=_OPSETS
        )
    except Exception as exc:  # skl2onnx raises RuntimeError/NotImplementedError/... for what it cannot convert
        raise ConfigError(
            f"skl2onnx cannot convert this {type(estimator).__name__} to ONNX: {type(exc).__name__}: {exc}"
        ) from None

    graph = onx.graph
    wanted = _wanted_outputs(signatures)
    # skl2onnx's own tensor of a name we are about to produce (``probabilities``) is renamed out of the way: an
    # ONNX graph assigns each name once.
    clashes = {o.name for o in graph.output} & set(wanted)
    for node in graph.node:
        node.input[:] = [f"servekit_raw_{n}" if n in clashes else n for n in node.input]
        node.output[:] = [f"servekit_raw_{n}" if n in clashes else n for n in node.output]
    produced = [f"servekit_raw_{o.name}" if o.name in clashes else o.name for o in graph.output]
    # skl2onnx names a classifier's outputs label/probabilities and a regressor's single output variable.
    sources = {"predictions": produced[0]}
    if is_classifier and len(produced) > 1:
        sources["probabilities"] = produced[1]
    missing = set(wanted) - set(sources)
    if missing:
        raise ConfigError(f"the converted graph has no tensor for the sklearn runtime's output(s) {sorted(missing)}")

    # Nodes must stay in topological order: the input cast first, the output adapters last.
    nodes = [helper.make_node("Cast", [INPUT], [_INNER_INPUT], to=TensorProto.FLOAT, name="servekit_cast_inputs")]
    nodes += graph.node
    outputs = []
    for name, spec in wanted.items():
        src = sources[name]
        # Outputs carry the sklearn runtime's shape: reshape (regressors give [N, 1] where sklearn gives [N]).
        target_dims = [-1, *(d if d >= 0 else -1 for d in spec.shape[1:])]
        if target_dims.count(-1) <= 1:
            shape_name = f"servekit_shape_{name}"
            graph.initializer.append(helper.make_tensor(shape_name, TensorProto.INT64, [len(target_dims)], target_dims))
            nodes.append(
                helper.make_node("Reshape", [src, shape_name], [f"{src}_reshaped"], name=f"servekit_reshape_{name}")
            )
            src = f"{src}_reshaped"
        elem = helper.np_dtype_to_tensor_dtype(spec.dtype) if spec.datatype != "BYTES" else TensorProto.STRING
        if spec.datatype == "BYTES":
            nodes.append(helper.make_node("Identity", [src], [name], name=f"servekit_out_{name}"))
        else:
            nodes.append(helper.make_node("Cast", [src], [name], to=elem, name=f"servekit_out_{name}"))
        dims = [d if d >= 0 else None for d in spec.shape[1:]]
        outputs.append(helper.make_tensor_value_info(name, elem, [None, *dims]))

    inputs = [helper.make_tensor_value_info(INPUT, TensorProto.DOUBLE, [None, n])]
    wrapped = helper.make_graph(nodes, graph.name, inputs, outputs, initializer=list(graph.initializer))
    opsets: dict[str, int] = {}
    for op in onx.opset_import:  # skl2onnx may list a domain twice; a quantizer refuses that
        opsets[op.domain] = max(op.version, opsets.get(op.domain, 0))
    imports = [helper.make_opsetid(domain, version) for domain, version in opsets.items()]
    model = helper.make_model(wrapped, opset_imports=imports, producer_name="servekit optimize")
    model.ir_version = onx.ir_version
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise ConfigError(f"the converted {type(estimator).__name__} is not a valid ONNX graph: {exc}") from None
    return model
