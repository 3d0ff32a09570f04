"""A gateway replica (``servekit up --role gateway``): one more process serving the same API port's front —
SigV4 with the home's credentials file, InvokeEndpoint routed to the same instances — beside the leader (the
plain ``servekit up`` on the same home, which runs the instances). Any TCP load balancer may spread callers over
the leader and its replicas.

- **InvokeEndpoint is served here**, from a routing table that follows the leader's through the state database
  (:mod:`servekit.gateway.published`); its CloudWatch metrics go to the shared metrics store (each
  process flushes its finished buckets; a flush merges into the stored minute inside a write transaction, so two
  processes add up rather than overwrite).
- **Every other operation is forwarded to the leader** as it came, signature and all (the leader verifies it:
  SigV4 signs the ``Host`` header the client sent, which is kept). Why not serve writes here and let the leader
  reconcile: the leader owns the instances (its backend started them) and keeps live state that the database
  does not hold — a deployment's rollout step and alarms, autoscaling, the model cache counts — so a replica's
  Describe* answered from the database alone would be poorer than the leader's, and a Create* written here would
  need a second reconcile path. Forwarding gives callers one behaviour whichever process they reach. When the
  leader cannot be reached those operations answer ``ServiceUnavailable``; InvokeEndpoint keeps serving from the
  routes last read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from starlette.types import Receive, Scope, Send

from servekit.aws import Api, ApiError, Call
from servekit.aws.errors import service_unavailable
from servekit.aws.protocol import RestJsonProtocol
from servekit.backends.local import InstanceHandle, InstanceSpec
from servekit.edge.plane import MAX_BODY, TOO_LARGE, ControlPlane, read_body
from servekit.gateway.published import RouteFollower
from servekit.gateway.service import Gateway
from servekit.gateway.store import GatewayRoutes
from servekit.services.cloudwatch.store import MetricsStore
from servekit.services.hosting.api import HostingService

log = logging.getLogger(__name__)

# headers of one hop, not of the request: the forwarded request gets its own
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"})


class NoInstances:
    """The replica's backend: it runs no instances (the leader does), and says so if ever asked."""

    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        raise RuntimeError("a gateway replica runs no instances: the leader (servekit up) starts them")

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None:
        return None

    def alive(self, handle: InstanceHandle) -> bool:
        return False

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        return ""

    async def close(self) -> None:
        return None


class GatewayReplica(ControlPlane):
    """InvokeEndpoint here, everything else forwarded to the leader recorded in the state database."""

    def __init__(
        self,
        api: Api,
        hosting: HostingService,
        gateway: Gateway,
        follower: RouteFollower,
        routes: GatewayRoutes,
        endpoint_metrics: MetricsStore,
        leader_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(api, hosting, gateway, endpoint_metrics=endpoint_metrics)
        self.follower = follower
        self._routes = routes
        self._leader_timeout = aiohttp.ClientTimeout(total=leader_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    # ---- lifecycle: follow the routes and record metrics; no recovery, no supervision (the leader's) ----------
    async def start(self) -> None:
        self.follower.sync()  # routes before the first request: /ping answers 200 only after this
        self.follower.start()
        if self.endpoint_metrics is not None:
            self.endpoint_metrics.start()
        self._ready.set()

    async def stop(self) -> None:
        await self.follower.close()
        if self.endpoint_metrics is not None:
            await self.endpoint_metrics.close()  # the last buckets reach the shared store
        await self.gateway.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def dispatch(self, call: Call) -> Mapping[str, Any] | None:
        if call.service == "sagemaker-runtime" and call.operation == "InvokeEndpoint":
            return await self._invoke(call.params)
        raise ApiError("UnknownOperationException", f"{call.operation} is forwarded to the leader", 400)

    # ---- requests ----------------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "GET" and scope["path"] in ("/ping", "/metrics")):
            await super().__call__(scope, receive, send)
            return
        method: str = scope["method"]
        raw_path = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
        if scope.get("query_string"):
            raw_path += "?" + scope["query_string"].decode("latin-1")
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        proto = self.api.route(method, raw_path, headers)
        if proto is None or _invoke_endpoint(proto, method, raw_path):
            await super().__call__(scope, receive, send)  # InvokeEndpoint (or no API at all: the leader's 404)
            return
        body = await read_body(receive, MAX_BODY)
        if body is None:
            await _respond(send, 413, [("content-type", "application/json")], TOO_LARGE)
            return
        try:
            status, out_headers, out_body = await self._forward(method, raw_path, scope["headers"], body)
        except LeaderUnreachable as exc:
            response = self.api.error(proto, service_unavailable(str(exc)))
            await _respond(send, response.status, list(response.headers.items()), response.body)
            return
        await _respond(send, status, out_headers, out_body)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._leader_timeout,
                auto_decompress=False,  # bytes through as the leader sent them
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type", "Accept"),
            )
        return self._session

    async def _forward(
        self, method: str, raw_path: str, raw_headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        leader = self._routes.leader()
        if leader is None:
            raise LeaderUnreachable("no leader (servekit up) has recorded its address in this home")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw_headers]
        forwarded = [(k, v) for k, v in headers if k.lower() not in _HOP]  # Host kept: the signature covers it
        try:
            async with self._client().request(
                method, leader.url + raw_path, data=body, headers=forwarded, allow_redirects=False
            ) as resp:
                payload = await resp.read()
                out = [(k, v) for k, v in resp.headers.items() if k.lower() not in _HOP]
                return resp.status, out, payload
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise LeaderUnreachable(
                f"this gateway replica forwards control operations to the leader at {leader.url}, which cannot be "
                f"reached ({type(exc).__name__}); InvokeEndpoint is still served here. Retry later."
            ) from None


class LeaderUnreachable(Exception):
    """The leader is not recorded, or does not answer: a forwarded operation gets ServiceUnavailable."""


def _invoke_endpoint(proto: Any, method: str, raw_path: str) -> bool:
    if proto.spec.name != "sagemaker-runtime" or not isinstance(proto, RestJsonProtocol):
        return False
    found = proto.match(method, raw_path)
    return found is not None and found[0].name == "InvokeEndpoint"


async def _respond(send: Send, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    out = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers if k.lower() not in _HOP]
    out.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})
