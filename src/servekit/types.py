"""Small value types shared by every layer: tensor specs and signatures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

TensorMap = Mapping[str, npt.NDArray[Any]]

# KServe V2 datatype names <-> numpy dtypes. BYTES is an object array of ``bytes``.
_V2_TO_NUMPY: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
_NUMPY_TO_V2 = {v: k for k, v in _V2_TO_NUMPY.items()}
V2_DATATYPES = frozenset(_V2_TO_NUMPY)
# The most dimensions a tensor may have: numpy's limit (NPY_MAXDIMS, 64 since numpy 2.0).
MAX_DIMS = 64

# TF Serving metadata speaks TensorFlow dtype names.
_V2_TO_TF = {
    "BOOL": "DT_BOOL",
    "UINT8": "DT_UINT8",
    "UINT16": "DT_UINT16",
    "UINT32": "DT_UINT32",
    "UINT64": "DT_UINT64",
    "INT8": "DT_INT8",
    "INT16": "DT_INT16",
    "INT32": "DT_INT32",
    "INT64": "DT_INT64",
    "FP16": "DT_HALF",
    "FP32": "DT_FLOAT",
    "FP64": "DT_DOUBLE",
    "BYTES": "DT_STRING",
}


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    return _V2_TO_NUMPY[datatype]


def v2_datatype(dtype: np.dtype[Any]) -> str:
    if dtype.kind in ("U", "S", "O"):
        return "BYTES"
    try:
        return _NUMPY_TO_V2[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"dtype {dtype} has no KServe V2 datatype") from None


def tf_dtype(datatype: str) -> str:
    return _V2_TO_TF.get(datatype, "DT_INVALID")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One named tensor of a signature. ``-1`` in ``shape`` is a variable dimension; dim 0 is the batch."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.datatype not in V2_DATATYPES:
            raise ValueError(f"unknown datatype {self.datatype!r}; expected one of {sorted(V2_DATATYPES)}")

    @property
    def dtype(self) -> np.dtype[Any]:
        return numpy_dtype(self.datatype)

    def describe(self) -> str:
        dims = ",".join("-1" if d < 0 else str(d) for d in self.shape)
        return f"{self.name}: {self.datatype}[{dims}]"

    def shape_matches(self, shape: tuple[int, ...]) -> bool:
        spec = self.shape
        if len(shape) != len(spec):
            return False
        for want, got in zip(spec, shape, strict=True):
            if want >= 0 and want != got:
                return False
        return True


PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
DEFAULT_SIGNATURE = "serving_default"


@dataclass(frozen=True, slots=True)
class Signature:
    """A callable entry point of a servable: named inputs to named outputs.

    ``method`` is TF Serving's method name; classify/regress signatures also say which output holds the
    scores/values and, for classify, the class labels.
    """

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    method: str = PREDICT_METHOD
    class_labels: tuple[str, ...] = ()
    feature_names: tuple[str, ...] = ()
    # False for handler models that take any JSON-shaped data: the service then skips name/shape checks.
    validate: bool = True
    # Whether float inputs may hold NaN / ±Infinity. A runtime whose model refuses them (most scikit-learn
    # estimators) says so here, and such requests are refused as invalid input before they reach the model.
    allows_nan: bool = True
    allows_inf: bool = True

    def input(self, name: str) -> TensorSpec | None:
        return next((t for t in self.inputs if t.name == name), None)

    def describe(self) -> str:
        ins = ", ".join(t.describe() for t in self.inputs)
        outs = ", ".join(t.describe() for t in self.outputs)
        return f"signature {self.name!r} takes ({ins}) and returns ({outs})"
