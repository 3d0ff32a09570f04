"""KServe V2 / Open Inference Protocol over HTTP, with Triton's binary tensor extension."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import numpy.typing as npt
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servekit._version import __version__
from servekit.errors import ServekitError, invalid
from servekit.inference.schema import InferenceRequest, InferenceResponse
from servekit.inference.service import ModelMetadata
from servekit.protocols.context import AdapterContext
from servekit.protocols.errors import KSERVE_STATUS
from servekit.protocols.http import InferenceHTTPResponse, Observed, dumps, json_response, loads, read_body
from servekit.types import V2_DATATYPES, Signature, TensorSpec, numpy_dtype, v2_datatype

HEADER_LENGTH = "inference-header-content-length"
EXTENSIONS = ["binary_tensor_data"]
_PLATFORMS = {"onnxruntime_onnx": "onnxruntime_onnx", "sklearn": "sklearn", "python_handler": "python"}


def _model_version(request: Request) -> tuple[str, int | None]:
    model = request.path_params["model"]
    raw = request.path_params.get("version")
    if raw is None:
        return model, None
    if not raw.isdigit():
        raise invalid(f"version {raw!r} is not a non-negative integer")
    return model, int(raw)


def _decode_bytes_tensor(buf: bytes, count: int, name: str) -> npt.NDArray[Any]:
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


def _encode_bytes_tensor(arr: npt.NDArray[Any]) -> bytes:
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
    if datatype not in V2_DATATYPES:
        raise invalid(f"input '{name}': datatype {datatype!r} is not one of {sorted(V2_DATATYPES)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise invalid(f"input '{name}': shape must be a list of non-negative integers, got {shape!r}")
    count = math.prod(shape)
    params = spec.get("parameters") or {}
    size = params.get("binary_data_size") if isinstance(params, dict) else None
    if size is not None:
        if not isinstance(size, int) or size < 0 or offset + size > len(binary):
            raise invalid(
                f"input '{name}': binary_data_size {size!r} runs past the {len(binary)} bytes of "
                "binary data after the JSON header"
            )
        chunk = binary[offset : offset + size]
        if datatype == "BYTES":
            arr = _decode_bytes_tensor(bytes(chunk), count, name)
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
            flat = np.asarray(data, dtype=numpy_dtype(datatype)).ravel()
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


class KServeV2:
    def __init__(self, ctx: AdapterContext) -> None:
        self._ctx = ctx
        self._observed = Observed("kserve_v2", KSERVE_STATUS, ctx.observer, ctx.service.manager.has_model, ctx.capture)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v2", self.server_metadata, methods=["GET"]),
            Route("/v2/health/live", self.live, methods=["GET"]),
            Route("/v2/health/ready", self.ready, methods=["GET"]),
            Route("/v2/models/{model}", self.model_metadata, methods=["GET"]),
            Route("/v2/models/{model}/versions/{version}", self.model_metadata, methods=["GET"]),
            Route("/v2/models/{model}/ready", self.model_ready, methods=["GET"]),
            Route("/v2/models/{model}/versions/{version}/ready", self.model_ready, methods=["GET"]),
            Route("/v2/models/{model}/config", self.model_config, methods=["GET"]),
            Route("/v2/models/{model}/versions/{version}/config", self.model_config, methods=["GET"]),
            Route("/v2/models/{model}/infer", self.infer, methods=["POST"]),
            Route("/v2/models/{model}/versions/{version}/infer", self.infer, methods=["POST"]),
        ]

    async def server_metadata(self, request: Request) -> Response:
        return json_response({"name": "servekit", "version": __version__, "extensions": EXTENSIONS})

    async def live(self, request: Request) -> Response:
        return Response(status_code=200)

    async def ready(self, request: Request) -> Response:
        # Ready means every configured model has a version available; zero models is not ready.
        return Response(status_code=200 if self._ctx.service.manager.all_ready() else 400)

    async def model_ready(self, request: Request) -> Response:
        try:
            model, version = _model_version(request)
        except ServekitError as exc:
            return json_response({"error": exc.message}, status=KSERVE_STATUS[exc.code])
        return Response(status_code=200 if self._ctx.service.manager.is_ready(model, version) else 400)

    def _default_signature(self, request: Request) -> tuple[str, ModelMetadata, Signature]:
        model, version = _model_version(request)
        md = self._ctx.service.metadata(model, version)
        return model, md, md.signatures.get("serving_default") or next(iter(md.signatures.values()))

    async def model_metadata(self, request: Request) -> Response:
        async def run() -> Response:
            model, md, sig = self._default_signature(request)
            return json_response(
                {
                    "name": model,
                    "versions": [str(v) for v in md.versions],
                    "platform": _PLATFORMS.get(md.platform, md.platform),
                    "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in sig.inputs],
                    "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in sig.outputs],
                }
            )

        return await self._observed.run(request.path_params["model"], "metadata", run)

    async def model_config(self, request: Request) -> Response:
        """Triton's model configuration, for clients that ask for it (tritonclient's get_model_config)."""

        async def run() -> Response:
            model, md, sig = self._default_signature(request)

            def tensors(specs: tuple[TensorSpec, ...]) -> list[dict[str, Any]]:
                return [{"name": t.name, "data_type": f"TYPE_{t.datatype}", "dims": list(t.shape)} for t in specs]

            return json_response(
                {
                    "name": model,
                    "platform": _PLATFORMS.get(md.platform, md.platform),
                    "max_batch_size": 0,
                    "input": tensors(sig.inputs),
                    "output": tensors(sig.outputs),
                }
            )

        return await self._observed.run(request.path_params["model"], "config", run)

    async def infer(self, request: Request) -> Response:
        return await self._observed.run(request.path_params["model"], "infer", lambda: self._infer(request), request)

    async def _infer(self, request: Request) -> Response:
        model, version = _model_version(request)
        raw = await read_body(request, self._ctx.max_request_bytes)
        header_len = request.headers.get(HEADER_LENGTH)
        if header_len is not None:
            if not header_len.isdigit() or int(header_len) > len(raw):
                raise invalid(
                    f"Inference-Header-Content-Length {header_len!r} must be an integer no larger "
                    f"than the body ({len(raw)} bytes)"
                )
            n = int(header_len)
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
        resp = await self._ctx.service.infer(
            InferenceRequest(
                model=model,
                inputs=inputs,
                version=version,
                signature=signature if isinstance(signature, str) else None,
                outputs=out_names,
                id=str(req_id) if req_id is not None else "",
                timeout=self._ctx.timeout(request.headers),
            )
        )
        return self._encode(resp, body)

    def _encode(self, resp: InferenceResponse, body: dict[str, Any]) -> Response:
        outputs: list[dict[str, Any]] = []
        blobs: list[bytes] = []
        for name, arr in resp.outputs.items():
            arr = np.ascontiguousarray(arr)
            datatype = v2_datatype(arr.dtype)
            entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(arr.shape)}
            if _wants_binary(body, name):
                blob = (
                    _encode_bytes_tensor(arr)
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

        header = dumps(doc)
        if not blobs:
            return InferenceHTTPResponse(header, "application/json", resp)
        return InferenceHTTPResponse(
            header + b"".join(blobs),
            "application/octet-stream",
            resp,
            ((b"inference-header-content-length", b"%d" % len(header)),),
        )
