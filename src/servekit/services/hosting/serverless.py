"""Serverless variants (a ProductionVariant with ``ServerlessConfig`` and no instance type), as SageMaker runs
them: no process while idle; the first request starts one and waits for it (a cold start, published as
``ModelSetupTime``; the wait counts in ``OverheadLatency``); more start while more requests are in flight than
there are instances, up to ``MaxConcurrency``; past ``MaxConcurrency`` concurrent requests a request is refused at
once (ThrottlingException); ``ProvisionedConcurrency`` instances are kept warm; the others stop once the variant
has been idle for the plane's ``--serverless-idle-s``. ``MemorySizeInMB`` is each process's memory envelope.

This module holds the config's rules and the per-endpoint bookkeeping; the endpoint controller starts and stops the
instances (its capacity changes), the gateway counts requests (:class:`servekit.gateway.serverless.ServerlessGate`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from servekit.gateway.serverless import ServerlessGate
from servekit.gateway.service import GatewayError
from servekit.services.hosting.envelopes import Envelope

log = logging.getLogger(__name__)

DEFAULT_IDLE_S = 300.0  # how long an idle serverless variant keeps instances beyond its provisioned ones
MEMORY_SIZES = (1024, 2048, 3072, 4096, 5120, 6144)
SERVERLESS_TYPE = "serverless"  # the instance type a serverless variant's plan carries (no table entry, no price)


@dataclass(frozen=True, slots=True)
class ServerlessSpec:
    memory_mb: int
    max_concurrency: int
    provisioned: int = 0

    def describe(self) -> dict[str, int]:
        """CurrentServerlessConfig / DesiredServerlessConfig."""
        out = {"MemorySizeInMB": self.memory_mb, "MaxConcurrency": self.max_concurrency}
        if self.provisioned:
            out["ProvisionedConcurrency"] = self.provisioned
        return out


def serverless_spec(variant: Mapping[str, Any]) -> ServerlessSpec | None:
    config = variant.get("ServerlessConfig")
    if not config:
        return None
    return ServerlessSpec(
        int(config["MemorySizeInMB"]), int(config["MaxConcurrency"]), int(config.get("ProvisionedConcurrency") or 0)
    )


def check_variant(variant: Mapping[str, Any]) -> str | None:
    """What is wrong with a serverless variant's config (CreateEndpointConfig's ValidationException), or None."""
    spec = serverless_spec(variant)
    if spec is None:
        return None
    name = variant["VariantName"]
    if variant.get("InstanceType") or variant.get("InitialInstanceCount") is not None:
        return f"Variant {name} has a ServerlessConfig: it takes no InstanceType or InitialInstanceCount."
    if spec.memory_mb not in MEMORY_SIZES:
        sizes = ", ".join(str(m) for m in MEMORY_SIZES)
        return f"Variant {name}: ServerlessConfig.MemorySizeInMB must be one of {sizes}, not {spec.memory_mb}."
    if spec.provisioned > spec.max_concurrency:
        return (
            f"Variant {name}: ServerlessConfig.ProvisionedConcurrency ({spec.provisioned}) must not exceed "
            f"MaxConcurrency ({spec.max_concurrency})."
        )
    return None


def initial_count(variant: Mapping[str, Any]) -> int:
    """The instances a variant starts with: a serverless one's provisioned concurrency (often none)."""
    spec = serverless_spec(variant)
    return spec.provisioned if spec is not None else int(variant.get("InitialInstanceCount", 1))


def envelope(spec: ServerlessSpec) -> Envelope:
    """A serverless process's envelope: its memory size; one vCPU per 2 GB, as AWS scales compute with memory
    (priced per use, not per hour: no hourly price)."""
    return Envelope(max(1, spec.memory_mb // 2048), spec.memory_mb * 2**20, 0.0)


# The controller's capacity change for one variant: (variant, instance count) -> why it failed, or None.
Resize = Callable[[str, int], Coroutine[Any, Any, str | None]]


class ServerlessFleets:
    """One endpoint's serverless variants: their gates (kept across the routing table's rebuilds, so the count of
    requests in flight survives), cold starts, scale-out and the idle scale-in."""

    def __init__(self, endpoint: str, resize: Resize, instances: Callable[[str], int], idle_s: float) -> None:
        self._endpoint = endpoint
        self._resize = resize
        self._instances = instances
        self.idle_s = idle_s
        self._gates: dict[str, ServerlessGate] = {}
        self._specs: dict[str, ServerlessSpec] = {}
        self._starting: dict[str, asyncio.Task[str | None]] = {}

    def gate(self, variant: str, spec: ServerlessSpec | None) -> ServerlessGate | None:
        if spec is None:
            self._gates.pop(variant, None)
            self._specs.pop(variant, None)
            return None
        self._specs[variant] = spec
        gate = self._gates.get(variant)
        if gate is None or gate.max_concurrency != spec.max_concurrency:
            kept = gate.in_flight if gate is not None else 0
            gate = ServerlessGate(spec.max_concurrency, lambda: self._warm(variant), lambda n: self._grow(variant, n))
            gate.in_flight = kept
            self._gates[variant] = gate
        return gate

    async def _warm(self, variant: str) -> None:
        """A cold start: one instance, and the request that asked waits until it serves."""
        reason = await self._scale(variant, max(1, self._instances(variant)))
        if reason is not None or self._instances(variant) == 0:
            raise GatewayError(
                "ModelError",
                424,
                f'Received server error (0) from model with message "The serverless variant {variant} of endpoint '
                f'{self._endpoint} could not start: {reason or "no instance became healthy"}"',
                {"OriginalStatusCode": 0, "OriginalMessage": reason or "cold start failed", "VariantName": variant},
            )

    def _grow(self, variant: str, concurrent: int) -> None:
        """More requests in flight than instances: start more (up to MaxConcurrency) in the background."""
        spec = self._specs.get(variant)
        if spec is None or variant in self._starting:
            return
        wanted = min(spec.max_concurrency, concurrent)
        if wanted > self._instances(variant):
            self._start_scaling(variant, wanted)

    async def _scale(self, variant: str, count: int) -> str | None:
        """``count`` instances, after whatever change is under way (a scale-in that is still stopping an instance
        must end before a cold start can start one)."""
        while (running := self._starting.get(variant)) is not None:
            await asyncio.shield(running)
        return await asyncio.shield(self._start_scaling(variant, count))

    def _start_scaling(self, variant: str, count: int) -> asyncio.Task[str | None]:
        task: asyncio.Task[str | None] = asyncio.get_running_loop().create_task(self._resize(variant, count))
        self._starting[variant] = task
        task.add_done_callback(lambda _: self._starting.pop(variant, None))
        return task

    async def idle(self) -> None:
        """Stop what idle serverless variants have beyond their provisioned concurrency."""
        for variant, gate in list(self._gates.items()):
            spec = self._specs[variant]
            if variant in self._starting or self._instances(variant) <= spec.provisioned:
                continue
            if gate.in_flight == 0 and gate.idle_for() >= self.idle_s:
                log.info(
                    "endpoint %s: serverless variant %s idle for %.0f s: down to %d instance(s)",
                    self._endpoint,
                    variant,
                    gate.idle_for(),
                    spec.provisioned,
                )
                await self._scale(variant, spec.provisioned)
