"""CPU affinity per instance: disjoint CPU sets round-robin over the machine's CPUs while they last; an instance that
does not fit runs unpinned with an oversubscription warning (never refused, never clamped)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from servekit.backends.local import (
    CpuPinningBackend,
    CpuPool,
    InstanceHandle,
    InstanceSpec,
    assign_cpu_sets,
    pick_cpus,
)


def test_pick_takes_free_cpus_going_round_from_the_start() -> None:
    assert pick_cpus(2, [0, 1, 2, 3], in_use=set()) == (0, 1)
    assert pick_cpus(2, [0, 1, 2, 3], in_use={1}) == (0, 2)
    assert pick_cpus(3, [0, 1, 2, 3], in_use=set(), start=2) == (2, 3, 0)
    assert pick_cpus(2, [0, 1, 2, 3], in_use={0, 1, 2}) is None
    assert pick_cpus(1, [], in_use=set()) is None


def test_assignment_is_disjoint_round_robin_until_the_cpus_run_out() -> None:
    assert assign_cpu_sets([2, 2], [0, 1, 2, 3]) == [(0, 1), (2, 3)]
    assert assign_cpu_sets([1, 2, 1], [4, 5, 6, 7]) == [(4,), (5, 6), (7,)]
    assert assign_cpu_sets([2, 2, 1], [0, 1, 2, 3]) == [(0, 1), (2, 3), None]  # oversubscribed: unpinned
    assert assign_cpu_sets([8], [0, 1, 2, 3]) == [None]  # larger than the machine


def test_released_cpus_go_to_the_next_instance_and_round_robin_carries_on() -> None:
    pool = CpuPool([0, 1, 2, 3])
    assert pool.take("a", 2) == (0, 1)
    assert pool.take("b", 1) == (2,)
    pool.release("a")
    assert pool.take("c", 2) == (3, 0)
    assert pool.free() == 1
    assert pool.take("d", 2) is None


class Recording:
    def __init__(self) -> None:
        self.started: list[InstanceSpec] = []
        self.dead: set[str] = set()

    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        self.started.append(spec)
        return InstanceHandle(spec, "http://127.0.0.1:1")

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None:
        pass

    def alive(self, handle: InstanceHandle) -> bool:
        return handle.spec.instance_id not in self.dead

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        return ""

    async def close(self) -> None:
        pass


def test_the_backend_pins_while_cpus_last_then_warns(caplog: pytest.LogCaptureFixture) -> None:
    inner = Recording()
    backend = CpuPinningBackend(inner, CpuPool([0, 1, 2]))

    async def go() -> None:
        a = await backend.start(InstanceSpec("a", "m", "/m", vcpus=2))
        with caplog.at_level(logging.WARNING):
            b = await backend.start(InstanceSpec("b", "m", "/m", vcpus=2))
        assert (a.spec.cpus, b.spec.cpus) == ((0, 1), None)
        assert "oversubscribed: instance b asks for 2 vCPUs" in caplog.text
        await backend.stop(a)  # its CPUs are free again
        c = await backend.start(InstanceSpec("c", "m", "/m", vcpus=2))
        assert c.spec.cpus == (2, 0)
        inner.dead.add("c")
        assert not backend.alive(c)  # a dead instance (replaced by the supervisor, never stopped) frees its CPUs
        d = await backend.start(InstanceSpec("d", "m", "/m", vcpus=3))
        assert d.spec.cpus is not None and sorted(d.spec.cpus) == [0, 1, 2]

    asyncio.run(go())


def test_a_spec_with_its_own_cpus_is_left_alone() -> None:
    inner = Recording()
    backend = CpuPinningBackend(inner, CpuPool([0, 1]))
    asyncio.run(backend.start(InstanceSpec("a", "m", "/m", vcpus=1, cpus=(5,))))
    assert inner.started[0].cpus == (5,)
