"""SageMaker's inference container contract: GET /ping and POST /invocations.

Content handling follows sagemaker-tensorflow-serving-container: JSON bodies holding "instances",
"inputs" or "examples" pass through as TF Serving requests, other JSON becomes {"instances": body}, JSON
Lines and CSV rows become instances; ``application/x-npy`` is one columnar tensor. Handler models
(``inference.py``) get the raw body. Routing uses the ``tfs-model-name``, ``tfs-model-version`` and
``tfs-method`` keys of ``X-Amzn-SageMaker-Custom-Attributes``.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servekit.errors import ErrorCode, ServekitError, invalid
from servekit.inference.schema import ONLY_INPUT, InferenceRequest, InferenceResponse
from servekit.inference.service import pick_signature
from servekit.protocols.context import AdapterContext
from servekit.protocols.errors import SAGEMAKER_STATUS
from servekit.protocols.http import InferenceHTTPResponse, Observed, dumps, loads, read_body
from servekit.protocols.tfjson import (
    decode_examples,
    decode_instances,
    decode_predict,
    encode_classify,
    encode_predict,
    encode_regress,
)
from servekit.types import CLASSIFY_METHOD, PREDICT_METHOD, REGRESS_METHOD

_ATTR = re.compile(r"(tfs-[a-z\-]+)=([^,]+)")
_METHODS = {"predict": PREDICT_METHOD, "classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD}
JSON, JSONLINES, CSV, NPY = "application/json", "application/jsonlines", "text/csv", "application/x-npy"
_JSONLINES_ALIASES = {"application/jsonlines", "application/jsonl", "application/x-jsonlines", "application/jsons"}
ACCEPTS = (JSON, JSONLINES, CSV, NPY)


def _media(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def parse_custom_attributes(header: str) -> dict[str, str]:
    return {k: v.strip() for k, v in _ATTR.findall(header or "")}


def decode_csv(body: bytes) -> npt.NDArray[Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(f"the CSV body is not UTF-8 text (byte {exc.start})") from None
    rows: list[list[float]] = []
    width = -1
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or all(not c.strip() for c in row):
            continue
        try:
            values = [float(c) for c in row]
        except ValueError:
            bad = next(c for c in row if not _is_float(c))
            raise invalid(f"CSV line {lineno}: {bad!r} is not a number") from None
        if width >= 0 and len(values) != width:
            raise invalid(f"CSV line {lineno} has {len(values)} columns; line 1 has {width}")
        width = len(values)
        rows.append(values)
    if not rows:
        raise invalid("the CSV body holds no rows")
    return np.asarray(rows, dtype=np.float64)


def _is_float(c: str) -> bool:
    try:
        float(c)
    except ValueError:
        return False
    return True


def decode_jsonlines(body: bytes) -> list[Any]:
    values = []
    for lineno, line in enumerate(body.splitlines(), start=1):
        if line.strip():
            values.append(loads(line, f"JSON Lines body (line {lineno})"))
    if not values:
        raise invalid("the JSON Lines body holds no records")
    return values


def decode_npy(body: bytes) -> npt.NDArray[Any]:
    try:
        arr = np.load(io.BytesIO(body), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise invalid(f"the body is not a valid .npy array: {exc}") from None
    if not isinstance(arr, np.ndarray):
        raise invalid("the body must be a single .npy array, not an .npz archive")
    return arr


def _rows(resp: InferenceResponse) -> list[Any]:
    """One entry per example, for the line-oriented Accept types."""
    doc = encode_predict(resp, rows=True)["predictions"]
    return list(doc.tolist() if isinstance(doc, np.ndarray) else doc)


class SageMaker:
    def __init__(self, ctx: AdapterContext) -> None:
        self._ctx = ctx
        self._observed = Observed(
            "sagemaker", SAGEMAKER_STATUS, ctx.observer, ctx.service.manager.has_model, ctx.capture
        )

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/ping", self.ping, methods=["GET"]),
            Route("/invocations", self.invocations, methods=["POST"]),
        ]

    async def ping(self, request: Request) -> Response:
        return Response(status_code=200 if self._ctx.service.manager.all_ready() else 503)

    def _route(self, request: Request) -> tuple[str, int | None, str]:
        attrs = parse_custom_attributes(request.headers.get("x-amzn-sagemaker-custom-attributes", ""))
        names = self._ctx.service.manager.model_names
        model = attrs.get("tfs-model-name")
        if model is None:
            if len(names) != 1:
                raise invalid(
                    "Invocation request does not contain model name: set tfs-model-name=<model> in "
                    f"X-Amzn-SageMaker-Custom-Attributes; models: {', '.join(names) or 'none'}"
                )
            model = names[0]
        version: int | None = None
        raw_version = attrs.get("tfs-model-version")
        if raw_version is not None:
            if not raw_version.isdigit():
                raise invalid(f"tfs-model-version {raw_version!r} is not a non-negative integer")
            version = int(raw_version)
        method = attrs.get("tfs-method", "predict")
        if method not in _METHODS:
            raise invalid(f"tfs-method {method!r} is not one of predict, classify, regress")
        return model, version, method

    async def invocations(self, request: Request) -> Response:
        try:
            model = self._route(request)[0]
        except ServekitError:
            model = ""
        return await self._observed.run(model, "invocations", lambda: self._invoke(request), request)

    def _accept(self, request: Request) -> str:
        raw = request.headers.get("accept", "")
        for part in raw.split(","):
            media = _media(part)
            if media in ("", "*/*"):
                return self._ctx.sagemaker_default_accept
            if media in _JSONLINES_ALIASES:
                return JSONLINES
            if media in ACCEPTS:
                return media
        if not raw.strip():
            return self._ctx.sagemaker_default_accept
        raise ServekitError(
            ErrorCode.NOT_ACCEPTABLE, f"Accept {raw!r} is not supported; supported: {', '.join(ACCEPTS)}"
        )

    async def _invoke(self, request: Request) -> Response:
        model, version, method = self._route(request)
        body = await read_body(request, self._ctx.max_request_bytes)
        content_type = request.headers.get("content-type", JSON)
        accept_header = request.headers.get("accept", "") or self._ctx.sagemaker_default_accept
        raw = await self._ctx.service.invoke_raw(model, version, body, content_type, accept_header)
        if raw is not None:
            out, ctype, used = raw
            return Response(out, media_type=ctype, headers={"x-servekit-model-version": str(used)})
        accept = self._accept(request)
        inputs, rows, signature = self._decode(body, _media(content_type), model, version, method)
        resp = await self._ctx.service.infer(
            InferenceRequest(
                model=model,
                inputs=inputs,
                version=version,
                signature=signature,
                method=_METHODS[method],
                timeout=self._ctx.timeout(request.headers),
            )
        )
        return self._encode(resp, accept, method, rows)

    def _decode(
        self, body: bytes, media: str, model: str, version: int | None, method: str
    ) -> tuple[dict[str, npt.NDArray[Any]], bool, str | None]:
        if method != "predict":
            if media != JSON:
                raise ServekitError(
                    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                    f'tfs-method={method} takes application/json bodies with "examples"',
                )
            doc = loads(body)
            md = self._ctx.service.metadata(model, version)
            sig_name = doc.get("signature_name") if isinstance(doc, dict) else None
            sig = pick_signature(
                md.signatures, sig_name if isinstance(sig_name, str) else None, _METHODS[method], model
            )
            return decode_examples(doc, sig), True, sig.name
        if media == JSON:
            doc = loads(body)
            if isinstance(doc, dict) and ("instances" in doc or "inputs" in doc):
                sig_name = doc.get("signature_name")
                inputs, rows = decode_predict(doc, ())
                return inputs, rows, sig_name if isinstance(sig_name, str) else None
            if isinstance(doc, dict):
                raise invalid('a JSON object body must hold "instances" or "inputs"; send a bare list for rows')
            return decode_instances(doc if isinstance(doc, list) else [doc], ()), True, None
        if media in _JSONLINES_ALIASES:
            return decode_instances(decode_jsonlines(body), ()), True, None
        if media == CSV:
            return {ONLY_INPUT: decode_csv(body)}, True, None
        if media == NPY:
            return {ONLY_INPUT: decode_npy(body)}, False, None
        raise ServekitError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"Content-Type {media!r} is not supported; send application/json, "
            "application/jsonlines, text/csv or application/x-npy",
        )

    def _encode(self, resp: InferenceResponse, accept: str, method: str, rows: bool) -> Response:
        if method == "classify":
            return InferenceHTTPResponse(dumps(encode_classify(resp)), JSON, resp)
        if method == "regress":
            return InferenceHTTPResponse(dumps(encode_regress(resp)), JSON, resp)
        if accept == JSON:
            return InferenceHTTPResponse(dumps(encode_predict(resp, rows)), JSON, resp)
        if accept == JSONLINES:
            lines = b"".join(orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for r in _rows(resp))
            return InferenceHTTPResponse(lines, JSONLINES, resp)
        if len(resp.outputs) != 1:
            raise ServekitError(
                ErrorCode.NOT_ACCEPTABLE,
                f"{accept} can carry one output, the model returned {len(resp.outputs)}; ask for application/json",
            )
        arr = next(iter(resp.outputs.values()))
        if accept == NPY:
            bio = io.BytesIO()
            np.save(bio, arr if arr.dtype != object else arr.astype(str), allow_pickle=False)
            return InferenceHTTPResponse(bio.getvalue(), NPY, resp)
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        for row in np.atleast_1d(arr).tolist():
            writer.writerow(row if isinstance(row, list) else [row])
        return InferenceHTTPResponse(buf.getvalue().encode(), CSV, resp)
