import base64
import struct

import numpy as np
import pytest

from servekit.codecs.json import loads
from servekit.codecs.sagemaker import decode_csv
from servekit.codecs.tfjson import decode_instances, decode_predict, encode_predict, to_array
from servekit.codecs.v2 import decode_bytes_tensor as _decode_bytes_tensor
from servekit.codecs.v2 import encode_bytes_tensor as _encode_bytes_tensor
from servekit.errors import ServekitError
from servekit.inference.schema import ONLY_INPUT, InferenceResponse
from servekit.protocols.sagemaker import parse_custom_attributes


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

    from servekit.codecs.sagemaker import decode_npy

    buf = io_module.BytesIO()
    np.save(buf, np.zeros(3))
    body = buf.getvalue().replace(b"(3,)", b"(1000000000000,)")
    with pytest.raises(ServekitError, match="declares shape"):
        decode_npy(body)
    assert decode_npy(buf.getvalue()).tolist() == [0.0, 0.0, 0.0]
