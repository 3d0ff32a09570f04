"""The gRPC front: one ``grpc.aio`` server beside REST, in the same process and event loop, on the same serving
core (models, batchers, metrics, capture). It serves TF Serving's PredictionService and ModelService, KServe V2's
GRPCInferenceService, the ``grpc.health.v1`` health checks and server reflection.

It is handed the core the composition root built (``servekit.launch.serve``) and runs as one of the fronts of
:class:`servekit.serving.protocols.lifespan.CoreLifespan`: bound before the core starts, serving once the REST app's
startup has run (models loaded when the server waits for them), stopped before the core stops."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from servekit.config.grpc import GrpcConfig
from servekit.config.models import ModelConfig
from servekit.errors import ConfigError
from servekit.serving.core.assembly import ServingCore
from servekit.serving.protocols.grpc.kserve import KServeV2Grpc
from servekit.serving.protocols.grpc.runner import GrpcContext
from servekit.serving.protocols.grpc.tfserving import TfServingGrpc
from servekit.serving.protos import _pool, grpc_service_pb2, grpc_service_pb2_grpc
from servekit.serving.protos.tensorflow_serving.apis import (
    model_service_pb2,
    model_service_pb2_grpc,
    prediction_service_pb2,
    prediction_service_pb2_grpc,
)

log = logging.getLogger(__name__)

SERVICES = (
    prediction_service_pb2.DESCRIPTOR.services_by_name["PredictionService"].full_name,
    model_service_pb2.DESCRIPTOR.services_by_name["ModelService"].full_name,
    grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name,
)


def _pool_with(*modules: Any) -> Any:
    """servekit's descriptor pool, also holding the health and reflection protos so reflection can describe them
    (they live in protobuf's default pool, which servekit's generated modules stay out of)."""
    pool = _pool.Default()
    for module in modules:
        try:
            pool.FindFileByName(module.DESCRIPTOR.name)
        except KeyError:
            pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    return pool


class GrpcFront:
    def __init__(self, core: ServingCore, config: GrpcConfig) -> None:
        self.config = config
        self._core = core
        server_config = core.config
        self._ctx = GrpcContext(
            core.service,
            core.metrics,
            request_timeout_s=server_config.request_timeout_ms / 1e3 if server_config.request_timeout_ms else None,
        )
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self.port = 0

    async def _reload(self, models: tuple[ModelConfig, ...]) -> None:
        await self._core.reload_models(models)

    def bind(self) -> int:
        """Create the server and bind its port (inside the event loop that will run it); the port bound."""
        limit = self.config.max_message_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.so_reuseport", 1 if self.config.reuse_port else 0),
            ]
        )
        tf = TfServingGrpc(self._ctx, self._reload)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(tf, server)  # type: ignore[no-untyped-call]
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(tf, server)  # type: ignore[no-untyped-call]
        kserve = KServeV2Grpc(self._ctx)
        grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(kserve, server)  # type: ignore[no-untyped-call]
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        names = (*SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(names, server, pool=_pool_with(health_pb2, reflection_pb2))
        try:
            self.port = server.add_insecure_port(self.config.address)
        except RuntimeError as exc:  # grpc says only "Failed to bind"; say which address and why it may be
            raise ConfigError(f"cannot listen for gRPC on {self.config.address} ({exc}): is the port in use?") from None
        self._server = server
        return self.port

    async def start(self) -> None:
        if self._server is None:
            self.bind()
        assert self._server is not None
        await self._server.start()
        for name in ("", *SERVICES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("servekit gRPC listening on %s:%d", self.config.host, self.port)

    async def stop(self) -> None:
        if self._server is None:
            return
        await self._health.enter_graceful_shutdown()
        await self._server.stop(self.config.grace_seconds)
        self._server = None
