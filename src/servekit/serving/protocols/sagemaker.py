"""SageMaker's inference container contract: GET /ping and POST /invocations.

Content handling follows sagemaker-tensorflow-serving-container: JSON bodies holding "instances",
"inputs" or "examples" pass through as TF Serving requests, other JSON becomes {"instances": body}, JSON
Lines and CSV rows become instances; ``application/x-npy`` is one columnar tensor. Handler models
(``inference.py``) get the raw body. Routing uses the ``tfs-model-name``, ``tfs-model-version`` and
``tfs-method`` keys of ``X-Amzn-SageMaker-Custom-Attributes``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servekit.errors import ErrorCode, ServekitError, invalid
from servekit.serving.codecs.json import dumps
from servekit.serving.codecs.params import parse_count
from servekit.serving.codecs.payloads import InvocationPayload
from servekit.serving.codecs.sagemaker import (
    JSON,
    decode_body,
    encode_body,
    media_type,
    negotiate_accept,
)
from servekit.serving.codecs.tfjson import (
    encode_classify,
    encode_regress,
)
from servekit.serving.core.multi_model import AlreadyLoaded, InsufficientMemory, MultiModelHost
from servekit.serving.protocols.context import AdapterContext
from servekit.serving.protocols.errors import SAGEMAKER_STATUS
from servekit.serving.protocols.http import (
    RETRY_AFTER_SECONDS,
    InferenceHTTPResponse,
    RequestRunner,
    StreamedHTTPResponse,
    json_response,
    read_body,
)
from servekit.serving.schema import InferenceRequest, RawBody
from servekit.types import CLASSIFY_METHOD, PREDICT_METHOD, REGRESS_METHOD

INFERENCE_ID_HEADER = "x-amzn-sagemaker-inference-id"  # SageMaker's InferenceId, recorded with captured data
_ATTR = re.compile(r"(tfs-[a-z\-]+)=([^,]+)")
_METHODS = {"predict": PREDICT_METHOD, "classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD}


def parse_custom_attributes(header: str) -> dict[str, str]:
    return {k: v.strip() for k, v in _ATTR.findall(header or "")}


class SageMaker:
    def __init__(self, ctx: AdapterContext) -> None:
        self._ctx = ctx
        self._observed = RequestRunner("sagemaker", SAGEMAKER_STATUS, ctx.observer, ctx.service.has_model)

    def routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [
            Route("/ping", self.ping, methods=["GET"]),
            Route("/invocations", self.invocations, methods=["POST"]),
        ]
        if self._ctx.multi_model is not None:
            mme = MultiModelRoutes(self._ctx.multi_model, self)
            routes += [
                Route("/models", mme.load, methods=["POST"]),
                Route("/models", mme.listing, methods=["GET"]),
                Route("/models/{name}", mme.get, methods=["GET"]),
                Route("/models/{name}", mme.unload, methods=["DELETE"]),
                Route("/models/{name}/invoke", mme.invoke, methods=["POST"]),
            ]
        return routes

    async def ping(self, request: Request) -> Response:
        if self._ctx.multi_model is not None or self._ctx.service.all_ready():  # a multi-model host starts empty
            return Response(status_code=200)
        return Response(status_code=503, headers={"Retry-After": RETRY_AFTER_SECONDS})

    def _route(self, request: Request, default_model: str | None = None) -> tuple[str, int | None, str]:
        attrs = parse_custom_attributes(request.headers.get("x-amzn-sagemaker-custom-attributes", ""))
        model = default_model or attrs.get("tfs-model-name")
        if model is None:
            names = self._ctx.service.model_names
            if len(names) != 1:
                raise invalid(
                    "Invocation request does not contain model name: set tfs-model-name=<model> in "
                    f"X-Amzn-SageMaker-Custom-Attributes; models: {', '.join(names) or 'none'}"
                )
            model = names[0]
        raw_version = attrs.get("tfs-model-version")
        version = None if raw_version is None else parse_count(raw_version, "tfs-model-version")
        method = attrs.get("tfs-method", "predict")
        if method not in _METHODS:
            raise invalid(f"tfs-method {method!r} is not one of predict, classify, regress")
        return model, version, method

    async def invocations(self, request: Request) -> Response:
        try:
            target = self._route(request)
        except ServekitError as exc:
            return await self._observed.run("", "invocations", _raiser(exc), request.scope)
        return await self._observed.run(target[0], "invocations", lambda: self._invoke(request, *target), request.scope)

    async def invoke_model(self, request: Request, model: str) -> Response:
        """``/invocations`` for one named model (the multi-model ``/models/{name}/invoke``); the custom attributes
        may still pick a version and a method."""
        try:
            _, version, verb = self._route(request, default_model=model)
        except ServekitError as exc:
            return await self._observed.run(model, "invocations", _raiser(exc), request.scope)
        return await self._observed.run(
            model, "invocations", lambda: self._invoke(request, model, version, verb), request.scope
        )

    async def _invoke(self, request: Request, model: str, version: int | None, verb: str) -> Response:
        body = await read_body(request, self._ctx.max_request_bytes)
        content_type = request.headers.get("content-type", JSON)
        accept_header = request.headers.get("accept", "") or self._ctx.sagemaker_default_accept
        method = _METHODS[verb]
        payload = InvocationPayload(body, media_type(content_type), method, verb)
        lane = self._ctx.large
        if lane.is_large(len(body)) and method == PREDICT_METHOD:
            try:
                payload.preset(await lane.run(len(body), decode_body, body, payload.media))
            except ServekitError as exc:  # kept for a tensor model; a model that takes raw bodies never sees it
                payload.preset(exc)
        resp = await self._ctx.service.infer(
            InferenceRequest(
                model=model,
                inputs=payload,
                version=version,
                method=method,
                timeout=self._ctx.timeout(request.scope),
                alone=self._ctx.alone(),
                disconnected=request.receive,
                raw=RawBody(body, content_type, accept_header),
                id=request.headers.get(INFERENCE_ID_HEADER, "")[:64],
            )
        )
        if resp.raw is not None:
            out, ctype = resp.raw
            lane.answered(len(body))
            if not isinstance(out, bytes):  # a handler that yields: each piece sent as it comes (chunked)
                return StreamedHTTPResponse(out, ctype, resp.version, "sagemaker", model)
            return InferenceHTTPResponse(out, ctype, resp)
        if method == CLASSIFY_METHOD:
            return InferenceHTTPResponse(dumps(encode_classify(resp)), JSON, resp)
        if method == REGRESS_METHOD:
            return InferenceHTTPResponse(dumps(encode_regress(resp)), JSON, resp)
        accept = negotiate_accept(request.headers.get("accept", ""), self._ctx.sagemaker_default_accept)
        return InferenceHTTPResponse(await lane.run(len(body), encode_body, resp, accept, payload.rows), accept, resp)


class MultiModelRoutes:
    """SageMaker's multi-model container API over a :class:`MultiModelHost`: load (``POST /models``), list, get,
    unload, and invoke a loaded model. Statuses as the contract says: 409 already loaded, 507 no memory for it,
    404 unknown."""

    _PAGE = 100

    def __init__(self, host: MultiModelHost, sagemaker: SageMaker) -> None:
        self._host = host
        self._sagemaker = sagemaker

    async def load(self, request: Request) -> Response:
        try:
            body = await read_body(request, 64 * 1024)
        except ServekitError as exc:  # too large, or cut off: an answer, not a traceback (no runner wraps this)
            return _mme_error(SAGEMAKER_STATUS.get(exc.code, 400), exc.message)
        try:
            doc = json.loads(body)
        except ValueError as exc:
            return _mme_error(400, f"the body must be JSON {{'model_name': ..., 'url': ...}}: {exc}")
        if (
            not isinstance(doc, dict)
            or not isinstance(doc.get("model_name"), str)
            or not isinstance(doc.get("url"), str)
        ):
            return _mme_error(400, "the body must be a JSON object with string fields model_name and url")
        try:
            # "pinned" is servekit's: a preloaded model the host never unloads to make room
            report = await self._host.load(doc["model_name"], doc["url"], pinned=doc.get("pinned") is True)
        except AlreadyLoaded as exc:
            return _mme_error(409, exc.message)
        except InsufficientMemory as exc:
            return _mme_error(507, exc.message)
        except ServekitError as exc:
            status = {ErrorCode.NOT_FOUND: 404, ErrorCode.INVALID_ARGUMENT: 400}.get(exc.code, 500)
            return _mme_error(status, exc.message)
        return json_response(
            {
                "message": f"model {report.name} loaded",
                "loadSeconds": report.load_s,
                "footprintBytes": report.footprint_bytes,
                "evicted": list(report.evicted),
                "unloadSeconds": list(report.unload_s),
            }
        )

    async def listing(self, request: Request) -> Response:
        models = self._host.listing()
        token = request.query_params.get("next_page_token")
        start = 0
        if token:
            try:
                start = parse_count(token, "next_page_token")
            except ServekitError as exc:
                return _mme_error(400, exc.message)
        page = models[start : start + self._PAGE]
        out: dict[str, object] = {"models": [{"modelName": m.name, "modelUrl": m.url} for m in page]}
        if start + self._PAGE < len(models):
            out["nextPageToken"] = str(start + self._PAGE)
        return json_response(out)

    async def get(self, request: Request) -> Response:
        try:
            m = self._host.get(request.path_params["name"])
        except ServekitError as exc:
            return _mme_error(404, exc.message)
        return json_response({"modelName": m.name, "modelUrl": m.url})

    async def unload(self, request: Request) -> Response:
        try:
            seconds = await self._host.unload(request.path_params["name"])
        except ServekitError as exc:
            return _mme_error(404, exc.message)
        return json_response({"message": f"model {request.path_params['name']} unloaded", "unloadSeconds": seconds})

    async def invoke(self, request: Request) -> Response:
        name = request.path_params["name"]
        try:
            self._host.get(name)
        except ServekitError as exc:
            return _mme_error(404, exc.message)
        with self._host.using(name):  # no await since the check: it is still loaded, and now never evicted
            return await self._sagemaker.invoke_model(request, name)


def _mme_error(status: int, message: str) -> Response:
    return json_response({"error": message}, status=status)


def _raiser(exc: ServekitError) -> Callable[[], Awaitable[Response]]:
    async def fail() -> Response:
        raise exc

    return fail
