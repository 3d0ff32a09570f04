"""Serverless variants' rules and bookkeeping (issue 29), without processes: the config checks SageMaker makes,
the gate that counts requests against MaxConcurrency, a cold start that asks for one instance and waits, scale-out
in the background, the idle scale-in to the provisioned count on an injected clock, and a cold start that waits for
a scale-in still under way."""

from __future__ import annotations

import asyncio

import pytest

from servekit.gateway.serverless import ServerlessGate
from servekit.gateway.service import GatewayError
from servekit.services.hosting.serverless import (
    ServerlessFleets,
    ServerlessSpec,
    check_variant,
    envelope,
    initial_count,
)


def variant(**config: int) -> dict[str, object]:
    return {"VariantName": "A", "ModelName": "m", "ServerlessConfig": config}


def test_configs_are_checked_as_sagemaker_checks_them() -> None:
    assert check_variant(variant(MemorySizeInMB=2048, MaxConcurrency=5)) is None
    assert "one of 1024, 2048" in (check_variant(variant(MemorySizeInMB=1000, MaxConcurrency=5)) or "")
    assert "must not exceed" in (
        check_variant(variant(MemorySizeInMB=1024, MaxConcurrency=2, ProvisionedConcurrency=3)) or ""
    )
    assert "takes no InstanceType" in (
        check_variant({**variant(MemorySizeInMB=1024, MaxConcurrency=1), "InstanceType": "ml.m5.large"}) or ""
    )
    assert check_variant({"VariantName": "B", "InstanceType": "ml.m5.large"}) is None  # not serverless
    assert initial_count(variant(MemorySizeInMB=1024, MaxConcurrency=2)) == 0
    assert initial_count(variant(MemorySizeInMB=1024, MaxConcurrency=2, ProvisionedConcurrency=2)) == 2
    assert initial_count({"InitialInstanceCount": 3}) == 3
    e = envelope(ServerlessSpec(6144, 10))
    assert e.memory_bytes == 6144 * 2**20 and e.vcpus == 3 and e.price_per_hour == 0.0


def test_the_gate_admits_up_to_max_concurrency() -> None:
    now = [10.0]

    async def warm() -> None:
        pass

    gate = ServerlessGate(2, warm, lambda n: None, clock=lambda: now[0])
    assert gate.admit() and gate.admit()
    assert not gate.admit()  # the third is refused, not queued
    assert gate.idle_for() == 0.0
    gate.done()
    now[0] = 12.5
    gate.done()
    now[0] = 14.0
    assert gate.idle_for() == 1.5


class FakeController:
    def __init__(self) -> None:
        self.instances = 0
        self.calls: list[int] = []
        self.release = asyncio.Event()
        self.release.set()

    async def resize(self, variant: str, count: int) -> str | None:
        self.calls.append(count)
        await self.release.wait()
        self.instances = count
        return None


def test_a_cold_start_asks_for_one_instance_and_the_idle_variant_goes_back_to_provisioned() -> None:
    async def go() -> None:
        fake = FakeController()
        fleets = ServerlessFleets("ep", fake.resize, lambda v: fake.instances, idle_s=60.0)
        gate = fleets.gate("A", ServerlessSpec(1024, 4, provisioned=0))
        assert gate is not None
        assert fleets.gate("A", ServerlessSpec(1024, 4)) is gate  # kept across the routing table's rebuilds
        await gate.warm()
        assert fake.calls == [1] and fake.instances == 1
        gate.grow(3)  # three in flight on one instance: more start, in the background
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert fake.calls == [1, 3]
        now = [0.0]
        gate.clock = lambda: now[0]
        gate.admit()
        gate.done()
        now[0] = 30.0
        await fleets.idle()
        assert fake.calls == [1, 3]  # idle 30 s of 60: kept
        now[0] = 61.0
        await fleets.idle()
        assert fake.calls == [1, 3, 0] and fake.instances == 0

    asyncio.run(go())


def test_a_cold_start_waits_for_a_scale_in_under_way_then_starts_one() -> None:
    async def go() -> None:
        fake = FakeController()
        fake.instances = 1
        fleets = ServerlessFleets("ep", fake.resize, lambda v: fake.instances, idle_s=0.0)
        gate = fleets.gate("A", ServerlessSpec(1024, 2))
        assert gate is not None
        fake.release.clear()
        idle = asyncio.ensure_future(fleets.idle())  # stopping the instance...
        await asyncio.sleep(0)
        warm = asyncio.ensure_future(gate.warm())  # ...while a request arrives
        await asyncio.sleep(0)
        fake.release.set()
        await asyncio.gather(idle, warm)
        assert fake.calls == [0, 1] and fake.instances == 1

    asyncio.run(go())


def test_a_cold_start_that_cannot_start_an_instance_is_a_model_error() -> None:
    async def go() -> None:
        async def broken(variant: str, count: int) -> str | None:
            return "the model failed to load"

        fleets = ServerlessFleets("ep", broken, lambda v: 0, idle_s=1.0)
        gate = fleets.gate("A", ServerlessSpec(1024, 2))
        assert gate is not None
        with pytest.raises(GatewayError) as failed:
            await gate.warm()
        assert failed.value.code == "ModelError" and "the model failed to load" in failed.value.message

    asyncio.run(go())
