"""TF Serving's REST API: /v1/models/{m}[/versions/{v}|/labels/{l}][/metadata|:predict|:classify|:regress]."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servekit.errors import invalid, not_found
from servekit.serving.codecs.params import parse_count
from servekit.serving.codecs.tfjson import decode_request, encode_response
from servekit.serving.lifecycle import ServableState
from servekit.serving.protocols.context import AdapterContext
from servekit.serving.protocols.errors import TFSERVING_STATUS
from servekit.serving.protocols.http import JSON_TYPE, InferenceHTTPResponse, RequestRunner, json_response, read_body
from servekit.serving.schema import InferenceRequest
from servekit.types import CLASSIFY_METHOD, PREDICT_METHOD, REGRESS_METHOD, tf_dtype

_PATH = re.compile(
    r"^/v1/models/(?P<model>[^/:]+)"
    r"(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<meta>/metadata)|:(?P<verb>[A-Za-z]+))?/?$",
    re.IGNORECASE,
)
_METHODS = {"predict": PREDICT_METHOD, "classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD}


class _Target:
    def __init__(self, path: str, m: re.Match[str] | None, verb: str) -> None:
        if m is None:
            raise not_found(
                f"unknown path {path!r}; expected /v1/models/<model>[/versions/<n>|/labels/<l>]"
                "[/metadata|:predict|:classify|:regress]"
            )
        self.model = m["model"]
        self.label = m["label"]
        self.meta = bool(m["meta"])
        self.verb = verb
        self.version: int | None = None
        if m["version"] is not None:
            self.version = parse_count(m["version"], "version")
        if self.verb and self.verb not in _METHODS:
            raise not_found(f"unknown method ':{self.verb}'; expected :predict, :classify or :regress")


class TfServingRest:
    def __init__(self, ctx: AdapterContext) -> None:
        self._ctx = ctx
        self._observed = RequestRunner("tfserving", TFSERVING_STATUS, ctx.observer, ctx.service.has_model)

    def routes(self) -> list[BaseRoute]:
        return [Route("/v1/{rest:path}", self.dispatch, methods=["GET", "POST"])]

    async def dispatch(self, request: Request) -> Response:
        path: str = request.scope["path"]
        m = _PATH.match(path)
        model = m["model"] if m is not None else ""
        verb = (m["verb"] or "").lower() if m is not None else ""
        if verb:  # :classify and :regress are APIs of their own in TF Serving's request_latency
            api = verb if verb in _METHODS else "predict"
        else:
            api = "metadata" if path.endswith("/metadata") else "status"
        return await self._observed.run(model, api, lambda: self._handle(request, path, m, verb), request.scope)

    async def _handle(self, request: Request, path: str, m: re.Match[str] | None, verb: str) -> Response:
        t = _Target(path, m, verb)
        if t.verb:
            if request.method != "POST":
                raise invalid(f":{t.verb} needs POST, got {request.method}")
            return await self._infer(request, t)
        if request.method != "GET":
            raise invalid("model status and metadata need GET")
        return self._metadata(t) if t.meta else self._status(t)

    def _status(self, t: _Target) -> Response:
        statuses = self._ctx.service.status(t.model, t.version, t.label)
        return json_response(
            {
                "model_version_status": [
                    {
                        "version": str(s.version),
                        "state": s.state.tf_name,
                        "status": {
                            "error_code": "UNKNOWN" if s.error or s.state is ServableState.ERROR else "OK",
                            "error_message": s.error,
                        },
                    }
                    for s in statuses
                ]
            }
        )

    def _metadata(self, t: _Target) -> Response:
        md = self._ctx.service.metadata(t.model, t.version, t.label)

        def tensors(specs: Any) -> dict[str, Any]:
            return {
                s.name: {
                    "dtype": tf_dtype(s.datatype),
                    "tensor_shape": {"dim": [{"size": str(d), "name": ""} for d in s.shape], "unknown_rank": False},
                    "name": s.name,
                }
                for s in specs
            }

        sigdefs = {
            name: {"inputs": tensors(sig.inputs), "outputs": tensors(sig.outputs), "method_name": sig.method}
            for name, sig in md.signatures.items()
        }
        return json_response(
            {
                "model_spec": {"name": md.model, "signature_name": "", "version": str(md.version)},
                "metadata": {"signature_def": {"signature_def": sigdefs}},
            },
            headers={"x-servekit-model-version": str(md.version)},
        )

    async def _infer(self, request: Request, t: _Target) -> Response:
        raw = await read_body(request, self._ctx.max_request_bytes)
        method = _METHODS[t.verb]
        lane = self._ctx.large
        sig_name, inputs, rows = await lane.run(len(raw), decode_request, raw, method)
        resp = await self._ctx.service.infer(
            InferenceRequest(
                model=t.model,
                inputs=inputs,
                version=t.version,
                label=t.label,
                signature=sig_name,
                method=method,
                timeout=self._ctx.timeout(request.scope),
                alone=self._ctx.alone(),
                disconnected=request.receive,
            )
        )
        return InferenceHTTPResponse(await lane.run(len(raw), encode_response, resp, method, rows), JSON_TYPE, resp)
