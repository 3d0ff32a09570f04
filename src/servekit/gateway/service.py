"""The runtime gateway: InvokeEndpoint → a variant by weight (or ``TargetVariant``) → the instance with the fewest
outstanding requests → its ``/invocations``, bytes only, over pooled keep-alive connections. It never decodes
a tensor; errors come back in the runtime API's terms (``ModelError`` with the instance's status and message,
``ServiceUnavailable`` when no instance can answer)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

from servekit.gateway.multi_model import (
    TARGET_HEADER,
    LoadError,
    LoadOutcome,
    ModelLoads,
    Resolve,
    TargetError,
    check_target,
    model_name,
)
from servekit.gateway.multi_model import unload as unload_model
from servekit.gateway.routing import choose_variant, least_outstanding, rendezvous
from servekit.gateway.serverless import ColdVariant, ServerlessGate
from servekit.gateway.upstream import Answer, Upstream, UpstreamGone

log = logging.getLogger(__name__)

CUSTOM_ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"
_CUSTOM_ATTRIBUTES_LOW = CUSTOM_ATTRIBUTES.lower()
INFERENCE_ID = "X-Amzn-SageMaker-Inference-Id"
TOTAL_MS = "x-servekit-total-ms"  # a servekit instance's own time for the request
_ORIGINAL_MESSAGE_MAX = 1024


@dataclass(slots=True)
class InstanceRoute:
    instance_id: str
    url: str
    outstanding: int = 0


@dataclass(slots=True)
class VariantRoute:
    name: str
    weight: float
    instances: list[InstanceRoute] = field(default_factory=list)
    # the endpoint config this fleet runs: during a blue/green deployment one variant name has two fleets (blue
    # and green), told apart by it, and CloudWatch's EndpointConfigName dimension comes from it
    config_name: str = ""
    multi_model: str | None = None  # a multi-model fleet: the ModelDataUrl prefix its TargetModels are under
    model_cache: bool = True  # False (ModelCacheSetting Disabled): a model is unloaded after each request
    serverless: ServerlessGate | None = None  # a serverless variant: its concurrency and how it starts capacity


@dataclass(frozen=True, slots=True)
class Invocation:
    body: bytes
    content_type: str
    variant: str
    custom_attributes: str | None = None
    model_s: float | None = None  # the instance's own time (its x-servekit-total-ms), else the upstream round trip
    config_name: str = ""  # the endpoint config of the fleet that answered
    model_load: LoadOutcome | None = None  # a multi-model request: cache hit, or what loading its model cost
    # InvokeEndpointWithResponseStream: the instance's answer as it arrives (``body`` is empty); it ends with
    # GatewayError("ModelStreamError") when the instance's stream breaks off midway
    stream: AsyncIterator[bytes] | None = None


class GatewayError(Exception):
    """An InvokeEndpoint failure in the runtime API's terms: its error code, HTTP status and extra fields."""

    def __init__(self, code: str, status: int, message: str, extra: Mapping[str, object] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.extra = dict(extra or {})


@dataclass(slots=True)
class ShadowRoute:
    """A shadow variant: gets a copy of ``fraction`` of the endpoint's requests; its answers are never returned."""

    route: VariantRoute
    fraction: float


@dataclass(frozen=True, slots=True)
class ShadowResult:
    """One mirrored request: the production answer (or its error) and the shadow's, side by side."""

    endpoint: str
    variant: str  # the production variant that answered the caller
    shadow_variant: str
    inference_id: str | None
    request: bytes
    content_type: str
    production_status: int  # 200, or the model's status (0: no answer)
    production_body: bytes
    production_s: float
    shadow_status: int  # 200, the shadow model's status, or 0 when it could not be reached or timed out
    shadow_body: bytes
    shadow_s: float
    at: float  # epoch seconds


ShadowSink = Callable[[ShadowResult], None]


class RoutingTable:
    """Which variants and healthy instances each endpoint has, replaced whole by the reconciler."""

    def __init__(self) -> None:
        self._endpoints: dict[str, list[VariantRoute]] = {}
        self._shadows: dict[str, list[ShadowRoute]] = {}
        self._known: set[str] = set()

    def set_shadows(self, name: str, shadows: list[ShadowRoute]) -> None:
        """Publish an endpoint's shadow variants (keeping the outstanding counts of instances that stay)."""
        old = {i.instance_id: i for s in self._shadows.get(name, []) for i in s.route.instances}
        for s in shadows:
            s.route.instances = [old.get(i.instance_id, i) for i in s.route.instances]
        if shadows:
            self._shadows[name] = shadows
        else:
            self._shadows.pop(name, None)

    def shadows(self, name: str) -> list[ShadowRoute]:
        return self._shadows.get(name, [])

    def set_endpoint(self, name: str, variants: list[VariantRoute]) -> None:
        """Publish an endpoint's routes, keeping the outstanding counts of instances that stay."""
        old = {i.instance_id: i for v in self._endpoints.get(name, []) for i in v.instances}
        for v in variants:
            v.instances = [old.get(i.instance_id, i) for i in v.instances]
        self._endpoints[name] = variants
        self._known.add(name)

    def remove_endpoint(self, name: str) -> None:
        self._endpoints.pop(name, None)
        self._shadows.pop(name, None)
        self._known.discard(name)

    def variants(self, name: str) -> list[VariantRoute] | None:
        return self._endpoints.get(name) if name in self._known else None


class Gateway:
    def __init__(
        self,
        table: RoutingTable,
        rng: random.Random | None = None,
        timeout_s: float = 60.0,
        connections_per_instance: int = 64,
        shadow_sink: ShadowSink | None = None,
        max_shadow_in_flight: int = 256,
        resolve_artifact: Resolve | None = None,
        spill_at: int = 8,
        account_id: str = "000000000000",
    ) -> None:
        """``shadow_sink`` receives every mirrored request's two answers; copies beyond ``max_shadow_in_flight``
        are skipped (a slow shadow never holds memory or connections that the callers' requests need)."""
        self.table = table
        self.account_id = account_id  # what an unknown endpoint's error names, as every ARN the plane issues does
        # multi-model endpoints: TargetModel -> local model directory (None: such endpoints are refused)
        self.model_loads = ModelLoads(resolve_artifact) if resolve_artifact is not None else None
        self._spill_at = spill_at  # requests in flight on an instance before its models' requests spill over
        self._shadow_sink = shadow_sink
        self._max_shadow = max_shadow_in_flight
        self._shadow_tasks: set[asyncio.Task[None]] = set()
        self.shadow_skipped = 0
        self._rng = rng or random.Random()
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._limit = connections_per_instance
        self._session: aiohttp.ClientSession | None = None
        # InvokeEndpoint's requests and the shadow copies: raw keep-alive connections (the general client above
        # stays for streamed answers and the multi-model load calls)
        self._upstream = Upstream(connections_per_instance, timeout_s)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self._limit, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),  # instances set no cookies: skip the jar on every response
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
        return self._session

    def choose(
        self,
        endpoint: str,
        target_variant: str | None = None,
        exclude: frozenset[str] = frozenset(),
        target_model: str | None = None,
    ) -> tuple[VariantRoute, InstanceRoute]:
        """The variant (by weight, or ``target_variant``) and its least busy instance not in ``exclude`` — or, for
        a multi-model fleet, the instance ``target_model`` hashes to unless that one is saturated."""
        variants = self.table.variants(endpoint)
        if variants is None:
            raise GatewayError("ValidationError", 400, f"Endpoint {endpoint} of account {self.account_id} not found.")
        if target_variant is not None:
            named = [v for v in variants if v.name == target_variant]
            if not named:
                names = ", ".join(dict.fromkeys(v.name for v in variants))
                raise GatewayError(
                    "ValidationError",
                    400,
                    f"Variant {target_variant} not found for endpoint {endpoint} (variants: {names}).",
                )
            pool = named  # blue and green fleets of one variant during a deployment: by their weights
        else:
            pool = variants
        # by position, not name: a variant being deployed has two fleets of the same name
        if len(pool) == 1:  # the usual endpoint: no list to build (the same draw as choose_variant's)
            only = pool[0]
            self._rng.random()
            index = "0" if only.weight > 0 and (only.instances or only.serverless) else None
        else:
            index = choose_variant(
                [(str(i), v.weight if v.instances or v.serverless else 0.0) for i, v in enumerate(pool)],
                self._rng.random(),
            )
        chosen = pool[int(index)] if index is not None else (pool[0] if target_variant is not None else None)
        if chosen is not None and not chosen.instances and chosen.serverless is not None:
            raise ColdVariant(chosen.serverless)
        if chosen is None or not chosen.instances:
            raise GatewayError(
                "ServiceUnavailable",
                503,
                f"Endpoint {endpoint} has no instance ready to serve; retry later.",
                {"VariantName": chosen.name} if chosen is not None else None,
            )
        candidates = [i for i in chosen.instances if i.instance_id not in exclude] if exclude else chosen.instances
        if not candidates:
            raise GatewayError(
                "ServiceUnavailable",
                503,
                f"Endpoint {endpoint}: no instance could be reached.",
                {"VariantName": chosen.name},
            )
        if len(candidates) == 1 and (chosen.multi_model is None or target_model is None):
            self._rng.random()  # drawn as for several instances: a seeded caller's later choices stay the same
            return chosen, candidates[0]
        by_id = {i.instance_id: i for i in candidates}
        loads = [(i.instance_id, i.outstanding) for i in candidates]
        if chosen.multi_model is not None and target_model is not None:
            picked = rendezvous(loads, target_model, self._spill_at)
        else:
            picked = least_outstanding(loads, self._rng.random())
        assert picked is not None
        return chosen, by_id[picked]

    async def invoke(
        self,
        endpoint: str,
        body: bytes,
        content_type: str | None = None,
        accept: str | None = None,
        custom_attributes: str | None = None,
        target_variant: str | None = None,
        inference_id: str | None = None,
        target_model: str | None = None,
    ) -> Invocation:
        shadows = self.table.shadows(endpoint) if self._shadow_sink is not None else []
        began = time.perf_counter()
        try:
            out = await self._forward(
                endpoint, body, content_type, accept, custom_attributes, target_variant, inference_id, target_model
            )
        except GatewayError as exc:
            if shadows and isinstance(exc.extra.get("VariantName"), str):
                status = exc.extra.get("OriginalStatusCode", 0)
                answer = (status if isinstance(status, int) else 0, exc.message.encode(), str(exc.extra["VariantName"]))
                self._mirror(endpoint, shadows, body, content_type, accept, inference_id, answer, began)
            raise
        if shadows:
            self._mirror(
                endpoint, shadows, body, content_type, accept, inference_id, (200, out.body, out.variant), began
            )
        return out

    async def invoke_stream(
        self,
        endpoint: str,
        body: bytes,
        content_type: str | None = None,
        accept: str | None = None,
        custom_attributes: str | None = None,
        target_variant: str | None = None,
        inference_id: str | None = None,
    ) -> Invocation:
        """InvokeEndpointWithResponseStream: routed as :meth:`invoke`, the instance's answer handed on as it
        arrives in ``stream``, which the caller must exhaust or close (shadow variants are not sent streams)."""
        return await self._forward(
            endpoint, body, content_type, accept, custom_attributes, target_variant, inference_id, stream=True
        )

    def _mirror(
        self,
        endpoint: str,
        shadows: list[ShadowRoute],
        body: bytes,
        content_type: str | None,
        accept: str | None,
        inference_id: str | None,
        production: tuple[int, bytes, str],
        began: float,
    ) -> None:
        """Copy the request to each shadow whose sample it falls in, in the background: the caller has its answer
        already and never waits on, or hears of, a shadow."""
        production_s = time.perf_counter() - began
        for shadow in shadows:
            if not shadow.route.instances or self._rng.random() >= shadow.fraction:
                continue
            if len(self._shadow_tasks) >= self._max_shadow:
                self.shadow_skipped += 1
                continue
            task = asyncio.get_running_loop().create_task(
                self._shadow(endpoint, shadow.route, body, content_type, accept, inference_id, production, production_s)
            )
            self._shadow_tasks.add(task)
            task.add_done_callback(self._shadow_tasks.discard)

    async def _shadow(
        self,
        endpoint: str,
        route: VariantRoute,
        body: bytes,
        content_type: str | None,
        accept: str | None,
        inference_id: str | None,
        production: tuple[int, bytes, str],
        production_s: float,
    ) -> None:
        picked = least_outstanding([(i.instance_id, i.outstanding) for i in route.instances], self._rng.random())
        instance = next((i for i in route.instances if i.instance_id == picked), None)
        if instance is None or self._shadow_sink is None:
            return
        headers = {"Content-Type": content_type or "application/octet-stream"}
        if accept:
            headers["Accept"] = accept
        status, payload = 0, b""
        instance.outstanding += 1
        began = time.perf_counter()
        try:
            answer = await self._upstream.post(instance.url, "/invocations", headers, body)
            status, payload = answer.status, answer.body
        except (UpstreamGone, TimeoutError) as exc:
            payload = f"the shadow variant could not be reached: {exc!r}".encode()
        finally:
            instance.outstanding -= 1
        result = ShadowResult(
            endpoint,
            production[2],
            route.name,
            inference_id,
            body,
            content_type or "application/octet-stream",
            production[0],
            production[1],
            production_s,
            status,
            payload,
            time.perf_counter() - began,
            time.time(),
        )
        try:
            self._shadow_sink(result)
        except Exception:  # a shadow's bookkeeping never reaches a caller
            log.exception("recording a shadow comparison failed")

    async def _forward(
        self,
        endpoint: str,
        body: bytes,
        content_type: str | None = None,
        accept: str | None = None,
        custom_attributes: str | None = None,
        target_variant: str | None = None,
        inference_id: str | None = None,
        target_model: str | None = None,
        stream: bool = False,
    ) -> Invocation:
        headers = {"Content-Type": content_type or "application/octet-stream"}
        if inference_id:
            headers[INFERENCE_ID] = inference_id
        if accept:
            headers["Accept"] = accept
        if custom_attributes:
            headers[CUSTOM_ATTRIBUTES] = custom_attributes
        if target_model is not None:
            try:
                target_model = check_target(target_model)
            except TargetError as exc:
                raise GatewayError("ValidationError", 400, str(exc)) from None
            headers[TARGET_HEADER] = target_model
        admitted: list[ServerlessGate] = []  # the serverless variant this request counts against, once chosen
        out: Invocation | None = None
        try:
            out = await self._attempts(endpoint, body, headers, target_variant, target_model, admitted, stream)
            return out
        finally:
            if admitted and (out is None or out.stream is None):  # a stream counts until it ends (_pieces)
                admitted[0].done()

    async def _attempts(
        self,
        endpoint: str,
        body: bytes,
        headers: dict[str, str],
        target_variant: str | None,
        target_model: str | None,
        admitted: list[ServerlessGate],
        stream: bool,
    ) -> Invocation:
        tried: frozenset[str] = frozenset()
        reloaded = False
        cold_starts = 0
        while True:  # ends: each turn excludes one more instance, and choose() raises when none is left
            try:
                variant, instance = self.choose(endpoint, target_variant, tried, target_model)
            except ColdVariant as cold:  # no instance yet: the request waits for the first to start
                if cold_starts:
                    raise GatewayError(
                        "ServiceUnavailable", 503, f"Endpoint {endpoint} could not start an instance; retry later."
                    ) from None
                cold_starts += 1
                await self._admit(endpoint, cold.gate, admitted)
                await cold.gate.warm()
                continue
            if variant.serverless is not None:
                await self._admit(endpoint, variant.serverless, admitted)
                if variant.serverless.in_flight > len(variant.instances):
                    variant.serverless.grow(variant.serverless.in_flight)
            path, load = "/invocations", None
            if variant.multi_model is not None:
                if target_model is None:
                    raise GatewayError(
                        "ValidationError",
                        400,
                        f"Endpoint {endpoint} is a multi-model endpoint: name the model to invoke with TargetModel.",
                    )
                load = await self._ensure_loaded(variant, instance, target_model)
                path = f"/models/{model_name(target_model)}/invoke"
            elif target_model is not None:
                raise GatewayError(
                    "ValidationError",
                    400,
                    f"Endpoint {endpoint} is not a multi-model endpoint and does not support target model header.",
                    {"ErrorCode": "TARGET_MODEL_HEADER_NOT_SUPPORTED"},
                )
            tried |= {instance.instance_id}
            instance.outstanding += 1
            began = time.perf_counter()
            streaming = False
            try:
                if stream:
                    resp = await self._client().post(f"{instance.url}{path}", data=body, headers=headers)
                    if resp.status == 200:  # handed on unread: the stream owns the response from here
                        streaming = True
                        return Invocation(
                            b"",
                            resp.headers.get("Content-Type", "application/octet-stream"),
                            variant.name,
                            resp.headers.get(CUSTOM_ATTRIBUTES),
                            None,
                            variant.config_name,
                            load,
                            stream=_pieces(resp, instance, variant.name, admitted[0] if admitted else None),
                        )
                    async with resp:
                        answer = Answer(resp.status, {}, await resp.read())
                else:
                    answer = await self._upstream.post(instance.url, path, headers, body)
                if answer.status == 404 and load is not None and not reloaded and self.model_loads is not None:
                    # the instance no longer holds the model (unloaded for room, or restarted): load, retry once
                    self.model_loads.forget(instance.instance_id, model_name(target_model or ""))
                    tried -= {instance.instance_id}
                    reloaded = True
                    continue
                if answer.status != 200:
                    text = answer.body[:_ORIGINAL_MESSAGE_MAX].decode("utf-8", "replace")
                    raise GatewayError(
                        "ModelError",
                        424,
                        f'Received client error ({answer.status}) from model with message "{text}".'
                        if answer.status < 500
                        else f'Received server error ({answer.status}) from model with message "{text}".',
                        {
                            "OriginalStatusCode": answer.status,
                            "OriginalMessage": text,
                            "VariantName": variant.name,
                            "ModelSeconds": time.perf_counter() - began,
                            "EndpointConfigName": variant.config_name,
                        },
                    )
                if load is not None and not variant.model_cache and target_model is not None:
                    self._uncache(instance, target_model)
                got = answer.headers
                return Invocation(
                    answer.body,
                    got.get("content-type", "application/octet-stream"),
                    variant.name,
                    got.get(_CUSTOM_ATTRIBUTES_LOW),
                    _model_s(got.get(TOTAL_MS), time.perf_counter() - began),
                    variant.config_name,
                    load,
                )
            except (UpstreamGone, aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                if self.model_loads is not None:
                    self.model_loads.forget_instance(instance.instance_id)
                continue  # the instance is gone (refused, reset): another instance may answer
            except TimeoutError:
                raise GatewayError(
                    "ModelError",
                    424,
                    'Received server error (0) from model with message "Your invocation timed out while waiting '
                    'for a response from container model."',
                    {
                        "OriginalStatusCode": 0,
                        "OriginalMessage": "timed out",
                        "VariantName": variant.name,
                        "ModelSeconds": time.perf_counter() - began,
                        "EndpointConfigName": variant.config_name,
                    },
                ) from None
            finally:
                if not streaming:
                    instance.outstanding -= 1

    @staticmethod
    async def _admit(endpoint: str, gate: ServerlessGate, admitted: list[ServerlessGate]) -> None:
        """Count the request against its serverless variant's MaxConcurrency, once; past it, refuse at once."""
        if admitted:
            return
        if not gate.admit():
            raise GatewayError(
                "ThrottlingException",
                429,
                f"Endpoint {endpoint} is at its MaxConcurrency of {gate.max_concurrency} concurrent requests; "
                "retry later.",
            )
        admitted.append(gate)

    def _uncache(self, instance: InstanceRoute, target: str) -> None:
        """ModelCacheSetting Disabled: unload the model after its request, in the background."""
        if self.model_loads is None:
            return
        self.model_loads.forget(instance.instance_id, model_name(target))

        async def run() -> None:
            try:
                await unload_model(self._client(), instance.url, target)
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.info("unloading %s from %s failed: %s", target, instance.instance_id, exc)

        task = asyncio.get_running_loop().create_task(run())
        self._shadow_tasks.add(task)  # tracked with the other background requests, cancelled at close
        task.add_done_callback(self._shadow_tasks.discard)

    async def preload(self, instance_id: str, url: str, prefix: str, targets: tuple[str, ...]) -> None:
        """Load and pin ``targets`` on a new multi-model instance before it takes traffic."""
        if self.model_loads is None:
            raise RuntimeError("multi-model endpoints are not enabled on this gateway")
        for target in targets:
            try:
                await self.model_loads.ensure(
                    self._client(), instance_id, url, prefix, check_target(target), pinned=True
                )
            except (LoadError, TargetError) as exc:
                raise RuntimeError(str(exc)) from None

    async def _ensure_loaded(self, variant: VariantRoute, instance: InstanceRoute, target: str) -> LoadOutcome:
        if self.model_loads is None or variant.multi_model is None:
            raise GatewayError("ValidationError", 400, "multi-model endpoints are not enabled on this gateway.")
        instance.outstanding += 1  # a load in progress counts as load: other models spill elsewhere meanwhile
        try:
            return await self.model_loads.ensure(
                self._client(), instance.instance_id, instance.url, variant.multi_model, target
            )
        except LoadError as exc:
            extra: dict[str, object] = {"VariantName": variant.name, "EndpointConfigName": variant.config_name}
            if exc.code == "ModelError":
                extra |= {"OriginalStatusCode": exc.original_status, "OriginalMessage": exc.message}
            raise GatewayError(exc.code, exc.status, exc.message, extra) from None
        finally:
            instance.outstanding -= 1

    async def drain_shadows(self) -> None:
        """Wait for the shadow copies in flight (tests, shutdown)."""
        while self._shadow_tasks:
            await asyncio.gather(*list(self._shadow_tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._shadow_tasks):
            task.cancel()
        await asyncio.gather(*list(self._shadow_tasks), return_exceptions=True)
        await self._upstream.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
            await asyncio.sleep(0)  # let the connector close its transports


async def _pieces(
    resp: aiohttp.ClientResponse, instance: InstanceRoute, variant: str, gate: ServerlessGate | None
) -> AsyncIterator[bytes]:
    """A streamed answer's pieces as they arrive; a stream the instance broke off (its chunked body ended without
    its last chunk: the model raised midway) is a GatewayError("ModelStreamError")."""
    try:
        async for piece in resp.content.iter_any():
            yield piece
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        raise GatewayError(
            "ModelStreamError",
            424,
            f"The model's response stream from variant {variant} broke off midway ({type(exc).__name__}).",
            {"ErrorCode": "ModelStreamError", "VariantName": variant},
        ) from None
    finally:
        resp.release()
        instance.outstanding -= 1
        if gate is not None:
            gate.done()


def _model_s(total_ms: str | None, round_trip_s: float) -> float:
    if total_ms:
        try:
            return float(total_ms) / 1e3
        except ValueError:
            pass
    return round_trip_s
