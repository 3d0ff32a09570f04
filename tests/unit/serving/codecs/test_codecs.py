import base64
import io
import struct

import numpy as np
import pytest

from servekit.errors import ServekitError
from servekit.serving.codecs.json import dumps, loads
from servekit.serving.codecs.sagemaker import decode_csv, decode_npy
from servekit.serving.codecs.tfjson import decode_instances, decode_predict, encode_predict, to_array
from servekit.serving.codecs.v2 import decode_bytes_tensor as _decode_bytes_tensor
from servekit.serving.codecs.v2 import decode_v2_inputs
from servekit.serving.codecs.v2 import encode_bytes_tensor as _encode_bytes_tensor
from servekit.serving.protocols.sagemaker import parse_custom_attributes
from servekit.serving.schema import ONLY_INPUT, InferenceResponse


def test_row_format_single_input() -> None:
    inputs, rows = decode_predict({"instances": [[1, 2], [3, 4]]}, ())
    assert rows and inputs[ONLY_INPUT].tolist() == [[1, 2], [3, 4]]


def test_row_format_named_inputs() -> None:
    inputs = decode_instances([{"a": 1, "b": [1, 2]}, {"a": 2, "b": [3, 4]}], ())
    assert inputs["a"].tolist() == [1, 2]
    assert inputs["b"].shape == (2, 2)


def test_columnar_format() -> None:
    inputs, rows = decode_predict({"inputs": {"a": [1, 2, 3], "b": [[1.0]]}}, ())
    assert not rows and inputs["a"].shape == (3,) and inputs["b"].shape == (1, 1)
    inputs, _ = decode_predict({"inputs": [[1, 2]]}, ())
    assert inputs[ONLY_INPUT].shape == (1, 2)


def test_b64_values() -> None:
    raw = b"\x00\xffhello"
    arr = to_array([{"b64": base64.b64encode(raw).decode()}, {"b64": "aGk="}], "img")
    assert arr.dtype == object and arr.tolist() == [raw, b"hi"]
    with pytest.raises(ServekitError, match="invalid base64"):
        to_array([{"b64": "!!!"}], "img")


def test_ragged() -> None:
    with pytest.raises(ServekitError, match="ragged"):
        to_array([[1, 2], [3]], "x")


def test_encode_single_and_multi_output() -> None:
    one = InferenceResponse("m", 1, "s", {"y": np.array([1.0, 2.0])})
    assert encode_predict(one, rows=True)["predictions"].tolist() == [1.0, 2.0]
    multi = InferenceResponse("m", 1, "s", {"a": np.array([1, 2]), "b": np.array([[1.0], [2.0]])})
    assert encode_predict(multi, rows=True) == {"predictions": [{"a": 1, "b": [1.0]}, {"a": 2, "b": [2.0]}]}
    cols = encode_predict(multi, rows=False)["outputs"]
    assert set(cols) == {"a", "b"}


def test_bytes_outputs_named_bytes_are_b64() -> None:
    resp = InferenceResponse("m", 1, "s", {"img_bytes": np.array([b"\x01\x02"], dtype=object)})
    assert encode_predict(resp, rows=True) == {"predictions": [{"b64": "AQI="}]}


def test_loads_reports_position() -> None:
    with pytest.raises(ServekitError, match=r"line 2 column 5"):
        loads(b'{"a":\n    ]}')
    assert np.isnan(loads(b"[NaN]")[0])  # TF Serving accepts NaN/Infinity tokens


def test_v2_bytes_roundtrip() -> None:
    arr = np.array([b"a", b"", b"hello"], dtype=object)
    buf = _encode_bytes_tensor(arr)
    assert buf[:4] == struct.pack("<I", 1)
    assert _decode_bytes_tensor(buf, 3, "x").tolist() == arr.tolist()
    with pytest.raises(ServekitError, match="truncated"):
        _decode_bytes_tensor(buf[:-7], 3, "x")


def test_csv() -> None:
    assert decode_csv(b"1,2\n3,4\n").tolist() == [[1, 2], [3, 4]]
    with pytest.raises(ServekitError, match="CSV line 2: 'x' is not a number"):
        decode_csv(b"1,2\n3,x\n")
    with pytest.raises(ServekitError, match="CSV line 2 has 3 columns; line 1 has 2"):
        decode_csv(b"1,2\n3,4,5\n")


def test_custom_attributes() -> None:
    attrs = parse_custom_attributes("tfs-model-name=iris,tfs-model-version=2, tfs-method=classify,other=x")
    assert attrs == {"tfs-model-name": "iris", "tfs-model-version": "2", "tfs-method": "classify"}


def test_npy_header_declaring_more_than_the_body_is_refused() -> None:
    import io as io_module

    from servekit.serving.codecs.sagemaker import decode_npy

    buf = io_module.BytesIO()
    np.save(buf, np.zeros(3))
    body = buf.getvalue().replace(b"(3,)", b"(1000000000000,)")
    with pytest.raises(ServekitError, match="declares shape"):
        decode_npy(body)
    assert decode_npy(buf.getvalue()).tolist() == [0.0, 0.0, 0.0]


# ---- hardening: what fuzzing found -----------------------------------------------------------------------


def test_loads_refuses_json_nested_past_the_depth_limit() -> None:
    deep = b"[" * 1100 + b"]" * 1100
    with pytest.raises(ServekitError, match="more than 1024 levels deep"):
        loads(deep)
    # NaN sends the body to the standard library's parser, which recurses: the same limit is checked before it, so
    # the answer does not depend on the recursion limit or on how deep the caller's stack is
    with pytest.raises(ServekitError, match="more than 1024 levels deep"):
        loads(b'{"x": NaN, "y": ' + b"[" * 1100 + b"]" * 1100 + b"}")
    assert loads(b'{"x": NaN, "y": "' + b"[" * 2000 + b'"}')["y"] == "[" * 2000  # brackets in a string don't nest
    assert loads(b"[" * 1000 + b"]" * 1000) is not None  # deep but within the limit parses


def test_loads_refuses_integers_python_will_not_convert() -> None:
    with pytest.raises(ServekitError, match=r"cannot be parsed.*4300 digits"):
        loads(b"[" + b"9" * 5000 + b"]")
    assert loads(b"[" + b"9" * 400 + b"]") == [int("9" * 400)]


def test_dumps_writes_lone_surrogates_as_escapes() -> None:
    assert dumps({"error": "no signature '\ud800'"}) == b'{"error":"no signature \'\\\\ud800\'"}'
    assert dumps({"k\udfff": ["\ud800", 1]}) == b'{"k\\\\udfff":["\\\\ud800",1]}'
    assert dumps({"ok": "é"}) == '{"ok":"é"}'.encode()


@pytest.mark.parametrize("sep", [b"\r", b"\r\n", b"\n"])
def test_csv_line_endings(sep: bytes) -> None:
    assert decode_csv(sep.join([b"1,2", b"3,4"]) + sep).tolist() == [[1, 2], [3, 4]]
    with pytest.raises(ServekitError, match="CSV line 2: 'x' is not a number"):
        decode_csv(sep.join([b"1,2", b"3,x"]))


def test_csv_module_errors_are_invalid_input() -> None:
    with pytest.raises(ServekitError, match="CSV line 2: a field is longer than 131072 characters"):
        decode_csv(b"1,2\n" + b"1" * 200_000 + b",2\n")
    with pytest.raises(ServekitError, match="CSV line 1: ") as info:
        decode_csv(b'1,"2\x00')  # an unterminated quote at the end of the body
    assert info.value.code.value == "invalid_argument"


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("arr", "fragment"),
    [
        (np.zeros((1, 4), dtype="V8"), "holds |V8 values (kind 'V')"),
        (np.zeros(2, dtype=[("a", "<f8"), ("b", "<i4")]), "kind 'V'"),
        (np.zeros(2, dtype=np.complex64), "holds complex64 values"),
        (np.zeros(2, dtype="datetime64[s]"), "kind 'M'"),
    ],
)
def test_npy_dtypes_no_model_takes_are_refused(arr: np.ndarray, fragment: str) -> None:
    with pytest.raises(ServekitError, match="send a boolean, integer, float or fixed-width string array") as info:
        decode_npy(_npy(arr))
    assert fragment in info.value.message


def test_npy_malformed_headers_are_refused() -> None:
    good = _npy(np.zeros((2, 3)))
    assert decode_npy(good).shape == (2, 3)
    with pytest.raises(ServekitError, match=r"shape \[-2, 3\], which has a negative dimension"):
        decode_npy(good.replace(b"(2, 3)", b"(-2, 3)"))
    with pytest.raises(ServekitError, match="declares shape"):  # the product overflows int64: no wrap-around
        decode_npy(good.replace(b"(2, 3), ", b"(4294967296, 4294967296)"))
    with pytest.raises(ServekitError, match=r"not a valid \.npy array"):
        decode_npy(good.replace(b"'<f8'", b"'<zz'"))
    unterminated = good[:10] + b"[" + b" " * (len(good) - 12) + b"\n"  # tokenize.TokenError inside numpy
    with pytest.raises(ServekitError, match=r"not a valid \.npy array"):
        decode_npy(unterminated)


def _v2(**override: object) -> list[object]:
    return [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2], **override}]


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"shape": [True, 2]}, "shape must be a list of non-negative integers, got [True, 2]"),
        ({"shape": [1.0, 2]}, "shape must be a list of non-negative integers"),
        ({"shape": [1] * 65}, "shape has 65 dimensions; a tensor has at most 64"),
        ({"datatype": ["FP32"]}, "datatype ['FP32'] is not one of"),
        ({"datatype": {"t": 1}}, "datatype {'t': 1} is not one of"),
        ({"parameters": {"binary_data_size": True}}, "binary_data_size True"),
    ],
)
def test_v2_inputs_of_the_wrong_json_type(override: dict[str, object], fragment: str) -> None:
    with pytest.raises(ServekitError) as info:
        decode_v2_inputs(_v2(**override), memoryview(b"\x00" * 8))
    assert fragment in info.value.message


@pytest.mark.parametrize(("datatype", "value"), [("FP16", 65520.0), ("FP32", 1e300), ("FP32", -1e39)])
def test_v2_json_floats_the_datatype_cannot_hold(datatype: str, value: float) -> None:
    with pytest.raises(ServekitError, match=f"data holds values outside the range of {datatype}"):
        decode_v2_inputs(_v2(datatype=datatype, shape=[1], data=[value]))
    (arr,) = decode_v2_inputs(_v2(datatype=datatype, shape=[2], data=[float("inf"), 1.0])).values()
    assert np.isinf(arr[0])  # infinity that was sent is passed on


def test_v2_sixty_four_dimensions_still_decode() -> None:
    (arr,) = decode_v2_inputs(_v2(shape=[1] * 63 + [2])).values()
    assert arr.ndim == 64


def test_lists_deeper_than_a_tensor_say_so() -> None:
    with pytest.raises(ServekitError, match="nests lists more than 64 levels deep"):
        to_array(loads(b"[" * 70 + b"1" + b"]" * 70), "x")
    with pytest.raises(ServekitError, match="ragged"):
        to_array([[1, 2], [3]], "x")


def test_json_lines_sent_as_application_json_are_rows() -> None:
    """SageMaker's TF Serving container reads several JSON documents, one per line, in an application/json body as
    JSON Lines (the SDK's JSONLinesSerializer, or a string body, with the default content type)."""
    from servekit.serving.codecs.sagemaker import JSON, decode_body

    inputs, as_rows, _ = decode_body(b"[1.0, 2.0, 5.0]\n[1.0, 2.0, 5.0]", JSON)
    assert as_rows and np.asarray(next(iter(inputs.values()))).tolist() == [[1.0, 2.0, 5.0], [1.0, 2.0, 5.0]]
    for broken in (b"[1.0, 2.0]\n[1.0,", b"[1.0]\n2.0", b"[1.0] [2.0]"):  # not one JSON value per line: refused
        with pytest.raises(ServekitError, match="JSON"):
            decode_body(broken, JSON)
