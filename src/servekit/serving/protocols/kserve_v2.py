"""KServe V2 / Open Inference Protocol over HTTP, with Triton's binary tensor extension."""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from servekit._version import __version__
from servekit.errors import ServekitError
from servekit.serving.codecs.params import parse_count
from servekit.serving.codecs.v2 import HEADER_LENGTH, encode_infer_response, parse_infer_request
from servekit.serving.core.service import ModelMetadata
from servekit.serving.protocols.context import AdapterContext
from servekit.serving.protocols.errors import KSERVE_STATUS
from servekit.serving.protocols.http import InferenceHTTPResponse, RequestRunner, json_response, read_body
from servekit.serving.schema import InferenceRequest
from servekit.types import Signature, TensorSpec

EXTENSIONS = ["binary_tensor_data"]
_PLATFORMS = {"onnxruntime_onnx": "onnxruntime_onnx", "sklearn": "sklearn", "python_handler": "python"}


def infer_target(path: str) -> tuple[str, str | None] | None:
    """``(model, version text or None)`` of ``/v2/models/<m>[/versions/<v>]/infer``; None for any other path.

    The one parser of the inference path: the fast path uses it to pick the handler, the handler to read it."""
    if not (path.startswith("/v2/models/") and path.endswith("/infer")):
        return None
    parts = path.split("/")  # '', v2, models, <m>, [versions, <v>,] infer
    if len(parts) == 5 and parts[3]:
        return parts[3], None
    if len(parts) == 7 and parts[4] == "versions" and parts[3] and parts[5]:
        return parts[3], parts[5]
    return None


def _model_version(request: Request) -> tuple[str, int | None]:
    model = request.path_params["model"]
    raw = request.path_params.get("version")
    if raw is None:
        return model, None
    return model, parse_count(raw, "version")


class KServeV2:
    def __init__(self, ctx: AdapterContext) -> None:
        self._ctx = ctx
        self._observed = RequestRunner("kserve_v2", KSERVE_STATUS, ctx.observer, ctx.service.has_model)

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
        return Response(status_code=200 if self._ctx.service.all_ready() else 400)

    async def model_ready(self, request: Request) -> Response:
        try:
            model, version = _model_version(request)
        except ServekitError as exc:
            return json_response({"error": exc.message}, status=KSERVE_STATUS[exc.code])
        return Response(status_code=200 if self._ctx.service.is_ready(model, version) else 400)

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

        return await self._observed.run(request.path_params["model"], "metadata", run, request.scope)

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

        return await self._observed.run(request.path_params["model"], "config", run, request.scope)

    async def infer(self, request: Request) -> Response:
        target = infer_target(request.scope["path"])
        if target is None:  # unreachable through the routes and the fast path; kept as a guard
            raise HTTPException(404)
        model, raw_version = target
        return await self._observed.run(model, "infer", lambda: self._infer(request, model, raw_version), request.scope)

    async def _infer(self, request: Request, model: str, raw_version: str | None) -> Response:
        version = None if raw_version is None else parse_count(raw_version, "version")
        raw = await read_body(request, self._ctx.max_request_bytes)
        lane = self._ctx.large
        parsed = await lane.run(len(raw), parse_infer_request, raw, request.headers.get(HEADER_LENGTH))
        resp = await self._ctx.service.infer(
            InferenceRequest(
                model=model,
                inputs=parsed.inputs,
                version=version,
                signature=parsed.signature,
                outputs=parsed.outputs,
                id=parsed.id,
                timeout=self._ctx.timeout(request.scope),
                alone=self._ctx.alone(),
                disconnected=request.receive,
            )
        )
        header, blobs = await lane.run(len(raw), encode_infer_response, resp, parsed.body)
        if blobs is None:
            return InferenceHTTPResponse(header, "application/json", resp)
        return InferenceHTTPResponse(
            header + blobs,
            "application/octet-stream",
            resp,
            ((HEADER_LENGTH.encode(), b"%d" % len(header)),),
        )
