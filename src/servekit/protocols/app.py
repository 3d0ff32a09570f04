"""Composes the serving core and mounts every protocol adapter on one Starlette app."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from servekit._utils.threads import ModelThreads
from servekit.batching.scheduler import BatchScheduler
from servekit.capture.sink import CaptureWriter
from servekit.config.loading import load_model_config_file
from servekit.config.models import BatchingConfig, ModelConfig, ServerConfig
from servekit.inference.service import InferenceService
from servekit.observability.metrics import CONTENT_TYPE, Metrics
from servekit.protocols.context import AdapterContext
from servekit.protocols.http import json_response
from servekit.protocols.kserve_v2 import KServeV2
from servekit.protocols.sagemaker import SageMaker
from servekit.protocols.tfserving_rest import TfServingRest
from servekit.protocols.warmup import run_warmup
from servekit.repository.source import RepositorySource
from servekit.runtime.base import Servable
from servekit.runtime.registry import RuntimeRegistry
from servekit.serving.manager import ModelManager
from servekit.serving.state import ServableState
from servekit.storage import Storage

log = logging.getLogger(__name__)


class ServingCore:
    """Storage, runtimes, manager, source and inference service wired together for one server."""

    def __init__(self, config: ServerConfig, registry: RuntimeRegistry | None = None) -> None:
        self.config = config
        self.storage = Storage()
        self.registry = registry or RuntimeRegistry()
        self.metrics = Metrics(config.metrics_multiprocess_dir)
        self.manager = ModelManager(
            self._load,
            max_load_retries=config.max_num_load_retries,
            retry_interval=config.load_retry_interval_seconds,
            observer=self,
            before_unload=self._drain_batches,
        )
        self.threads = ModelThreads(config.num_inference_threads, name="servekit-infer")
        self.batching = BatchScheduler(self.threads, self._batching_for, observer=self.metrics)
        self.service = InferenceService(self.manager, self.threads, self.batching, observer=self.metrics)
        self._background: set[asyncio.Task[None]] = set()
        self._ready: asyncio.Event | None = None
        self.capture = CaptureWriter(config.capture) if config.capture and config.capture.enabled else None
        if self.capture is not None:
            self.metrics.watch_capture(self.capture)
        config_file = config.model_config_file
        self.source = RepositorySource(
            self.storage,
            self.manager,
            config.models,
            poll_wait=config.file_system_poll_wait_seconds,
            config_loader=(lambda: load_model_config_file(config_file)) if config_file else None,
            config_poll_wait=config.model_config_file_poll_wait_seconds,
        )

    async def _drain_batches(self, model: str, version: int) -> None:
        await self.batching.drop(model, version)

    def _batching_for(self, model: str) -> BatchingConfig | None:
        return self.manager.config(model).batching or self.config.batching

    def _load(self, path: str, model: ModelConfig) -> Servable:
        """Runs on the manager's load thread: load, then warm up before the version is marked AVAILABLE."""
        local = Path(self.storage.local_path(path))
        servable = self.registry.load(local, model.platform, self.config.runtime)
        if self.config.enable_model_warmup:
            try:
                run_warmup(servable, local, model.name, self.config.num_request_iterations_for_warmup)
            except Exception:
                servable.unload()
                raise
        return servable

    # LifecycleObserver: metrics, and batch queues closed with their version.
    def on_state(self, model: str, version: int, state: ServableState) -> None:
        self.metrics.on_state(model, version, state)
        self._check_settled()
        if state in (ServableState.END, ServableState.ERROR):
            task = asyncio.get_running_loop().create_task(self.batching.drop(model, version))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def on_load(self, model: str, version: int, seconds: float, ok: bool) -> None:
        self.metrics.on_load(model, version, seconds, ok)
        self._check_settled()

    def _check_settled(self) -> None:
        if self._ready is not None and not self._ready.is_set() and self.manager.settled():
            self._ready.set()

    async def start(self) -> None:
        """Start polling; with ``wait_for_models_seconds`` also hold startup (so the server does not accept
        connections yet) until every model has a version available or has finished its first load attempt
        (a model that cannot load must not keep the others from serving), or that long has passed."""
        self._ready = asyncio.Event()
        if self.capture is not None:
            self.capture.start()
        await self.source.start()
        wait = self.config.wait_for_models_seconds
        if wait > 0 and not self.manager.settled():
            try:
                await asyncio.wait_for(self._ready.wait(), wait)
            except TimeoutError:
                log.warning("models not all available after %.0fs; serving anyway", wait)

    async def stop(self) -> None:
        await self.source.stop()
        await self.manager.close()
        await self.batching.close()
        if self.capture is not None:
            await asyncio.to_thread(self.capture.close)
        self.threads.shutdown()


class FastPath:
    """The outermost ASGI app: inference requests go straight to their adapter, everything else to Starlette.

    Inference is the hot path; skipping Starlette's middleware layers and its scan over every route saves
    a measurable share of each request. The adapters already answer every error themselves.
    """

    def __init__(self, app: Starlette, tf: TfServingRest, kserve: KServeV2, sagemaker: SageMaker) -> None:
        self.app = app
        self.state = app.state
        self._tf = tf.dispatch
        self._kserve = kserve.infer
        self._sagemaker = sagemaker.invocations

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            handler = None
            if path.startswith("/v1/models/") and ":" in path:
                handler = self._tf
            elif path == "/invocations":
                handler = self._sagemaker
            elif path.startswith("/v2/models/") and path.endswith("/infer"):
                parts = path.split("/")  # '', v2, models, <m>, [versions, <v>,] infer
                if len(parts) == 5 and parts[3]:
                    scope["path_params"] = {"model": parts[3]}
                    handler = self._kserve
                elif len(parts) == 7 and parts[4] == "versions" and parts[3]:
                    scope["path_params"] = {"model": parts[3], "version": parts[5]}
                    handler = self._kserve
            if handler is not None:
                response = await handler(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(config: ServerConfig, core: ServingCore | None = None) -> FastPath:
    core = core or ServingCore(config)
    ctx = AdapterContext(
        core.service,
        config.max_request_bytes,
        core.metrics,
        config.sagemaker_default_accept,
        request_timeout_s=config.request_timeout_ms / 1e3 if config.request_timeout_ms else None,
        capture=core.capture,
    )

    async def metrics(request: Request) -> Response:
        return Response(core.metrics.render(), media_type=CONTENT_TYPE)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        if status == 404:
            detail = (
                f"no route for {request.method} {request.url.path}; servekit serves /v1/models/... "
                "(TF Serving), /v2/... (KServe V2), /ping and /invocations (SageMaker) and /metrics"
            )
        elif status == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        return json_response({"error": detail}, status=status)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await core.start()
        try:
            yield
        finally:
            await core.stop()

    tf, kserve, sagemaker = TfServingRest(ctx), KServeV2(ctx), SageMaker(ctx)
    routes = [
        *tf.routes(),
        *kserve.routes(),
        *sagemaker.routes(),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/monitoring/prometheus/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found})
    app.state.core = core
    return FastPath(app, tf, kserve, sagemaker)
