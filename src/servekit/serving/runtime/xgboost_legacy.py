"""XGBoost's old binary model format (and the pickled boosters that hold it), converted to XGBoost's JSON model.

XGBoost 3 reads only JSON and UBJSON models. Older releases wrote a binary format (``save_model("x.model")``,
``save_raw()``; XGBoost 2.x still wrote it as ``save_raw("deprecated")``), and SageMaker's old XGBoost containers
wrote ``xgboost-model`` as a pickled ``xgboost.core.Booster`` whose state holds that binary model. This module
reads both in pure Python/NumPy and writes the JSON document XGBoost 2.1 writes for the same model (checked against
XGBoost 2.1: tests/unit/serving/runtime/test_xgboost_legacy.py), which XGBoost 3 loads.

The layout (XGBoost's ``src/learner.cc``, ``src/gbm/gbtree_model.cc``, ``src/tree/tree_model.cc``,
``src/gbm/gblinear_model.h``; little-endian, as every release wrote it):

* an optional ``binf`` marker, then ``LearnerModelParamLegacy`` (136 bytes: base_score f32, num_feature u32,
  num_class i32, contain_extra_attrs i32, contain_eval_metrics i32, major/minor version u32, num_target u32,
  boost_from_average i32, reserved);
* the objective and booster names (u64 length + bytes each);
* gbtree/dart: ``GBTreeModelParam`` (160 bytes: num_trees i32, num_parallel_tree i32, reserved), then each tree:
  ``TreeParam`` (148 bytes: num_roots, num_nodes, num_deleted, max_depth, num_feature, size_leaf_vector, reserved),
  num_nodes nodes (20 bytes: parent, left, right, split index with the default-left bit, split condition or leaf
  value) and num_nodes stats (16 bytes: loss change, hessian sum, base weight, leaf count); then one i32 per tree
  (its output group); dart adds its tree weights (u64 count + f32s);
* gblinear: a 136-byte parameter block, then the weights (u64 count + f32s);
* if contain_extra_attrs: the attributes (u64 count, then key and value strings). XGBoost 1.0 and later keep the
  objective's configuration there (``"objective"``); before 1.0 the base score was saved as a margin.

A model file is untrusted input: every count and offset is checked against the bytes there are before anything is
allocated, trees must be trees (each node reached once from the root, children adjacent as XGBoost's predictor
assumes, split features below num_feature), and a pickle may name only the few globals such a booster's pickle
holds; anything else is refused with ValueError.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

BINF = b"binf"
_LEARNER_PARAM = struct.Struct("<fIiiiIIIi100x")  # LearnerModelParamLegacy, 136 bytes
_GBTREE_PARAM = struct.Struct("<ii152x")  # GBTreeModelParam, 160 bytes
_GBLINEAR_PARAM_SIZE = 136  # DeprecatedGBLinearModelParam: nothing in it is needed
_TREE_PARAM = struct.Struct("<iiiiIi124x")  # TreeParam, 148 bytes
_NODE = np.dtype([("parent", "<i4"), ("left", "<i4"), ("right", "<i4"), ("sindex", "<u4"), ("value", "<f4")])
_STAT = np.dtype([("loss_chg", "<f4"), ("sum_hess", "<f4"), ("base_weight", "<f4"), ("leaf_count", "<i4")])
_DELETED = 0xFFFFFFFF  # a pruned node's split index
_MAX_NAME = 256  # objective and booster names are short; a longer "name" is no such model
_MAX_CLASSES = 1 << 16

# Objectives of the binary format's era and the configuration XGBoost 2.1 writes for them (the parameters only
# matter for training; the names must be there).
_OBJECTIVES: dict[str, dict[str, Any]] = {
    **{
        name: {"reg_loss_param": {"scale_pos_weight": "1"}}
        for name in ("reg:squarederror", "reg:squaredlogerror", "reg:logistic", "binary:logistic", "binary:logitraw")
    },
    "reg:pseudohubererror": {"pseudo_huber_param": {"huber_slope": "1"}},
    "count:poisson": {"poisson_regression_param": {"max_delta_step": "0.7"}},
    "reg:gamma": {},
    "reg:tweedie": {"tweedie_regression_param": {"tweedie_variance_power": "1.5"}},
    "survival:cox": {},
    "binary:hinge": {},
    "rank:pairwise": {},
    "rank:ndcg": {},
    "rank:map": {},
    "multi:softmax": {},
    "multi:softprob": {},
}
_ALIASES = {"reg:linear": "reg:squarederror"}
# Before 1.0 the base score was saved transformed to a margin; XGBoost 2.1 transforms it back like a prediction.
_SIGMOID = frozenset({"binary:logistic", "reg:logistic"})
_EXP = frozenset({"count:poisson", "reg:gamma", "reg:tweedie", "survival:cox"})


class _Reader:
    """Bounds-checked little-endian reads from a byte string."""

    def __init__(self, data: bytes, offset: int = 0) -> None:
        self.data = data
        self.pos = offset

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or n > self.left:
            raise ValueError(f"truncated: {what} needs {n} bytes at offset {self.pos}, {self.left} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[Any, ...]:
        return fmt.unpack(self.take(fmt.size, what))

    def count(self, item_size: int, what: str) -> int:
        """A u64 element count, checked against the bytes left for items of ``item_size`` bytes."""
        (n,) = struct.unpack("<Q", self.take(8, f"{what} count"))
        if n * item_size > self.left:
            raise ValueError(f"{what} count {n} at offset {self.pos - 8} exceeds the {self.left} bytes left")
        return int(n)

    def string(self, what: str, limit: int | None = None) -> str:
        n = self.count(1, what)
        if limit is not None and n > limit:
            raise ValueError(f"{what} is {n} bytes long (at most {limit})")
        return self.take(n, what).decode("utf-8", errors="replace")

    def array(self, dtype: np.dtype[Any] | str, n: int, what: str) -> npt.NDArray[Any]:
        dt = np.dtype(dtype)
        return np.frombuffer(self.take(n * dt.itemsize, what), dtype=dt)

    def floats(self, what: str) -> npt.NDArray[np.float32]:
        return self.array("<f4", self.count(4, what), what)


def looks_legacy(head: bytes) -> bool:
    """Whether ``head`` (a file's first 512 bytes) starts as a legacy binary XGBoost model: the 136-byte header,
    then an objective and a booster name XGBoost knows."""
    start = len(BINF) if head.startswith(BINF) else 0
    reader = _Reader(head, start)
    try:
        reader.take(_LEARNER_PARAM.size, "header")
        objective = _name(reader, "objective")
        booster = reader.string("booster", _MAX_NAME)
    except ValueError:
        return False
    return _ALIASES.get(objective, objective) in _OBJECTIVES and booster in ("gbtree", "gblinear", "dart")


def looks_pickled(head: bytes) -> bool:
    """Whether ``head`` starts as a pickled ``xgboost.core.Booster`` (Python 2's protocol 0, or protocol 2+)."""
    return head.startswith((b"ccopy_reg\n_reconstructor\n", b"\x80")) and (
        b"xgboost.core\nBooster" in head or b"xgboost.core\x94\x8c\x07Booster" in head
    )


def convert(data: bytes) -> bytes:
    """A legacy binary model or a pickled booster holding one, as XGBoost's JSON model document (UTF-8 bytes)."""
    feature_names: list[str] = []
    if looks_pickled(data[:512]):
        data, feature_names = unpickle_booster(data)
    return json.dumps(legacy_to_json(data, feature_names)).encode()


def _name(reader: _Reader, what: str) -> str:
    """The objective name, with the length quirk of the oldest releases (length shifted into the high word)."""
    (n,) = struct.unpack("<Q", reader.take(8, f"{what} length"))
    if n >= 0xFFFFFFFF:
        reader.take(4, f"{what} length gap")
        n >>= 32
    if n > _MAX_NAME:
        raise ValueError(f"{what} name is {n} bytes long (at most {_MAX_NAME})")
    return reader.take(n, what).decode("utf-8", errors="replace")


def legacy_to_json(data: bytes, feature_names: list[str] | None = None) -> dict[str, Any]:
    """XGBoost's JSON model document for the legacy binary model ``data``."""
    if data[:1] == b"{":
        raise ValueError("this is a JSON or UBJSON model, not the legacy binary format")
    reader = _Reader(data, len(BINF) if data.startswith(BINF) else 0)
    header = reader.unpack(_LEARNER_PARAM, "model header")
    base_score, num_feature, num_class, extra_attrs, _metrics, major, _minor, num_target, from_average = header
    if not 0 <= num_class <= _MAX_CLASSES:
        raise ValueError(f"num_class {num_class} out of range")
    if num_target > 1:
        raise ValueError(f"num_target {num_target}: multi-target models were never saved in the binary format")
    objective = _name(reader, "objective")
    booster = reader.string("booster", _MAX_NAME)
    objective = _ALIASES.get(objective, objective)
    if objective not in _OBJECTIVES:
        raise ValueError(f"unknown objective {objective[:64]!r}")
    n_groups = max(1, num_class) if objective.startswith("multi:") else 1
    if booster in ("gbtree", "dart"):
        model = _gbtree(reader, num_feature, n_groups)
        gbm: dict[str, Any] = {"name": "gbtree", "model": model}
        if booster == "dart":
            n_trees = len(model["trees"])
            drop = reader.floats("dart tree weights") if n_trees else np.zeros(0, dtype=np.float32)
            if len(drop) != n_trees:
                raise ValueError(f"{len(drop)} dart tree weights for {n_trees} trees")
            gbm = {"name": "dart", "gbtree": gbm, "weight_drop": drop.astype(float).tolist()}
    elif booster == "gblinear":
        reader.take(_GBLINEAR_PARAM_SIZE, "gblinear parameters")
        weights = reader.floats("gblinear weights")
        if len(weights) != (num_feature + 1) * n_groups:
            raise ValueError(f"{len(weights)} linear weights for {num_feature} features and {n_groups} outputs")
        gbm = {"name": "gblinear", "model": {"boosted_rounds": 0, "weights": weights.astype(float).tolist()}}
    else:
        raise ValueError(f"booster {booster[:64]!r} is none XGBoost writes (gbtree, dart or gblinear)")
    attributes: dict[str, str] = {}
    if extra_attrs:
        for _ in range(reader.count(16, "attributes")):
            key = reader.string("attribute name")
            attributes[key] = reader.string(f"attribute {key[:64]!r}")
    # XGBoost 1.0+ keeps the objective's configuration (and the metrics) among the attributes; older releases
    # saved count:poisson's max_delta_step there (0.90) or after them (0.72, ignored like XGBoost 2.1 does).
    config: dict[str, Any] = {"name": objective, **json.loads(json.dumps(_OBJECTIVES[objective]))}
    if objective.startswith("multi:"):
        config["softmax_multiclass_param"] = {"num_class": str(num_class)}
    saved = attributes.pop("objective", None)
    if saved is not None:
        try:
            config = json.loads(saved)
        except ValueError:
            raise ValueError("the objective attribute is not JSON") from None
        if not isinstance(config, dict) or not isinstance(config.get("name"), str):
            raise ValueError("the objective attribute names no objective")
    attributes.pop("metrics", None)
    max_delta_step = attributes.pop("count_poisson_max_delta_step", None)
    if max_delta_step is not None and objective == "count:poisson":
        config["poisson_regression_param"] = {"max_delta_step": max_delta_step}
    if major < 1 and not objective.startswith("multi:"):
        base_score = _untransform(objective, base_score)
    if not math.isfinite(base_score):
        raise ValueError(f"base_score {base_score} is not finite")
    names = list(feature_names or [])
    if names and len(names) != num_feature:
        raise ValueError(f"{len(names)} feature names for {num_feature} features")
    if names == [f"f{i}" for i in range(num_feature)]:
        names = []  # the names old XGBoost gave unnamed columns: kept, XGBoost 3 would want them in every DMatrix
    return {
        "version": [2, 1, 0],  # the JSON layout of XGBoost 2.1, which XGBoost 3 reads
        "learner": {
            "attributes": attributes,
            "feature_names": names,
            "feature_types": [],
            "gradient_booster": gbm,
            "learner_model_param": {
                "base_score": str(np.float32(base_score)),
                "boost_from_average": str(from_average),
                "num_class": str(num_class),
                "num_feature": str(num_feature),
                "num_target": "1",
            },
            "objective": config,
        },
    }


def _untransform(objective: str, margin: float) -> float:
    """The base score a model before XGBoost 1.0 saved as a margin, as the probability/value XGBoost 2.1 makes it."""
    x = np.float32(margin)
    with np.errstate(over="ignore"):
        if objective in _SIGMOID:
            return float(np.float32(1.0) / (np.float32(1.0) + np.exp(-x)))
        if objective in _EXP:
            return float(np.exp(x))
    if objective == "binary:hinge":
        return 1.0 if x > 0 else 0.0
    return float(x)


def _gbtree(reader: _Reader, num_feature: int, n_groups: int) -> dict[str, Any]:
    num_trees, num_parallel_tree = reader.unpack(_GBTREE_PARAM, "gbtree parameters")
    min_tree = _TREE_PARAM.size + _NODE.itemsize + _STAT.itemsize + 4
    if num_trees < 0 or num_trees * min_tree > reader.left:
        raise ValueError(f"num_trees {num_trees} does not fit in the {reader.left} bytes left")
    if num_parallel_tree < 1:
        raise ValueError(f"num_parallel_tree {num_parallel_tree} out of range")
    trees = [_tree(reader, i, num_feature) for i in range(num_trees)]
    tree_info = reader.array("<i4", num_trees, "tree groups")
    if len(tree_info) and (tree_info.min() < 0 or tree_info.max() >= n_groups):
        raise ValueError(f"a tree's output group is out of range (the model has {n_groups})")
    # the trees of each boosting round, as XGBoost 2.1 derives them for a binary model
    layer = num_parallel_tree * (int(tree_info.max()) + 1 if len(tree_info) else 1)
    if num_trees % layer:
        raise ValueError(f"{num_trees} trees are no whole number of rounds of {layer}")
    return {
        "gbtree_model_param": {"num_parallel_tree": str(num_parallel_tree), "num_trees": str(num_trees)},
        "iteration_indptr": list(range(0, num_trees + 1, layer)),
        "tree_info": tree_info.tolist(),
        "trees": trees,
    }


def _tree(reader: _Reader, tree_id: int, num_feature: int) -> dict[str, Any]:
    what = f"tree {tree_id}"
    num_roots, num_nodes, num_deleted, _depth, tree_features, leaf_vector = reader.unpack(_TREE_PARAM, what)
    if num_roots != 1:
        raise ValueError(f"{what} has {num_roots} roots (only single-root trees are supported)")
    if leaf_vector > 1:
        raise ValueError(f"{what} has vector leaves (size {leaf_vector}), which the binary format never held")
    if num_nodes < 1 or num_nodes * (_NODE.itemsize + _STAT.itemsize) > reader.left:
        raise ValueError(f"{what}: num_nodes {num_nodes} does not fit in the {reader.left} bytes left")
    nodes = reader.array(_NODE, num_nodes, f"{what} nodes")
    stats = reader.array(_STAT, num_nodes, f"{what} node stats")
    _check_tree(what, nodes, num_deleted, num_feature)
    left, right, sindex = nodes["left"], nodes["right"], nodes["sindex"]
    parents = nodes["parent"].view(np.uint32) & 0x7FFFFFFF
    return {
        "base_weights": stats["base_weight"].astype(float).tolist(),
        "categories": [],
        "categories_nodes": [],
        "categories_segments": [],
        "categories_sizes": [],
        "default_left": (sindex >> 31).astype(int).tolist(),
        "id": tree_id,
        "left_children": left.tolist(),
        "loss_changes": stats["loss_chg"].astype(float).tolist(),
        "parents": parents.tolist(),
        "right_children": right.tolist(),
        "split_conditions": nodes["value"].astype(float).tolist(),
        "split_indices": (sindex & 0x7FFFFFFF).tolist(),
        "split_type": [0] * num_nodes,
        "sum_hessian": stats["sum_hess"].astype(float).tolist(),
        "tree_param": {
            "num_deleted": str(num_deleted),
            "num_feature": str(tree_features),
            "num_nodes": str(num_nodes),
            "size_leaf_vector": str(leaf_vector),
        },
    }


def _check_tree(what: str, nodes: npt.NDArray[Any], num_deleted: int, num_feature: int) -> None:
    """The nodes form one tree from node 0 that XGBoost can walk: every split's children are in range, adjacent
    (the predictor takes left + 1 as the right child), reached once, not deleted; split features exist."""
    n = len(nodes)
    deleted = nodes["sindex"] == _DELETED
    if int(deleted[1:].sum()) != num_deleted or deleted[0]:
        raise ValueError(f"{what}: num_deleted {num_deleted} does not match its deleted nodes")
    parents = nodes["parent"][1:].view(np.uint32) & 0x7FFFFFFF
    if len(parents) and parents.max() >= n:
        raise ValueError(f"{what}: a node's parent is out of range")
    seen = np.zeros(n, dtype=bool)
    stack = [0]
    seen[0] = True
    while stack:
        i = stack.pop()
        left, right = int(nodes["left"][i]), int(nodes["right"][i])
        if left == -1:
            continue
        if not 0 < left < n - 1 or right != left + 1:
            raise ValueError(f"{what}: node {i} has children {left}, {right} (out of range or not adjacent)")
        if int(nodes["sindex"][i] & 0x7FFFFFFF) >= num_feature:
            raise ValueError(f"{what}: node {i} splits on feature {nodes['sindex'][i] & 0x7FFFFFFF} of {num_feature}")
        for child in (left, right):
            if seen[child] or deleted[child]:
                raise ValueError(f"{what}: node {child} is reached twice or is a deleted node")
            seen[child] = True
            stack.append(child)


class _Booster:
    """Stands in for ``xgboost.core.Booster`` while a pickle is read: keeps the state it is given."""

    state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _reconstructor(cls: Any, base: Any, state: Any) -> _Booster:
    # copy_reg._reconstructor(Booster, object, None): how Python 2 pickled a new-style object with protocol 0
    if cls is not _Booster or base is not object or state is not None:
        raise pickle.UnpicklingError("copy_reg._reconstructor is allowed for xgboost.core.Booster only")
    return _Booster()


def _bytearray(*args: Any) -> bytearray:
    # bytearray(text, 'latin-1') (protocols 0-2) or bytearray(bytes) (3-4); never bytearray(size)
    if not args:
        return bytearray()
    if len(args) == 1 and isinstance(args[0], bytes):
        return bytearray(args[0])
    if len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin-1", "latin1"):
        return bytearray(args[0], "latin-1")
    raise pickle.UnpicklingError("bytearray arguments other than bytes or latin-1 text")


def _encode(text: Any, encoding: Any) -> bytes:
    # _codecs.encode(text, 'latin1'): how Python 3 pickles bytes with protocol 2
    if isinstance(text, str) and encoding in ("latin-1", "latin1"):
        return text.encode("latin-1")
    raise pickle.UnpicklingError("_codecs.encode arguments other than latin-1 text")


_GLOBALS: dict[tuple[str, str], Any] = {
    ("_codecs", "encode"): _encode,
    ("copy_reg", "_reconstructor"): _reconstructor,
    ("copyreg", "_reconstructor"): _reconstructor,
    ("xgboost.core", "Booster"): _Booster,
    ("__builtin__", "object"): object,
    ("builtins", "object"): object,
    ("__builtin__", "bytearray"): _bytearray,
    ("builtins", "bytearray"): _bytearray,
}


class _BoosterUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str, /) -> Any:
        try:
            return _GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module[:64]}.{name[:64]} is not allowed") from None


def unpickle_booster(data: bytes) -> tuple[bytes, list[str]]:
    """The legacy binary model and the feature names in a pickled ``xgboost.core.Booster``; nothing but a booster
    (and the builtins its state holds) may be in the pickle."""
    try:
        obj = _BoosterUnpickler(io.BytesIO(data), encoding="latin-1").load()
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError, IndexError, KeyError) as exc:
        raise ValueError(f"not a readable pickled booster: {exc}") from None
    if not isinstance(obj, _Booster) or not isinstance(obj.state, dict):
        raise ValueError("the pickle holds no xgboost.core.Booster state")
    handle = obj.state.get("handle")
    if not isinstance(handle, bytes | bytearray):
        raise ValueError("the pickled booster holds no model (its handle is not bytes)")
    handle = bytes(handle)
    if handle.startswith(b"CONFIG-offset:"):
        # XGBoost 1.x's pickles: the header, the binary model's length (i64), the binary model, its JSON config
        (size,) = struct.unpack("<q", _Reader(handle, 14).take(8, "CONFIG-offset length"))
        handle = _Reader(handle, 22).take(size, "pickled binary model")
    elif handle[:1] == b"{":
        raise ValueError("the pickled booster is from XGBoost 1.x or later (a JSON snapshot), not converted here")
    names = obj.state.get("feature_names") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("the pickled booster's feature_names are not a list of strings")
    return handle, names
