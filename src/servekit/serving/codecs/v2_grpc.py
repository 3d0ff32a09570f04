"""KServe V2 / Open Inference Protocol tensors over gRPC (``inference.ModelInferRequest``/``ModelInferResponse``).

Inputs come either in the typed ``contents`` of each tensor or, for all of them, in ``raw_input_contents`` (one
little-endian buffer per input, in order; BYTES as 4-byte length prefixes), as Triton reads them. FP16 has no
typed field and must travel raw. Outputs go out raw (``raw_output_contents``), as Triton answers, so tritonclient
reads them with no per-element conversion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.errors import invalid
from servekit.serving.codecs.v2 import decode_bytes_tensor, encode_bytes_tensor
from servekit.serving.protos.grpc_service_pb2 import InferTensorContents, ModelInferRequest, ModelInferResponse
from servekit.serving.schema import InferenceResponse
from servekit.types import MAX_DIMS, V2_DATATYPES, numpy_dtype, v2_datatype

# The typed field of InferTensorContents each datatype uses.
_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
_ALL_CONTENTS = sorted(set(_CONTENTS.values()))


@dataclass(frozen=True, slots=True)
class ParsedGrpcInfer:
    inputs: dict[str, npt.NDArray[Any]]
    outputs: tuple[str, ...] | None
    signature: str | None
    id: str


def _shape(name: str, dims: Any) -> tuple[int, ...]:
    shape = tuple(int(d) for d in dims)
    if len(shape) > MAX_DIMS:
        raise invalid(f"input '{name}': shape has {len(shape)} dimensions; a tensor has at most {MAX_DIMS}")
    if any(d < 0 for d in shape):
        raise invalid(f"input '{name}': shape must be a list of non-negative integers, got {list(shape)}")
    return shape


def _raw(name: str, datatype: str, shape: tuple[int, ...], buf: bytes) -> npt.NDArray[Any]:
    count = math.prod(shape)
    if datatype == "BYTES":
        return decode_bytes_tensor(buf, count, name).reshape(shape)
    dtype = numpy_dtype(datatype).newbyteorder("<")
    if len(buf) != count * dtype.itemsize:
        raise invalid(
            f"input '{name}': shape {list(shape)} of {datatype} needs {count * dtype.itemsize} bytes, "
            f"raw_input_contents holds {len(buf)}"
        )
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _typed(name: str, datatype: str, shape: tuple[int, ...], contents: InferTensorContents) -> npt.NDArray[Any]:
    field = _CONTENTS.get(datatype)
    if field is None:  # FP16 (and BF16): no typed field in the protocol
        raise invalid(f"input '{name}': {datatype} has no typed contents field; send it in raw_input_contents")
    values = getattr(contents, field)
    count = math.prod(shape)
    if len(values) != count:
        misplaced = next((f for f in _ALL_CONTENTS if f != field and len(getattr(contents, f))), None)
        if not values and misplaced:
            raise invalid(f"input '{name}' is {datatype}, whose values go in contents.{field}, not {misplaced}")
        raise invalid(
            f"input '{name}': shape {list(shape)} holds {count} elements but contents.{field} has {len(values)}"
        )
    if datatype == "BYTES":
        arr = np.empty(count, dtype=object)
        arr[:] = list(values)
        return arr.reshape(shape)
    try:
        return np.array(values, dtype=numpy_dtype(datatype)).reshape(shape)
    except OverflowError:
        raise invalid(f"input '{name}': contents.{field} holds values outside the range of {datatype}") from None


def parse_grpc_infer(request: ModelInferRequest) -> ParsedGrpcInfer:
    if not request.inputs:
        raise invalid("the inference request needs at least one input")
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise invalid(
            f"raw_input_contents holds {len(raw)} buffers for {len(request.inputs)} inputs; send one per input"
        )
    inputs: dict[str, npt.NDArray[Any]] = {}
    for i, tensor in enumerate(request.inputs):
        name = tensor.name
        if not name:
            raise invalid(f"input {i} needs a name")
        if name in inputs:
            raise invalid(f"input '{name}' is given twice")
        if tensor.datatype not in V2_DATATYPES:
            raise invalid(f"input '{name}': datatype {tensor.datatype!r} is not one of {sorted(V2_DATATYPES)}")
        shape = _shape(name, tensor.shape)
        if raw:
            inputs[name] = _raw(name, tensor.datatype, shape, raw[i])
        else:
            inputs[name] = _typed(name, tensor.datatype, shape, tensor.contents)
    outputs = tuple(o.name for o in request.outputs) or None
    sig = request.parameters.get("signature_name")
    signature = sig.string_param if sig is not None and sig.WhichOneof("parameter_choice") == "string_param" else None
    return ParsedGrpcInfer(inputs, outputs, signature or None, request.id)


def encode_grpc_infer(resp: InferenceResponse) -> ModelInferResponse:
    out = ModelInferResponse(model_name=resp.model, model_version=str(resp.version), id=resp.id)
    for name, arr in resp.outputs.items():
        arr = np.ascontiguousarray(arr)
        datatype = v2_datatype(arr.dtype)
        out.outputs.add(name=name, datatype=datatype, shape=arr.shape)
        if datatype == "BYTES":
            out.raw_output_contents.append(encode_bytes_tensor(arr))
        else:
            out.raw_output_contents.append(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
    return out
