"""A SavedModel's SignatureDef map, read from ``saved_model.pb`` with TensorFlow's own protos: the servable
signatures (names, dtypes, shapes, method), the ``saved_model_cli show --all`` listing of the same map, and the
``tf.Example`` features a classify/regress signature parses.

Only called once TensorFlow is importable (the runtime checks); every TensorFlow import is inside a function.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servekit.errors import ConfigError
from servekit.types import (
    CLASSIFY_METHOD,
    PREDICT_METHOD,
    REGRESS_METHOD,
    V2_DATATYPES,
    Signature,
    TensorSpec,
    tf_dtype,
)

SERVE_TAGS = frozenset({"serve"})
# servekit datatype for each TensorFlow dtype name it can feed and read back.
_FROM_TF = {tf_dtype(d): d for d in V2_DATATYPES}
EXAMPLE_METHODS = (CLASSIFY_METHOD, REGRESS_METHOD)


@dataclass(frozen=True, slots=True)
class ExampleFeature:
    """One dense feature a signature's ``ParseExample`` op reads: its key, kind and values per example."""

    name: str
    kind: str  # "float", "int64" or "bytes": the tf.train.Feature list it is written into
    size: int


def read_meta_graph(path: Path, tags: frozenset[str] = SERVE_TAGS) -> Any:
    """The MetaGraphDef with exactly ``tags`` (TF Serving loads the ``serve`` tag set)."""
    from tensorflow.core.protobuf import saved_model_pb2

    pb = path / "saved_model.pb"
    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString(pb.read_bytes())
    except Exception as exc:  # protobuf's DecodeError, OSError
        raise ConfigError(f"cannot read {pb.name}: {exc}") from exc
    for meta_graph in saved.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == tags:
            return meta_graph
    found = "; ".join(repr(",".join(mg.meta_info_def.tags)) for mg in saved.meta_graphs) or "none"
    raise ConfigError(f"{pb} has no MetaGraphDef with tag set {','.join(sorted(tags))!r}; tag sets: {found}")


def _dtype_name(enum_value: int) -> str:
    from tensorflow.core.framework import types_pb2

    return str(types_pb2.DataType.Name(enum_value))


def _spec(key: str, info: Any) -> tuple[TensorSpec | None, bool]:
    """The tensor as servekit describes it (None when its dtype has no servekit datatype) and whether its rank
    is known (an unknown rank cannot be checked before the graph runs)."""
    datatype = _FROM_TF.get(_dtype_name(info.dtype))
    if datatype is None:
        return None, False
    if info.tensor_shape.unknown_rank:
        return TensorSpec(key, datatype, (-1,)), False
    return TensorSpec(key, datatype, tuple(int(d.size) if d.size >= 0 else -1 for d in info.tensor_shape.dim)), True


def signatures_of(meta_graph: Any) -> tuple[dict[str, Signature], dict[str, str]]:
    """The servable signatures of the SignatureDef map, and why each one left out was left out.

    A classify/regress signature takes serialized ``tf.Example`` strings; its inputs are checked by the graph
    (the examples verbs hand it rows of feature values, which the servable serializes), so it is not validated
    as a tensor signature. Outputs are listed scores first for classify, the order the examples encoders read.
    """
    sigs: dict[str, Signature] = {}
    skipped: dict[str, str] = {}
    for name in sorted(meta_graph.signature_def):
        sdef = meta_graph.signature_def[name]
        inputs, outputs, known = [], [], True
        unsupported = []
        for key in sorted(sdef.inputs):
            spec, rank_known = _spec(key, sdef.inputs[key])
            if spec is None:
                unsupported.append(f"input {key!r} ({_dtype_name(sdef.inputs[key].dtype)})")
                continue
            inputs.append(spec)
            known = known and rank_known
        for key in sorted(sdef.outputs):
            spec, _ = _spec(key, sdef.outputs[key])
            if spec is None:
                unsupported.append(f"output {key!r} ({_dtype_name(sdef.outputs[key].dtype)})")
                continue
            outputs.append(spec)
        if unsupported or not outputs:
            skipped[name] = "; ".join(unsupported) or "no outputs"
            continue
        method = sdef.method_name or PREDICT_METHOD
        if method == CLASSIFY_METHOD:
            outputs.sort(key=lambda t: t.name != "scores")
        examples = method in EXAMPLE_METHODS
        sigs[name] = Signature(name, tuple(inputs), tuple(outputs), method, validate=known and not examples)
    return sigs, skipped


# ---- saved_model_cli show --all -------------------------------------------------------------------------------


def _tensor_lines(kind: str, key: str, info: Any) -> list[str]:
    if info.tensor_shape.unknown_rank:
        shape = "unknown_rank"
    else:
        shape = "(" + ", ".join(str(d.size) for d in info.tensor_shape.dim) + ")"
    return [
        f"    {kind}['{key}'] tensor_info:",
        f"        dtype: {_dtype_name(info.dtype)}",
        f"        shape: {shape}",
        f"        name: {info.name}",
    ]


def cli_listing(meta_graph: Any) -> str:
    """What ``saved_model_cli show --all`` prints for this MetaGraphDef, up to its op list (the "Concrete
    Functions" that follow need the object graph restored, which serving does not)."""
    from tensorflow.python.framework import meta_graph as meta_graph_lib

    tags = list(meta_graph.meta_info_def.tags)
    lines = ["", f"MetaGraphDef with tag-set: '{', '.join(tags)}' contains the following SignatureDefs:"]
    for name in sorted(meta_graph.signature_def):
        sdef = meta_graph.signature_def[name]
        lines += ["", f"signature_def['{name}']:"]
        lines.append("  The given SavedModel SignatureDef contains the following input(s):")
        for key in sorted(sdef.inputs):
            lines += _tensor_lines("inputs", key, sdef.inputs[key])
        lines.append("  The given SavedModel SignatureDef contains the following output(s):")
        for key in sorted(sdef.outputs):
            lines += _tensor_lines("outputs", key, sdef.outputs[key])
        lines.append(f"  Method name is: {sdef.method_name}")
    # saved_model_cli prints the set as Python does (in hash order); sorted here so the listing is stable.
    ops = sorted(set(meta_graph_lib.ops_used_by_graph_def(meta_graph.graph_def)))
    lines.append(f"The MetaGraph with tag set {tags} contains the following ops: {{{', '.join(repr(o) for o in ops)}}}")
    return "\n".join(lines)


# ---- the tf.Example features a classify/regress signature parses ----------------------------------------------

_KINDS = {"DT_FLOAT": "float", "DT_INT64": "int64", "DT_STRING": "bytes"}


def _node_name(ref: str) -> str:
    """``^ctrl``, ``node:0`` (a graph) and ``node:output:0`` (a function body) all name ``node``."""
    return ref.lstrip("^").split(":", 1)[0]


def _const_strings(nodes: dict[str, Any], ref: str) -> list[str] | None:
    import tensorflow as tf

    node = nodes.get(_node_name(ref))
    if node is None or node.op != "Const":
        return None
    values = tf.make_ndarray(node.attr["value"].tensor)
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values.reshape(-1).tolist()]


def _parse_op_features(node: Any, nodes: dict[str, Any]) -> tuple[ExampleFeature, ...] | None:
    """The dense features of one ParseExample/ParseExampleV2 node, None when its keys are not constants."""
    types = [_dtype_name(t) for t in node.attr["Tdense"].list.type]
    shapes = node.attr["dense_shapes"].list.shape
    if node.op == "ParseExampleV2":  # inputs: serialized, names, sparse_keys, dense_keys, ragged_keys, defaults...
        keys = _const_strings(nodes, node.input[3]) if len(node.input) > 3 else None
    else:  # ParseExample: serialized, names, Nsparse sparse keys, Ndense dense keys, defaults...
        n_sparse, n_dense = node.attr["Nsparse"].i, node.attr["Ndense"].i
        refs = node.input[2 + n_sparse : 2 + n_sparse + n_dense]
        found = [_const_strings(nodes, r) for r in refs]
        keys = None if any(k is None for k in found) else [k[0] for k in found if k]
    if keys is None or len(keys) != len(types) or any(t not in _KINDS for t in types):
        return None
    features = []
    for key, dtype, shape in zip(keys, types, shapes, strict=False):
        size = 1
        for d in shape.dim:
            size *= max(int(d.size), 1)
        features.append(ExampleFeature(key, _KINDS[dtype], size))
    return tuple(features)


def example_features(meta_graph: Any, signature: str) -> tuple[ExampleFeature, ...] | None:
    """The dense ``tf.Example`` features the signature's graph parses, in the graph's order.

    The parse op fed by the signature's input placeholder decides (a TF1 graph); in a TF2 graph the parse op
    sits in a function body, and then the model's parse ops decide when they all read the same features.
    None when that cannot be told: the servable then takes only serialized examples.
    """
    sdef = meta_graph.signature_def[signature]
    if len(sdef.inputs) != 1:
        return None
    placeholder = _node_name(next(iter(sdef.inputs.values())).name)
    bodies = [list(meta_graph.graph_def.node)] + [list(f.node_def) for f in meta_graph.graph_def.library.function]
    candidates: list[tuple[ExampleFeature, ...] | None] = []
    for body in bodies:
        nodes = {n.name: n for n in body}
        for node in body:
            if node.op not in ("ParseExample", "ParseExampleV2"):
                continue
            features = _parse_op_features(node, nodes)
            if body is bodies[0] and node.input and _node_name(node.input[0]) == placeholder:
                return features
            candidates.append(features)
    distinct = set(candidates)
    if len(distinct) == 1:
        return distinct.pop()
    return None
