"""KServe V2 gRPC tensors: typed contents and raw buffers in, raw out, with the REST codec's refusals."""

from __future__ import annotations

import numpy as np
import pytest

from servekit.errors import ServekitError
from servekit.serving.codecs.v2 import encode_bytes_tensor
from servekit.serving.codecs.v2_grpc import encode_grpc_infer, parse_grpc_infer
from servekit.serving.protos.grpc_service_pb2 import ModelInferRequest
from servekit.serving.schema import InferenceResponse

CASES = [
    ("BOOL", np.array([[True, False]]), "bool_contents"),
    ("INT8", np.array([[-3, 4]], dtype=np.int8), "int_contents"),
    ("INT32", np.array([[1, -2]], dtype=np.int32), "int_contents"),
    ("INT64", np.array([[2**40, -1]], dtype=np.int64), "int64_contents"),
    ("UINT16", np.array([[65535, 0]], dtype=np.uint16), "uint_contents"),
    ("UINT64", np.array([[2**63, 1]], dtype=np.uint64), "uint64_contents"),
    ("FP32", np.array([[0.5, -1.25]], dtype=np.float32), "fp32_contents"),
    ("FP64", np.array([[1e300, 2.0]], dtype=np.float64), "fp64_contents"),
]


@pytest.mark.parametrize(("datatype", "arr", "field"), CASES, ids=[c[0] for c in CASES])
def test_typed_and_raw_inputs_decode_to_the_same_array(datatype: str, arr: np.ndarray, field: str) -> None:
    typed = ModelInferRequest(model_name="m")
    t = typed.inputs.add(name="x", datatype=datatype, shape=arr.shape)
    getattr(t.contents, field).extend(arr.ravel().tolist())
    raw = ModelInferRequest(model_name="m")
    raw.inputs.add(name="x", datatype=datatype, shape=arr.shape)
    raw.raw_input_contents.append(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
    for req in (typed, raw):
        got = parse_grpc_infer(ModelInferRequest.FromString(req.SerializeToString())).inputs["x"]
        assert got.dtype == arr.dtype and got.tolist() == arr.tolist()


def test_bytes_and_fp16() -> None:
    words = np.array([b"a", b"", b"xyz"], dtype=object)
    req = ModelInferRequest()
    req.inputs.add(name="s", datatype="BYTES", shape=[3]).contents.bytes_contents.extend(words.tolist())
    assert parse_grpc_infer(req).inputs["s"].tolist() == words.tolist()
    raw = ModelInferRequest()
    raw.inputs.add(name="s", datatype="BYTES", shape=[3])
    raw.inputs.add(name="h", datatype="FP16", shape=[2])
    raw.raw_input_contents.extend([encode_bytes_tensor(words), np.array([1.5, -2], dtype="<f2").tobytes()])
    parsed = parse_grpc_infer(raw).inputs
    assert parsed["s"].tolist() == words.tolist() and parsed["h"].tolist() == [1.5, -2.0]
    typed_half = ModelInferRequest()
    typed_half.inputs.add(name="h", datatype="FP16", shape=[1]).contents.fp32_contents.append(1.0)
    with pytest.raises(ServekitError, match="send it in raw_input_contents"):
        parse_grpc_infer(typed_half)


def test_refusals_name_the_input_and_the_fix() -> None:
    req = ModelInferRequest()
    req.inputs.add(name="x", datatype="FP32", shape=[2]).contents.int_contents.extend([1, 2])
    with pytest.raises(ServekitError, match=r"values go in contents\.fp32_contents, not int_contents"):
        parse_grpc_infer(req)
    short = ModelInferRequest()
    short.inputs.add(name="x", datatype="FP32", shape=[2])
    short.raw_input_contents.append(b"\0" * 4)
    with pytest.raises(ServekitError, match="needs 8 bytes, raw_input_contents holds 4"):
        parse_grpc_infer(short)
    with pytest.raises(ServekitError, match="at least one input"):
        parse_grpc_infer(ModelInferRequest())


def test_outputs_go_out_raw_with_their_metadata() -> None:
    resp = InferenceResponse("m", 3, "serving_default", {"p": np.array([[0.25, 0.75]], dtype=np.float32)}, id="r1")
    out = encode_grpc_infer(resp)
    assert (out.model_name, out.model_version, out.id) == ("m", "3", "r1")
    (meta,) = out.outputs
    assert (meta.name, meta.datatype, list(meta.shape)) == ("p", "FP32", [1, 2])
    assert np.frombuffer(out.raw_output_contents[0], dtype="<f4").tolist() == [0.25, 0.75]
