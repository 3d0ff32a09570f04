"""KServe V2 / Open Inference Protocol over gRPC (``inference.GRPCInferenceService``, Triton's superset): health,
metadata, ModelInfer, Triton's ModelConfig and RepositoryIndex, on the same inference service as the REST front."""

from __future__ import annotations

from typing import Any

from servekit._version import __version__
from servekit.errors import ErrorCode, ServekitError
from servekit.serving.codecs.params import parse_count
from servekit.serving.codecs.v2_grpc import encode_grpc_infer, parse_grpc_infer
from servekit.serving.core.service import ModelMetadata
from servekit.serving.protocols.grpc.runner import Ctx, GrpcContext, GrpcRunner
from servekit.serving.protos import grpc_service_pb2 as pb
from servekit.serving.protos import grpc_service_pb2_grpc, model_config_pb2
from servekit.serving.schema import InferenceRequest
from servekit.types import DEFAULT_SIGNATURE, Signature

PROTOCOL = "kserve_v2_grpc"
_PLATFORMS = {"onnxruntime_onnx": "onnxruntime_onnx", "sklearn": "sklearn", "python_handler": "python"}


def _version(raw: str) -> int | None:
    return parse_count(raw, "version") if raw else None


def _default_signature(md: ModelMetadata) -> Signature:
    return md.signatures.get(DEFAULT_SIGNATURE) or next(iter(md.signatures.values()))


class KServeV2Grpc(grpc_service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, ctx: GrpcContext) -> None:
        self._ctx = ctx
        self._runner = GrpcRunner(PROTOCOL, ctx)

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Ctx) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Ctx) -> pb.ServerReadyResponse:
        # Ready means every configured model has a version available; zero models is not ready (as REST).
        return pb.ServerReadyResponse(ready=self._ctx.service.all_ready())

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Ctx) -> pb.ModelReadyResponse:
        async def run() -> tuple[pb.ModelReadyResponse, str]:
            ready = self._ctx.service.is_ready(request.name, _version(request.version))
            return pb.ModelReadyResponse(ready=ready), request.version

        return await self._runner.run("", "ready", context, run)

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Ctx) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="servekit", version=__version__, extensions=[])

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Ctx) -> pb.ModelMetadataResponse:
        async def run() -> tuple[pb.ModelMetadataResponse, str]:
            md = self._ctx.service.metadata(request.name, _version(request.version))
            sig = _default_signature(md)
            out = pb.ModelMetadataResponse(
                name=request.name,
                versions=[str(v) for v in md.versions],
                platform=_PLATFORMS.get(md.platform, md.platform),
            )
            for t in sig.inputs:
                out.inputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
            for t in sig.outputs:
                out.outputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
            return out, str(md.version)

        return await self._runner.run(request.name, "metadata", context, run)

    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Ctx) -> pb.ModelConfigResponse:
        """Triton's model configuration, for clients that ask for it (tritonclient's get_model_config)."""

        async def run() -> tuple[pb.ModelConfigResponse, str]:
            md = self._ctx.service.metadata(request.name, _version(request.version))
            sig = _default_signature(md)
            out = pb.ModelConfigResponse()
            cfg = out.config
            cfg.name = request.name
            cfg.platform = _PLATFORMS.get(md.platform, md.platform)
            for t in sig.inputs:
                cfg.input.add(name=t.name, data_type=_triton_type(t.datatype), dims=t.shape)
            for t in sig.outputs:
                cfg.output.add(name=t.name, data_type=_triton_type(t.datatype), dims=t.shape)
            return out, str(md.version)

        return await self._runner.run(request.name, "config", context, run)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Ctx) -> pb.ModelInferResponse:
        async def run() -> tuple[pb.ModelInferResponse, str]:
            version = _version(request.model_version)
            parsed = parse_grpc_infer(request)
            resp = await self._ctx.service.infer(
                InferenceRequest(
                    model=request.model_name,
                    inputs=parsed.inputs,
                    version=version,
                    signature=parsed.signature,
                    outputs=parsed.outputs,
                    id=parsed.id,
                    timeout=self._ctx.timeout(context),
                )
            )
            return encode_grpc_infer(resp), str(resp.version)

        return await self._runner.run(request.model_name, "infer", context, run)

    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Ctx) -> pb.RepositoryIndexResponse:
        """The configured models and their versions' states (``ready`` filters to those serving)."""

        async def run() -> tuple[pb.RepositoryIndexResponse, str]:
            out = pb.RepositoryIndexResponse()
            service = self._ctx.service
            for model in sorted(service.model_names):
                for s in service.status(model):
                    state = "READY" if s.state.value == "AVAILABLE" else s.state.value
                    if request.ready and state != "READY":
                        continue
                    out.models.add(name=model, version=str(s.version), state=state, reason=s.error)
            return out, ""

        return await self._runner.run("", "repository_index", context, run)

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Ctx
    ) -> pb.RepositoryModelLoadResponse:
        return await self._runner.run("", "repository_load", context, self._no_explicit_control)

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Ctx
    ) -> pb.RepositoryModelUnloadResponse:
        return await self._runner.run("", "repository_unload", context, self._no_explicit_control)

    async def _no_explicit_control(self) -> tuple[Any, str]:
        # The model repository decides what is served (version policies, the config file): the same as the REST
        # front, which has no load/unload either. TF Serving's HandleReloadConfigRequest swaps the model list.
        raise ServekitError(
            ErrorCode.UNIMPLEMENTED,
            "servekit serves what its model config and version policies say; change the model list with the "
            "config file (--model_config_file_poll_wait_seconds) or TF Serving's HandleReloadConfigRequest",
        )


def _triton_type(datatype: str) -> int:
    name = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    return int(model_config_pb2.DataType.Value(name))
