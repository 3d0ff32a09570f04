"""KServe V2 / Open Inference Protocol tensors: JSON "inputs" entries and the binary tensor extension.

Pure functions over parsed JSON and bytes, shared by the REST adapter, warmup and the load generator.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.errors import invalid
from servekit.serving.codecs.json import dumps, loads
from servekit.serving.codecs.params import parse_count
from servekit.serving.schema import InferenceResponse
from servekit.types import MAX_DIMS, V2_DATATYPES, numpy_dtype, v2_datatype

HEADER_LENGTH = "inference-header-content-length"


def decode_bytes_tensor(buf: bytes, count: int, name: str) -> npt.NDArray[Any]:
    items: list[bytes] = []
    pos = 0
    while pos < len(buf):
        if pos + 4 > len(buf):
            raise invalid(f"input '{name}': truncated BYTES length prefix at byte {pos}")
        (n,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        if pos + n > len(buf):
            raise invalid(f"input '{name}': BYTES element {len(items)} needs {n} bytes, {len(buf) - pos} left")
        items.append(bytes(buf[pos : pos + n]))
        pos += n
    if len(items) != count:
        raise invalid(f"input '{name}': shape holds {count} elements but the binary data holds {len(items)}")
    arr = np.empty(count, dtype=object)
    arr[:] = items
    return arr


def encode_bytes_tensor(arr: npt.NDArray[Any]) -> bytes:
    parts = []
    for v in arr.ravel().tolist():
        b = v if isinstance(v, bytes) else str(v).encode("utf-8")
        parts.append(struct.pack("<I", len(b)) + b)
    return b"".join(parts)


def _json_integers(data: Any, datatype: str, name: str) -> npt.NDArray[Any]:
    """JSON data for an integer or BOOL tensor, refusing what a cast would silently change (fractions, wrap-around)."""
    dtype = numpy_dtype(datatype)
    given = np.asarray(data).ravel()
    if given.dtype.kind == "b" or given.size == 0:
        return given.astype(dtype)
    if given.dtype.kind not in "iuf":
        raise invalid(f"input '{name}': data does not hold {datatype} values (got {given.dtype.kind!r} elements)")
    if given.dtype.kind == "f" and not (np.all(np.isfinite(given)) and np.all(np.mod(given, 1) == 0)):
        raise invalid(f"input '{name}': data holds fractional values, which {datatype} cannot represent")
    lo, hi = (0, 1) if dtype.kind == "b" else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    if given.min() < lo or given.max() >= hi + 1:  # hi + 1: float64 rounds 2**63 - 1 and 2**64 - 1 up
        raise invalid(f"input '{name}': data holds values outside [{lo}, {hi}], the range of {datatype}")
    return given.astype(dtype)


def _decode_input(spec: Any, binary: memoryview, offset: int) -> tuple[str, npt.NDArray[Any], int]:
    if not isinstance(spec, dict):
        raise invalid('each entry of "inputs" must be an object with name, shape, datatype and data')
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise invalid('each input needs a string "name"')
    datatype, shape = spec.get("datatype"), spec.get("shape")
    if not isinstance(datatype, str) or datatype not in V2_DATATYPES:  # a list or object is unhashable
        raise invalid(f"input '{name}': datatype {datatype!r} is not one of {sorted(V2_DATATYPES)}")
    # JSON true/false parse as Python bools, which are ints: refuse them as dimensions.
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise invalid(f"input '{name}': shape must be a list of non-negative integers, got {shape!r}")
    if len(shape) > MAX_DIMS:
        raise invalid(f"input '{name}': shape has {len(shape)} dimensions; a tensor has at most {MAX_DIMS}")
    count = math.prod(shape)
    params = spec.get("parameters") or {}
    size = params.get("binary_data_size") if isinstance(params, dict) else None
    if size is not None:
        if type(size) is not int or size < 0 or offset + size > len(binary):
            raise invalid(
                f"input '{name}': binary_data_size {size!r} runs past the {len(binary)} bytes of "
                "binary data after the JSON header"
            )
        chunk = binary[offset : offset + size]
        if datatype == "BYTES":
            arr = decode_bytes_tensor(bytes(chunk), count, name)
        else:
            dtype = numpy_dtype(datatype).newbyteorder("<")
            if size != count * dtype.itemsize:
                raise invalid(
                    f"input '{name}': shape {shape} of {datatype} needs {count * dtype.itemsize} bytes, "
                    f"binary_data_size is {size}"
                )
            arr = np.frombuffer(chunk, dtype=dtype)
        return name, arr.reshape(shape), offset + size
    if "data" not in spec:
        raise invalid(f"input '{name}' has neither \"data\" nor a binary_data_size parameter")
    data = spec["data"]
    try:
        if datatype == "BYTES":
            flat = np.array(data, dtype=object).ravel()
        elif numpy_dtype(datatype).kind in "biu":
            flat = _json_integers(data, datatype, name)
        else:
            with np.errstate(over="raise"):  # 65520.0 as FP16 (or 1e300 as FP32) would become inf
                flat = np.asarray(data, dtype=numpy_dtype(datatype)).ravel()
    except FloatingPointError:
        raise invalid(f"input '{name}': data holds values outside the range of {datatype}") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise invalid(f"input '{name}': data does not hold {datatype} values ({exc})") from None
    if flat.size != count:
        raise invalid(f"input '{name}': shape {shape} holds {count} elements but data has {flat.size}")
    return name, flat.reshape(shape), offset


def decode_v2_inputs(specs: list[Any], binary: memoryview | None = None) -> dict[str, npt.NDArray[Any]]:
    """The "inputs" list of a V2 request as named arrays; binary tensors are read from ``binary`` in order."""
    inputs: dict[str, npt.NDArray[Any]] = {}
    offset = 0
    data = binary if binary is not None else memoryview(b"")
    for spec in specs:
        name, arr, offset = _decode_input(spec, data, offset)
        if name in inputs:
            raise invalid(f"input '{name}' is given twice")
        inputs[name] = arr
    return inputs


def _wants_binary(body: dict[str, Any], name: str) -> bool:
    for out in body.get("outputs") or []:
        if isinstance(out, dict) and out.get("name") == name:
            params = out.get("parameters") or {}
            if "binary_data" in params:
                return bool(params["binary_data"])
    params = body.get("parameters") or {}
    return bool(params.get("binary_data_output", False))


@dataclass(frozen=True, slots=True)
class ParsedInfer:
    """A V2 inference request body, decoded: named input tensors and what the caller asked for."""

    body: dict[str, Any]
    inputs: dict[str, npt.NDArray[Any]]
    outputs: tuple[str, ...] | None
    signature: str | None
    id: str


def parse_infer_request(raw: bytes, header_length: str | None) -> ParsedInfer:
    """A V2 request (JSON, or a JSON header followed by binary tensors when ``header_length`` is given)."""
    if header_length is not None:
        n = parse_count(header_length, "Inference-Header-Content-Length")
        if n > len(raw):
            raise invalid(f"Inference-Header-Content-Length {n} must be no larger than the body ({len(raw)} bytes)")
        header, binary = raw[:n], memoryview(raw)[n:]
    else:
        header, binary = raw, memoryview(b"")
    body = loads(header, "inference request JSON")
    if not isinstance(body, dict):
        raise invalid('the inference request must be a JSON object with an "inputs" list')
    specs = body.get("inputs")
    if not isinstance(specs, list) or not specs:
        raise invalid('the inference request needs a non-empty "inputs" list')
    inputs = decode_v2_inputs(specs, binary)
    requested = body.get("outputs")
    out_names: tuple[str, ...] | None = None
    if requested is not None:
        if not isinstance(requested, list) or not all(
            isinstance(o, dict) and isinstance(o.get("name"), str) for o in requested
        ):
            raise invalid('"outputs" must be a list of objects with a "name"')
        out_names = tuple(o["name"] for o in requested)
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise invalid('"parameters" must be an object')
    for out in requested or []:
        if not isinstance(out.get("parameters") or {}, dict):
            raise invalid(f"the parameters of output '{out['name']}' must be an object")
    signature = params.get("signature_name")
    req_id = body.get("id", "")
    return ParsedInfer(
        {k: v for k, v in body.items() if k != "inputs"},  # the rest says how to answer; the data is decoded
        inputs,
        out_names,
        signature if isinstance(signature, str) else None,
        str(req_id) if req_id is not None else "",
    )


def encode_infer_response(resp: InferenceResponse, body: dict[str, Any]) -> tuple[bytes, bytes | None]:
    """The JSON header of a V2 response and, when any output was asked for in binary, the tensors' bytes."""
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name, arr in resp.outputs.items():
        arr = np.ascontiguousarray(arr)
        datatype = v2_datatype(arr.dtype)
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(arr.shape)}
        if _wants_binary(body, name):
            blob = (
                encode_bytes_tensor(arr)
                if datatype == "BYTES"
                else arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
            )
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif datatype == "BYTES":
            entry["data"] = [
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in arr.ravel().tolist()
            ]
        else:
            entry["data"] = arr.ravel()
        outputs.append(entry)
    doc: dict[str, Any] = {"model_name": resp.model, "model_version": str(resp.version), "outputs": outputs}
    if resp.id:
        doc["id"] = resp.id
    return dumps(doc), (b"".join(blobs) if blobs else None)
