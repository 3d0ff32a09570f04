"""TensorProto <-> numpy: every dtype the runtimes use, through both tensor_content and the typed *_val fields,
with TensorFlow's fill rules and TF Serving's output form; tf.Example inputs as the REST examples body."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from servekit.errors import ErrorCode, ServekitError
from servekit.serving.codecs.tensor_proto import fill_proto, from_ndarray, to_ndarray
from servekit.serving.codecs.tf_example import examples_body, examples_payload
from servekit.serving.protos.tensorflow.core.example.example_pb2 import Example
from servekit.serving.protos.tensorflow.core.framework import types_pb2
from servekit.serving.protos.tensorflow.core.framework.tensor_pb2 import TensorProto
from servekit.serving.protos.tensorflow_serving.apis.input_pb2 import Input
from servekit.types import Signature, TensorSpec

NUMERIC = {
    np.float16: (types_pb2.DT_HALF, "half_val"),
    np.float32: (types_pb2.DT_FLOAT, "float_val"),
    np.float64: (types_pb2.DT_DOUBLE, "double_val"),
    np.int8: (types_pb2.DT_INT8, "int_val"),
    np.int16: (types_pb2.DT_INT16, "int_val"),
    np.int32: (types_pb2.DT_INT32, "int_val"),
    np.int64: (types_pb2.DT_INT64, "int64_val"),
    np.uint8: (types_pb2.DT_UINT8, "int_val"),
    np.uint16: (types_pb2.DT_UINT16, "int_val"),
    np.uint32: (types_pb2.DT_UINT32, "uint32_val"),
    np.uint64: (types_pb2.DT_UINT64, "uint64_val"),
    np.bool_: (types_pb2.DT_BOOL, "bool_val"),
}
SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


def _same(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> bool:
    """Equal dtype, shape and bits (NaN payloads included, so float round trips are exact)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == object:
        return bool(a.tolist() == b.tolist())
    return bool(np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())


def _wire(proto: TensorProto) -> TensorProto:
    return TensorProto.FromString(proto.SerializeToString())


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kind=st.sampled_from(sorted(NUMERIC, key=lambda t: t.__name__)))
def test_numbers_round_trip_through_tensor_content(data: st.DataObject, kind: type) -> None:
    arr = data.draw(hnp.arrays(np.dtype(kind), SHAPES))
    proto = _wire(from_ndarray(arr))
    code, field = NUMERIC[kind]
    assert proto.dtype == code
    assert [d.size for d in proto.tensor_shape.dim] == list(arr.shape)
    assert len(getattr(proto, field)) == 0  # TF Serving answers in tensor_content
    assert _same(to_ndarray(proto), arr)


def _typed(arr: npt.NDArray[Any]) -> TensorProto:
    """The proto a client fills through the typed field (as tf.make_tensor_proto does for small tensors)."""
    code, field = NUMERIC[arr.dtype.type]
    proto = TensorProto(dtype=code)
    for size in arr.shape:
        proto.tensor_shape.dim.add(size=size)
    flat = arr.reshape(-1)
    values = flat.view(np.uint16).tolist() if field == "half_val" else flat.tolist()
    getattr(proto, field).extend(values)
    return _wire(proto)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kind=st.sampled_from(sorted(NUMERIC, key=lambda t: t.__name__)))
def test_numbers_arrive_through_the_typed_fields(data: st.DataObject, kind: type) -> None:
    arr = data.draw(hnp.arrays(np.dtype(kind), hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)))
    assert _same(to_ndarray(_typed(arr)), arr)


@settings(max_examples=40, deadline=None)
@given(arr=hnp.arrays(np.dtype(object), SHAPES, elements=st.binary(max_size=8)))
def test_strings_round_trip_as_bytes(arr: npt.NDArray[Any]) -> None:
    proto = _wire(from_ndarray(arr))
    assert proto.dtype == types_pb2.DT_STRING and not proto.tensor_content
    assert _same(to_ndarray(proto), arr)


def test_unicode_outputs_go_out_as_utf8_bytes() -> None:
    proto = from_ndarray(np.array([["é", "b"]]))
    assert list(proto.string_val) == ["é".encode(), b"b"]
    assert to_ndarray(proto).tolist() == [["é".encode(), b"b"]]


def test_tensor_content_is_little_endian_as_tensorflow_writes_it() -> None:
    proto = from_ndarray(np.array([1.0, 2.0], dtype=np.float32))
    assert proto.tensor_content == b"\x00\x00\x80?\x00\x00\x00@"
    half = TensorProto(dtype=types_pb2.DT_HALF, half_val=[0x3C00])  # the bits of 1.0 in float16
    assert to_ndarray(half).tolist() == 1.0 and to_ndarray(half).shape == ()


def test_scalars_have_no_dimensions() -> None:
    proto = from_ndarray(np.array(7, dtype=np.int64))
    assert len(proto.tensor_shape.dim) == 0
    assert to_ndarray(proto).shape == ()
    assert to_ndarray(TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[2.5])).tolist() == 2.5


def _shaped(code: int, dims: list[int], **fields: Any) -> TensorProto:
    proto = TensorProto(dtype=code, **fields)  # type: ignore[arg-type]
    for d in dims:
        proto.tensor_shape.dim.add(size=d)
    return proto


def test_fewer_values_than_the_shape_repeat_the_last_one_as_tensorflow_does() -> None:
    assert to_ndarray(_shaped(types_pb2.DT_FLOAT, [2, 2], float_val=[3.0])).tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert to_ndarray(_shaped(types_pb2.DT_INT64, [4], int64_val=[1, 2])).tolist() == [1, 2, 2, 2]
    assert to_ndarray(_shaped(types_pb2.DT_INT32, [3])).tolist() == [0, 0, 0]
    assert to_ndarray(_shaped(types_pb2.DT_STRING, [2], string_val=[b"x"])).tolist() == [b"x", b"x"]
    assert to_ndarray(_shaped(types_pb2.DT_BOOL, [2, 0])).shape == (2, 0)


def _refused(proto: TensorProto, name: str = "x") -> str:
    with pytest.raises(ServekitError) as info:
        to_ndarray(proto, name)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    return info.value.message


def test_malformed_tensors_are_refused_with_what_to_fix() -> None:
    assert "float_val holds 3 values, more than the 2 of shape [2]" in _refused(
        _shaped(types_pb2.DT_FLOAT, [2], float_val=[1, 2, 3])
    )
    assert "tensor_content holds 4 bytes, but shape [2] of DT_FLOAT needs 8" in _refused(
        _shaped(types_pb2.DT_FLOAT, [2], tensor_content=b"\0" * 4)
    )
    assert "values are in int64_val; DT_FLOAT values go in float_val or tensor_content" in _refused(
        _shaped(types_pb2.DT_FLOAT, [2], int64_val=[1, 2])
    )
    assert "DT_COMPLEX64, which servekit does not serve" in _refused(_shaped(types_pb2.DT_COMPLEX64, [1]))
    assert "every dimension must be >= 0" in _refused(_shaped(types_pb2.DT_FLOAT, [-1]))
    unknown = TensorProto(dtype=types_pb2.DT_FLOAT)
    unknown.tensor_shape.unknown_rank = True
    assert "unknown rank" in _refused(unknown)
    assert "does not fit DT_UINT8" in _refused(_shaped(types_pb2.DT_UINT8, [1], int_val=[-1]))
    assert _refused(_shaped(types_pb2.DT_STRING, [1], tensor_content=b"x")).startswith("input 'x' is DT_STRING")


def test_fill_proto_writes_into_a_response_map_entry() -> None:
    from servekit.serving.protos.tensorflow_serving.apis.predict_pb2 import PredictResponse

    resp = PredictResponse()
    fill_proto(resp.outputs["y"], np.array([[1, 2]], dtype=np.int32))
    assert to_ndarray(PredictResponse.FromString(resp.SerializeToString()).outputs["y"]).tolist() == [[1, 2]]


def _example(**features: Any) -> Example:
    ex = Example()
    for name, values in features.items():
        f = ex.features.feature[name]
        if isinstance(values[0], float):
            f.float_list.value.extend(values)
        elif isinstance(values[0], int):
            f.int64_list.value.extend(values)
        else:
            f.bytes_list.value.extend(values)
    return ex


def test_examples_become_the_rest_body_and_then_tensors_in_signature_order() -> None:
    sig = Signature(
        "classify",
        (TensorSpec("x", "FP32", (-1, 3)),),
        (TensorSpec("scores", "FP32", (-1, 2)),),
        feature_names=("a", "b", "c"),
    )
    request = Input()
    with_context = request.example_list_with_context
    with_context.examples.extend([_example(a=[1.0], b=[2.0]), _example(a=[4.0], b=[5.0])])
    with_context.context.CopyFrom(_example(c=[9]))
    assert examples_body(request) == {
        "examples": [{"a": [1.0], "b": [2.0]}, {"a": [4.0], "b": [5.0]}],
        "context": {"c": [9]},
    }
    payload = examples_payload(request, "classify")
    assert payload.signature_name() == "classify"
    tensors = payload.tensors(sig)
    assert next(iter(tensors.values())).tolist() == [[1.0, 2.0, 9], [4.0, 5.0, 9]]
    plain = Input()
    plain.example_list.examples.append(_example(a=[1.0], b=[2.0], c=[3.0]))
    assert examples_body(plain) == {"examples": [{"a": [1.0], "b": [2.0], "c": [3.0]}]}


def test_an_empty_input_or_feature_is_refused() -> None:
    with pytest.raises(ServekitError, match="input is empty"):
        examples_body(Input())
    empty = Input()
    ex = empty.example_list.examples.add()
    ex.features.feature["a"].SetInParent()
    with pytest.raises(ServekitError, match="feature 'a' holds no value"):
        examples_body(empty)
