"""The ``servekit up`` process: the SageMaker control plane and runtime APIs (and later autoscaling and CloudWatch)
on one port, the gateway behind InvokeEndpoint, and the hosting service that keeps endpoints running.

It is a plain ASGI app: AWS API requests go to :class:`~servekit.aws.Api` (SigV4, validation, wire
format); ``GET /ping`` answers 200 once the endpoints that were InService before a restart are serving again;
``GET /metrics`` is Prometheus text. ``servekit up`` serves it with its own HTTP/1.1 protocol
(launch/plane_http.py), which hands each plain InvokeEndpoint (:meth:`ControlPlane.takes_invocation`) to
:meth:`ControlPlane.invoke` without the ASGI cycle; both paths answer through :meth:`ControlPlane.answer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Receive, Scope, Send

from servekit.aws import Api, ApiError, Call, Handler
from servekit.aws.front import CALLER
from servekit.aws.sigv4 import LowerCaseHeaders
from servekit.edge.metrics import EdgeMetrics
from servekit.edge.streaming import OPERATION_SUFFIX, api_error, stream_invocation
from servekit.gateway.service import Gateway, GatewayError
from servekit.services.cloudwatch.alarms import AlarmService
from servekit.services.cloudwatch.store import MetricsStore
from servekit.services.hosting.api import HostingService
from servekit.services.hosting.lifecycle import EndpointStatus

log = logging.getLogger(__name__)

MODEL_CACHE_HEADER = "x-servekit-model-cache"
_MAX_TRACKED_MODELS = 100_000  # per endpoint: past it, new TargetModels are not counted (memory stays bounded)
_REPORTED_MODELS = 100
# Response headers an operation adds beyond its API shape, for the request being answered (one dict per request).
_EXTRA_HEADERS: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("servekit_extra_headers")
MAX_BODY = 6 * 1024 * 1024 + 64 * 1024  # InvokeEndpoint's 6 MB payload plus headroom for the JSON APIs
_TEXT = "text/plain; version=0.0.4; charset=utf-8"
TOO_LARGE = b'{"message": "request body too large"}'
NO_API = b'{"message": "no such API on servekit up"}'


class Background(Protocol):
    """A loop that runs beside the plane (the autoscaler, a sampler): started after recovery, closed at stop."""

    def start(self) -> None: ...

    async def close(self) -> None: ...


class ControlPlane:
    def __init__(
        self,
        api: Api,
        hosting: HostingService,
        gateway: Gateway,
        tick_s: float = 1.0,
        services: Mapping[str, Mapping[str, Handler]] | None = None,
        alarms: AlarmService | None = None,
        endpoint_metrics: MetricsStore | None = None,
        background: Sequence[Background] = (),
        prometheus: EdgeMetrics | None = None,
        collectors: Sequence[Collector] = (),
        mounts: Mapping[str, Callable[[ControlPlane], ASGIApp]] | None = None,
        fronts: Sequence[tuple[Callable[[Scope], bool], ASGIApp]] = (),
        before_invoke: Callable[[str], None] | None = None,
        drains: Sequence[Background] = (),
    ) -> None:
        """``services``: more operations by service name (e.g. ``{"cloudwatch": {"GetMetricData": ...}}``), beside
        the SageMaker hosting operations. ``alarms``: the CloudWatch alarm evaluator, started and stopped with
        the plane (its operations are registered through ``services``). ``endpoint_metrics``: where InvokeEndpoint
        records CloudWatch's hosting metrics; its minute flusher runs with the plane. ``prometheus``: the series of
        /metrics (built here when not given); ``collectors``: more of them (the utilization sampler's gauges);
        ``mounts``: path prefix -> a function that builds the app served there from this plane. ``fronts``: AWS
        services with a wire handling of their own (S3 streams bodies to disk, STS speaks the query protocol), each
        with the test that picks its requests (their SigV4 scope), asked before the body is read. ``before_invoke``:
        called with the endpoint of each InvokeEndpoint; what it raises is the answer (an asynchronous endpoint
        refuses it). ``drains``: loops like ``background``, closed after the instances have stopped, so that what an
        instance leaves on its way out (its last capture files) is still handled."""
        self.endpoint_metrics = endpoint_metrics
        self.alarms = alarms
        self.background = tuple(background)
        self.drains = tuple(drains)
        # multi-model endpoints: endpoint -> TargetModel -> [hits, misses] since this process started
        self.model_cache: dict[str, dict[str, list[int]]] = {}
        self.api = api
        self.hosting = hosting
        self.gateway = gateway
        self._handlers = hosting.handlers()
        self._services: dict[str, Mapping[str, Handler]] = {"sagemaker": self._handlers, **(services or {})}
        self._tick_s = tick_s
        self._ready = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None
        # the plane's Prometheus series (the root builds them first: hosting records ModelSetupTime there too)
        self.prometheus = prometheus or EdgeMetrics(endpoint_metrics)
        for collector in collectors:
            self.prometheus.registry.register(collector)
        # other apps on this port by path prefix (the web console at /console), each built from the plane
        self.mounts: dict[str, ASGIApp] = {prefix: build(self) for prefix, build in (mounts or {}).items()}
        self._mount_prefixes = tuple(prefix.encode() + b"/" for prefix in self.mounts)
        self.fronts = tuple(fronts)
        self._before_invoke = before_invoke

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Bring back what was serving before a restart, then answer /ping and keep instances replaced."""
        await self._recover()
        self._ready.set()
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise())
        if self.endpoint_metrics is not None:
            self.endpoint_metrics.start()
        if self.alarms is not None:
            self.alarms.start()
        for loop in (*self.background, *self.drains):
            loop.start()

    async def _recover(self) -> None:
        rows = self.hosting.repo.all_endpoints()
        for row in rows:
            if row.status in (EndpointStatus.IN_SERVICE, EndpointStatus.UPDATING, EndpointStatus.SYSTEM_UPDATING):
                await self.hosting.fleets.recover(row)
            elif row.status == EndpointStatus.CREATING:
                await self.hosting.fleets.recover(row)
            elif row.status == EndpointStatus.DELETING:
                await self.hosting.delete_endpoint({"EndpointName": row.name})
        await self.hosting.fleets.wait_idle()
        if self.hosting.components is not None:  # their endpoints serve again: the copies come back
            await self.hosting.components.recover()

    async def _supervise(self) -> None:
        while True:
            await asyncio.sleep(self._tick_s)
            try:
                await self.hosting.fleets.tick()
            except Exception:
                log.exception("supervising instances failed")

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        for loop in reversed(self.background):
            await loop.close()
        if self.alarms is not None:
            await self.alarms.close()
        if self.endpoint_metrics is not None:
            await self.endpoint_metrics.close()
        await self.hosting.fleets.close()
        for loop in reversed(self.drains):
            await loop.close()
        await self.gateway.close()

    # ---- requests ----------------------------------------------------------------------------------------------
    async def dispatch(self, call: Call) -> Mapping[str, Any] | None:
        if call.service == "sagemaker-runtime" and call.operation == "InvokeEndpoint":
            return await self._invoke(call.params)
        if call.service == "sagemaker" and call.operation == "DescribeEndpoint":
            described = dict(await self._handlers["DescribeEndpoint"](call.params))
            cache = self.model_cache.get(described["EndpointName"])
            if cache:  # servekit's: a multi-model endpoint's hit ratio per TargetModel, busiest first
                described["ServekitModelCache"] = model_cache_report(cache)
            return described
        handler = self._services.get(call.service, {}).get(call.operation)
        if handler is None:
            raise ApiError(
                "UnknownOperationException", f"servekit does not implement {call.service} {call.operation} yet", 400
            )
        # who made the call, for histories that record it (the registry's approvals); a context variable so the
        # handlers keep their one-argument shape
        CALLER.set(call.key.access_key_id if call.key else None)
        return await handler(call.params)

    async def _invoke(self, p: dict[str, Any]) -> dict[str, Any]:
        endpoint = p["EndpointName"]
        if self._before_invoke is not None:
            self._before_invoke(endpoint)
        body = p.get("Body") or b""
        if isinstance(body, str):
            body = body.encode()
        began = time.perf_counter()
        component = p.get("InferenceComponentName")
        components = self.hosting.components
        try:
            # an inference component's copies have a routing key of their own (unknown ones are refused)
            route = components.route(endpoint, component) if components is not None else endpoint
            out = await self.gateway.invoke(
                route,
                body,
                p.get("ContentType"),
                p.get("Accept"),
                p.get("CustomAttributes"),
                p.get("TargetVariant"),
                p.get("InferenceId"),
                p.get("TargetModel"),
            )
        except GatewayError as exc:
            self.prometheus.invocation(endpoint if exc.code != "ValidationError" else "", "", exc.code)
            self.prometheus.record_error(endpoint, exc, time.perf_counter() - began, self._instances)
            if components is not None and component is not None and exc.code != "ValidationError":
                components.record(component, None, 4 if exc.status < 500 else 5)
            raise api_error(exc) from None
        if components is not None and component is not None:
            components.record(component, out.model_s)
        self.prometheus.invocation(endpoint, out.variant, "ok")
        self.prometheus.record_ok(
            endpoint, out.variant, out.model_s, time.perf_counter() - began, self._instances, out.config_name
        )
        if out.model_load is not None:
            # servekit's: whether a multi-model request found its model loaded (clients see it in
            # ResponseMetadata.HTTPHeaders; SageMaker's own headers are unchanged)
            _EXTRA_HEADERS.get({})[MODEL_CACHE_HEADER] = "hit" if out.model_load.hit else "miss"
            target = str(p.get("TargetModel"))
            counts = self.model_cache.setdefault(endpoint, {})
            if target in counts or len(counts) < _MAX_TRACKED_MODELS:
                hit_miss = counts.setdefault(target, [0, 0])
                hit_miss[0 if out.model_load.hit else 1] += 1
        if out.model_load is not None and self.endpoint_metrics is not None:
            load = out.model_load
            self.endpoint_metrics.record_model_load(
                endpoint,
                out.variant,
                hit=load.hit,
                wait_us=load.wait_s * 1e6,
                download_us=load.download_s * 1e6,
                load_us=load.load_s * 1e6,
                unload_us=tuple(s * 1e6 for s in load.unload_s),
                loaded_models=load.loaded_models,
            )
        result: dict[str, Any] = {
            "Body": out.body,
            "ContentType": out.content_type,
            "InvokedProductionVariant": out.variant,
        }
        if out.custom_attributes:
            result["CustomAttributes"] = out.custom_attributes
        return result

    def _instances(self, endpoint: str, variant: str) -> int:
        for v in self.gateway.table.variants(endpoint) or []:
            if v.name == variant:
                return len(v.instances)
        return 0

    def metrics(self) -> bytes:
        return self.prometheus.render(self.hosting.repo.all_endpoints(), self.hosting.fleets.cost_per_hour)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method: str = scope["method"]
        path: str = scope["path"]
        if method == "GET" and path == "/ping":
            await _send(send, 200 if self._ready.is_set() else 503, b"", "text/plain")
            return
        if method == "GET" and path == "/metrics":
            await _send(send, 200, self.metrics(), _TEXT)
            return
        for prefix, app in self.mounts.items():
            if path == prefix or path.startswith(prefix + "/"):
                await app(scope, receive, send)
                return
        for picks, front in self.fronts:
            if picks(scope):
                await front(scope, receive, send)
                return
        body = await read_body(receive, MAX_BODY)
        raw_path = scope.get("raw_path", b"").decode("latin-1") or path  # as sent: still percent-encoded
        if scope.get("query_string"):  # ASGI's raw_path has no query; SigV4 signs it
            raw_path += "?" + scope["query_string"].decode("latin-1")
        headers = _headers(scope["headers"])
        if body is None:
            await _send(send, 413, TOO_LARGE, "application/json")
            return
        if method == "POST" and path.endswith(OPERATION_SUFFIX):  # the answer is sent as it streams, not returned
            args = (self.api, self.gateway, self.prometheus, self._instances, method, raw_path, headers, body, send)
            components = self.hosting.components
            if await stream_invocation(*args, router=components.route if components is not None else None):
                return
        status, raw, payload = await self.answer(method, raw_path, headers, body)
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": payload})

    def takes_invocation(self, raw_path: bytes, headers: Sequence[tuple[bytes, bytes]]) -> bool:
        """Whether a POST to ``raw_path`` (no query) with these (lower-case) headers is an InvokeEndpoint that
        :meth:`invoke` answers whole, without the ASGI app (launch/plane_http.py): not for a mount nor a front
        (S3 takes a request by its SigV4 scope, whatever its path), not a streaming one."""
        if not (raw_path.startswith(b"/endpoints/") and raw_path.endswith(b"/invocations")):
            return False
        if any(raw_path.startswith(prefix) for prefix in self._mount_prefixes):
            return False
        if self.fronts:
            scope = {"type": "http", "method": "POST", "headers": headers, "query_string": b""}
            return not any(picks(scope) for picks, _ in self.fronts)
        return True

    async def invoke(
        self, raw_path: str, raw_headers: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """An InvokeEndpoint that :meth:`takes_invocation` took: the answer the ASGI app would send."""
        return await self.answer("POST", raw_path, _headers(raw_headers), body)

    async def answer(
        self, method: str, raw_path: str, headers: LowerCaseHeaders, body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """An AWS API request's status, headers (content-length among them) and body; 404 when it is none."""
        extra: dict[str, str] = {}
        _EXTRA_HEADERS.set(extra)
        response = await self.api.handle_async(method, raw_path, headers, body, self.dispatch)
        if response is None:
            return 404, [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(NO_API))], NO_API
        out_headers = {**response.headers, **extra} if response.status == 200 else response.headers
        if response.status == 429:  # throttled (a serverless variant at its MaxConcurrency): when to come back
            out_headers = {**out_headers, "Retry-After": "1"}
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in out_headers.items()]
        if not any(k == b"content-length" for k, _ in raw):  # else the server frames the body in chunks
            raw.append((b"content-length", b"%d" % len(response.body)))
        return response.status, raw, response.body

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as exc:
                    log.exception("servekit up could not start")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def model_cache_report(counts: Mapping[str, list[int]]) -> list[dict[str, Any]]:
    """The busiest TargetModels with their hits, misses and hit ratio (DescribeEndpoint's ServekitModelCache)."""
    busiest = sorted(counts.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0]))[:_REPORTED_MODELS]
    return [
        {"TargetModel": t, "Hits": h, "Misses": m, "HitRatio": round(h / (h + m), 4) if h + m else 0.0}
        for t, (h, m) in busiest
    ]


def _headers(raw: Sequence[tuple[bytes, bytes]]) -> LowerCaseHeaders:
    """Request headers as the AWS layers take them. The HTTP server's names are lower-case already (ASGI's, and
    uvicorn's parser's for the fast path), so the layers use this mapping without lower-casing copies."""
    return LowerCaseHeaders((k.decode("latin-1"), v.decode("latin-1")) for k, v in raw)


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """A request's whole body, or None once it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _send(send: Send, status: int, body: bytes, content_type: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body})
