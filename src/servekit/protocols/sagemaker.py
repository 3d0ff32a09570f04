"""SageMaker's inference container contract: GET /ping and POST /invocations.

Content handling follows sagemaker-tensorflow-serving-container: JSON bodies holding "instances",
"inputs" or "examples" pass through as TF Serving requests, other JSON becomes {"instances": body}, JSON
Lines and CSV rows become instances; ``application/x-npy`` is one columnar tensor. Handler models
(``inference.py``) get the raw body. Routing uses the ``tfs-model-name``, ``tfs-model-version`` and
``tfs-method`` keys of ``X-Amzn-SageMaker-Custom-Attributes``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy.typing as npt
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servekit.codecs.json import dumps, loads
from servekit.codecs.params import parse_count
from servekit.codecs.sagemaker import (
    JSON,
    decode_body,
    encode_body,
    media_type,
    negotiate_accept,
)
from servekit.codecs.tfjson import (
    decode_examples,
    encode_classify,
    encode_regress,
)
from servekit.errors import ErrorCode, ServekitError, invalid
from servekit.inference.schema import InferenceRequest, InferenceResponse
from servekit.inference.service import pick_signature
from servekit.protocols.context import AdapterContext
from servekit.protocols.errors import SAGEMAKER_STATUS
from servekit.protocols.http import InferenceHTTPResponse, Observed, read_body
from servekit.types import CLASSIFY_METHOD, PREDICT_METHOD, REGRESS_METHOD

_ATTR = re.compile(r"(tfs-[a-z\-]+)=([^,]+)")
_METHODS = {"predict": PREDICT_METHOD, "classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD}


def parse_custom_attributes(header: str) -> dict[str, str]:
    return {k: v.strip() for k, v in _ATTR.findall(header or "")}


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
            version = parse_count(raw_version, "tfs-model-version")
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
        return negotiate_accept(request.headers.get("accept", ""), self._ctx.sagemaker_default_accept)

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
        inputs, rows, signature = self._decode(body, media_type(content_type), model, version, method)
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
        return decode_body(body, media)

    def _encode(self, resp: InferenceResponse, accept: str, method: str, rows: bool) -> Response:
        if method == "classify":
            return InferenceHTTPResponse(dumps(encode_classify(resp)), JSON, resp)
        if method == "regress":
            return InferenceHTTPResponse(dumps(encode_regress(resp)), JSON, resp)
        return InferenceHTTPResponse(encode_body(resp, accept, rows), accept, resp)
