"""TensorFlow's ``TensorProto`` <-> numpy, as TF Serving reads and writes it over gRPC.

Input: a numeric tensor comes either as ``tensor_content`` (the raw little-endian bytes, used when it is
non-empty) or in the ``*_val`` field of its dtype; as in TensorFlow's ``Tensor::FromProto``, fewer values than
the shape holds repeat the last one (one value fills the tensor), none gives zeros, and more is an error. Strings
come in ``string_val`` as bytes. Output: numbers go out as ``tensor_content`` (TF Serving's
``AsProtoTensorContent``), strings in ``string_val``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.errors import invalid
from servekit.serving.protos.tensorflow.core.framework import types_pb2
from servekit.serving.protos.tensorflow.core.framework.tensor_pb2 import TensorProto
from servekit.types import MAX_DIMS

# dtype -> (numpy dtype, the typed field its values use). half_val carries float16 bit patterns in int32s.
_NUMERIC: dict[int, tuple[np.dtype[Any], str]] = {
    types_pb2.DT_FLOAT: (np.dtype("<f4"), "float_val"),
    types_pb2.DT_DOUBLE: (np.dtype("<f8"), "double_val"),
    types_pb2.DT_HALF: (np.dtype("<f2"), "half_val"),
    types_pb2.DT_INT8: (np.dtype("i1"), "int_val"),
    types_pb2.DT_INT16: (np.dtype("<i2"), "int_val"),
    types_pb2.DT_INT32: (np.dtype("<i4"), "int_val"),
    types_pb2.DT_INT64: (np.dtype("<i8"), "int64_val"),
    types_pb2.DT_UINT8: (np.dtype("u1"), "int_val"),
    types_pb2.DT_UINT16: (np.dtype("<u2"), "int_val"),
    types_pb2.DT_UINT32: (np.dtype("<u4"), "uint32_val"),
    types_pb2.DT_UINT64: (np.dtype("<u8"), "uint64_val"),
    types_pb2.DT_BOOL: (np.dtype(np.bool_), "bool_val"),
}
_BY_NUMPY = {np.dtype(dt).newbyteorder("="): code for code, (dt, _) in _NUMERIC.items()}
_TYPED_FIELDS = (
    *("half_val", "float_val", "double_val", "int_val", "string_val"),
    *("int64_val", "bool_val", "uint32_val", "uint64_val"),
)


def dtype_name(code: int) -> str:
    try:
        return str(types_pb2.DataType.Name(code))
    except ValueError:
        return f"dtype {code}"


def _label(name: str) -> str:
    return f"input '{name}'" if name else "the input"


def shape_of(proto: TensorProto, name: str = "") -> tuple[int, ...]:
    """The tensor's shape; unknown rank and unknown (-1) dimensions are refused, as TensorFlow does."""
    shape = proto.tensor_shape
    if shape.unknown_rank:
        raise invalid(f"{_label(name)} has an unknown rank; a tensor sent for inference needs its full shape")
    dims = tuple(int(d.size) for d in shape.dim)
    if len(dims) > MAX_DIMS:
        raise invalid(f"{_label(name)} has {len(dims)} dimensions; at most {MAX_DIMS}")
    if any(d < 0 for d in dims):
        raise invalid(f"{_label(name)} has shape {list(dims)}; every dimension must be >= 0")
    return dims


def to_ndarray(proto: TensorProto, name: str = "") -> npt.NDArray[Any]:
    """A ``TensorProto`` as a numpy array (numbers in native byte order, strings as an object array of bytes)."""
    dims = shape_of(proto, name)
    count = math.prod(dims)
    code = proto.dtype
    if code == types_pb2.DT_STRING:
        if proto.tensor_content:
            raise invalid(f"{_label(name)} is DT_STRING; its values go in string_val, not tensor_content")
        return _fill(np.array(list(proto.string_val), dtype=object), dims, count, name, "string_val", b"")
    spec = _NUMERIC.get(code)
    if spec is None:
        supported = ", ".join(sorted(dtype_name(c) for c in (*_NUMERIC, types_pb2.DT_STRING)))
        raise invalid(f"{_label(name)} has {dtype_name(code)}, which servekit does not serve; use one of {supported}")
    dtype, field = spec
    if proto.tensor_content:
        content = proto.tensor_content
        if len(content) != count * dtype.itemsize:
            raise invalid(
                f"{_label(name)}: tensor_content holds {len(content)} bytes, but shape {list(dims)} of "
                f"{dtype_name(code)} needs {count * dtype.itemsize}"
            )
        return np.frombuffer(content, dtype=dtype).reshape(dims).astype(dtype.newbyteorder("="), copy=False)
    values = getattr(proto, field)
    if not values:
        _refuse_misplaced(proto, field, name)
    if field == "half_val":  # float16 bit patterns, one per int32
        arr = np.array(values, dtype=np.int64).astype(np.uint16).view(np.float16)
    else:
        try:
            arr = np.array(values, dtype=dtype.newbyteorder("="))
        except OverflowError:
            raise invalid(f"{_label(name)}: a value in {field} does not fit {dtype_name(code)}") from None
    return _fill(arr, dims, count, name, field, dtype.type(0))


def _refuse_misplaced(proto: TensorProto, field: str, name: str) -> None:
    """Values in another dtype's field would be silently ignored (zeros): say where they belong instead."""
    for other in _TYPED_FIELDS:
        if other != field and len(getattr(proto, other)):
            raise invalid(
                f"{_label(name)} has dtype {dtype_name(proto.dtype)} but its values are in {other}; "
                f"{dtype_name(proto.dtype)} values go in {field} or tensor_content"
            )


def _fill(
    arr: npt.NDArray[Any], dims: tuple[int, ...], count: int, name: str, field: str, zero: Any
) -> npt.NDArray[Any]:
    n = arr.shape[0]
    if n == count:
        return arr.reshape(dims)
    if n > count:
        raise invalid(f"{_label(name)}: {field} holds {n} values, more than the {count} of shape {list(dims)}")
    if n == 0:
        out = np.empty(count, dtype=arr.dtype)
        out[:] = zero
        return out.reshape(dims)
    # TensorFlow repeats the last value over the rest (one value fills the whole tensor).
    out = np.empty(count, dtype=arr.dtype)
    out[:n] = arr
    out[n:] = arr[-1]
    return out.reshape(dims)


def tf_dtype_of(arr: npt.NDArray[Any]) -> int:
    if arr.dtype.kind in "OUS":
        return types_pb2.DT_STRING
    code = _BY_NUMPY.get(arr.dtype.newbyteorder("="))
    if code is None:
        raise invalid(f"an output of dtype {arr.dtype} has no TensorFlow dtype")
    return code


def fill_proto(proto: TensorProto, arr: npt.NDArray[Any]) -> TensorProto:
    """Write ``arr`` into ``proto`` (a map entry of a response, written in place): dtype, shape and values."""
    arr = np.asarray(arr)
    code = tf_dtype_of(arr)
    proto.dtype = code  # type: ignore[assignment]
    for size in arr.shape:
        proto.tensor_shape.dim.add(size=size)
    if code == types_pb2.DT_STRING:
        proto.string_val.extend(_as_bytes(v) for v in arr.reshape(-1).tolist())
    else:
        proto.tensor_content = np.ascontiguousarray(arr, dtype=_NUMERIC[code][0]).tobytes()
    return proto


def from_ndarray(arr: npt.NDArray[Any]) -> TensorProto:
    return fill_proto(TensorProto(), arr)


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return str(value).encode()
