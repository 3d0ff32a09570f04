"""The REST front: every HTTP protocol adapter mounted on one Starlette app over a serving core."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.datastructures import State
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from servekit.config.models import ServerConfig
from servekit.observability.metrics import CONTENT_TYPE
from servekit.protocols.auth import BearerAuth
from servekit.protocols.context import AdapterContext
from servekit.protocols.http import Backlog, json_response
from servekit.protocols.kserve_v2 import KServeV2, infer_target
from servekit.protocols.sagemaker import SageMaker
from servekit.protocols.tfserving_rest import TfServingRest
from servekit.server.core import ServingCore
from servekit.server.multi_model import MultiModelHost


class FastPath:
    """The outermost ASGI app: inference requests go straight to their adapter, everything else to Starlette.

    Inference is the hot path; skipping Starlette's middleware layers and its scan over every route saves
    a measurable share of each request. The adapters already answer every error themselves.

    With authentication on, every HTTP request is checked here first, before either path.
    """

    def __init__(
        self,
        app: ASGIApp,
        tf: TfServingRest,
        kserve: KServeV2,
        sagemaker: SageMaker,
        auth: BearerAuth | None = None,
        state: State | None = None,
    ) -> None:
        """``app``: every request that is not inference, and the lifespan; ``state``: the REST app's (its core)."""
        self.app = app
        self.state = state if state is not None else getattr(app, "state", None)
        self._tf = tf.dispatch
        self._kserve = kserve.infer
        self._sagemaker = sagemaker.invocations
        self._auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = None
        if scope["type"] == "http":
            if scope["method"] == "POST":
                path: str = scope["path"]
                if path.startswith("/v1/models/") and ":" in path:
                    handler = self._tf
                elif path == "/invocations":
                    handler = self._sagemaker
                elif infer_target(path) is not None:
                    handler = self._kserve
            if self._auth is not None:
                refused = self._auth.check(scope, inference=handler is not None)
                if refused is not None:
                    await refused(scope, receive, send)
                    return
        if handler is not None:
            response = await handler(Request(scope, receive))
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def build_app(
    config: ServerConfig,
    core: ServingCore,
    backlog: Backlog | None = None,
    around: Callable[[ASGIApp], ASGIApp] | None = None,
) -> FastPath:
    """The REST front over ``core``, which the composition root built and whose lifecycle it runs; the app's own
    lifespan closes only what it opened. ``around`` wraps the app's lifespan path (the root's
    :class:`servekit.protocols.lifespan.CoreLifespan`: the core and the other fronts start around it) inside the
    fast path, so inference requests never pass through it. ``backlog``: the server's count of pending requests,
    where its transport keeps one (``serve`` does)."""
    ctx = AdapterContext(
        core.service,
        config.max_request_bytes,
        core.metrics,
        config.sagemaker_default_accept,
        request_timeout_s=config.request_timeout_ms / 1e3 if config.request_timeout_ms else None,
        multi_model=MultiModelHost(core, config.multi_model_memory_bytes) if config.multi_model else None,
        backlog=backlog,
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
        try:
            yield
        finally:
            ctx.large.close()

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
    auth = BearerAuth(config.auth) if config.auth is not None else None
    return FastPath(around(app) if around is not None else app, tf, kserve, sagemaker, auth, state=app.state)
