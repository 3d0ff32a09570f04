"""The REST front: every HTTP protocol adapter mounted on one Starlette app over a serving core."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Literal

from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.datastructures import State
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from servekit.config.models import ServerConfig
from servekit.serving.core.assembly import ServingCore
from servekit.serving.core.multi_model import MultiModelHost
from servekit.serving.core.overload import OverloadGate
from servekit.serving.metrics import CONTENT_TYPE
from servekit.serving.protocols.auth import BearerAuth
from servekit.serving.protocols.context import AdapterContext
from servekit.serving.protocols.http import (
    ADMITTED_KEY,
    EARLY_KEY,
    RETRY_AFTER_SECONDS,
    SHED_BODY,
    SHED_KEY,
    Backlog,
    FullQueueResponse,
    InferenceHTTPResponse,
    json_response,
)
from servekit.serving.protocols.kserve_v2 import KServeV2, infer_target
from servekit.serving.protocols.sagemaker import SageMaker
from servekit.serving.protocols.tfserving_rest import TfServingRest

# A request refused by the overload gate: the same two ASGI messages every time, sent before the body is read
# (the HTTP server drops the unread body and keeps the connection).
_SHED_START = {
    "type": "http.response.start",
    "status": 503,
    "headers": [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(SHED_BODY)),
        (b"retry-after", RETRY_AFTER_SECONDS.encode()),
    ],
}
_SHED = {"type": "http.response.body", "body": SHED_BODY}


# Waiting for this many runs of the model is its own pace, not a standing queue: a batch or a thread busy with
# the request ahead. A slow model (a second a call) is not refused for what one call ahead of it takes.
MODEL_RUNS_OF_WAIT = 2.0


def _waited(response: Response, elapsed: float) -> float | None:
    """What an answer says about waiting, for the gate: server time less model time, less the wait that is the
    model's own pace (``MODEL_RUNS_OF_WAIT`` runs); None when it says nothing: an error (a full queue's 503 is
    that queue's own bound at work, which the gate leaves to it), a stream."""
    if isinstance(response, InferenceHTTPResponse):
        return max(0.0, elapsed - (1.0 + MODEL_RUNS_OF_WAIT) * response.model_s)
    return None


class GateMetrics(Collector):
    """The overload gate in /metrics, read at scrape time (with --workers, the worker that answers the scrape)."""

    def __init__(self, gate: OverloadGate) -> None:
        self._gate = gate

    def collect(self) -> Iterator[Metric]:
        gate = self._gate
        for name, kind, doc, value in (
            ("servekit_overload_shed", "counter", "Inference requests refused (503) by the overload gate.", gate.shed),
            ("servekit_overload_limit", "gauge", "Inference requests the overload gate lets in at once.", gate.limit),
            (
                "servekit_overload_in_flight",
                "gauge",
                "Inference requests in, as the overload gate counts.",
                gate.in_flight,
            ),
        ):
            m = Metric(name, doc, kind)
            m.add_sample(name + ("_total" if kind == "counter" else ""), {}, float(value))
            yield m


class FastPath:
    """The outermost ASGI app: inference requests go straight to their adapter, everything else to Starlette.

    Inference is the hot path; skipping Starlette's middleware layers and its scan over every route saves
    a measurable share of each request. The adapters already answer every error themselves.

    With authentication on, every HTTP request is checked here first, before either path. With an overload
    ``gate``, an inference request past its limit is answered 503 here, before its body is read.
    """

    def __init__(
        self,
        app: ASGIApp,
        tf: TfServingRest,
        kserve: KServeV2,
        sagemaker: SageMaker,
        auth: BearerAuth | None = None,
        state: State | None = None,
        gate: OverloadGate | None = None,
    ) -> None:
        """``app``: every request that is not inference, and the lifespan; ``state``: the REST app's (its core)."""
        self.app = app
        self.state = state if state is not None else getattr(app, "state", None)
        self._tf = tf.dispatch
        self._kserve = kserve.infer
        self._sagemaker = sagemaker.invocations
        self._auth = auth
        self._gate = gate

    def refuse_now(self, method: bytes, path: str, early: bool) -> Literal["early", "limit", "in"] | None:
        """For the HTTP connection, as a request's head is parsed (launch/connections.py): an inference POST sent
        while its connection was held (``early``) or past the gate's limit is to be answered 503 there and then,
        with no ASGI task, before authentication (the answer is the same constant either way); "in": it is let
        in now (requests parsed in one turn of the loop count at once) and the connection marks its scope with
        ``ADMITTED_KEY``; None: no gate, or not inference."""
        gate = self._gate
        if gate is None or method != b"POST" or self._inference(path) is None:
            return None
        if early:
            gate.shed += 1
            return "early"
        return "in" if gate.admit() else "limit"

    def _inference(self, path: str) -> Callable[[Request], Awaitable[Response]] | None:
        """The adapter's inference handler for a POST to ``path``; None when it is not inference."""
        if path.startswith("/v1/models/") and ":" in path:
            return self._tf
        if path == "/invocations":
            return self._sagemaker
        if infer_target(path) is not None:
            return self._kserve
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = None
        if scope["type"] == "http":
            if scope["method"] == "POST":
                handler = self._inference(scope["path"])
            if self._auth is not None:
                refused = self._auth.check(scope, inference=handler is not None)
                if refused is not None:
                    if scope.get(ADMITTED_KEY) and self._gate is not None:
                        self._gate.leave(time.perf_counter(), None)
                    await refused(scope, receive, send)
                    return
        if handler is None:
            if scope.get(ADMITTED_KEY) and self._gate is not None:  # not inference after all: its place back
                self._gate.leave(time.perf_counter(), None)
            await self.app(scope, receive, send)
            return
        gate = self._gate
        if gate is None:
            response = await handler(Request(scope, receive))
            await response(scope, receive, send)
            return
        # A request sent again before Retry-After had passed waited unread meanwhile (launch/connections.py): it is
        # refused at once rather than answered a second late, and its connection is not held again, so the
        # client's next request, fresh, is decided by the gate.
        started = scope.get(ADMITTED_KEY)  # let in by the connection as its head was parsed, at this time
        if started is None:
            early = EARLY_KEY in scope
            if early or not gate.admit():
                if early:
                    gate.shed += 1  # admit() counts its own refusals
                else:
                    scope[SHED_KEY] = True  # the connection holds off the client's next request
                await send(_SHED_START)
                await send(_SHED)
                return
            started = time.perf_counter()
        waited, full = None, False
        try:
            response = await handler(Request(scope, receive))
            waited = _waited(response, time.perf_counter() - started)
            full = isinstance(response, FullQueueResponse)
            await response(scope, receive, send)
        finally:
            gate.leave(time.perf_counter(), waited, full)


def build_app(
    config: ServerConfig,
    core: ServingCore,
    backlog: Backlog | None = None,
    around: Callable[[ASGIApp], ASGIApp] | None = None,
) -> FastPath:
    """The REST front over ``core``, which the composition root built and whose lifecycle it runs; the app's own
    lifespan closes only what it opened. ``around`` wraps the app's lifespan path (the root's
    :class:`servekit.serving.protocols.lifespan.CoreLifespan`: the core and the other fronts start around it) inside the
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
    gate = OverloadGate(config.overload, time.perf_counter()) if config.overload.enabled else None
    if gate is not None:
        core.metrics.watch(GateMetrics(gate))
    return FastPath(around(app) if around is not None else app, tf, kserve, sagemaker, auth, state=app.state, gate=gate)
