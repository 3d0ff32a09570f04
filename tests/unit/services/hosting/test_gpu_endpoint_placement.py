"""An endpoint on a GPU instance type is placed only where its instances' GPUs are free: each instance holds its
own cards (GpuPool), and one that finds too few ends the endpoint Failed with the counts in FailureReason, stopping
the instances already started. The controller runs on virtual time over the fake backend of
test_endpoint_controller, with the GPU pool the local backend uses in front of it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.unit.services.hosting.test_endpoint_controller import Harness, plan, run

from servekit.accelerators.inventory import Gpu
from servekit.accelerators.placement import GpuPool, GpuShortage
from servekit.backends.local import InstanceHandle, InstanceSpec, LocalProcessBackend
from servekit.services.hosting.fleet import VariantPlan

T4 = Gpu(0, "Tesla T4", 16 * 2**30)


def gpu_variant(name: str, count: int, instance_type: str = "ml.g4dn.xlarge", gpus: int = 1) -> VariantPlan:
    return VariantPlan(name, "m1", "/models/m1", instance_type, 4, None, count, 1.0, gpus=gpus)


def with_gpus(h: Harness, gpus: tuple[Gpu, ...]) -> GpuPool:
    """The harness's backend, placing GPU instances through a pool over ``gpus`` as LocalProcessBackend does."""
    pool = GpuPool(lambda: gpus)
    inner_start, inner_stop = h.backend.start, h.backend.stop

    async def start(spec: InstanceSpec) -> InstanceHandle:
        devices = pool.acquire(spec.instance_id, spec.gpus) if spec.gpus else ()
        handle = await inner_start(spec)
        handle.gpu_indices = devices
        return handle

    async def stop(handle: InstanceHandle, grace_s: float = 10.0) -> None:
        pool.release(handle.spec.instance_id)
        await inner_stop(handle, grace_s)

    h.backend.start = start  # type: ignore[method-assign]
    h.backend.stop = stop  # type: ignore[method-assign]
    return pool


def test_a_gpu_endpoint_on_a_machine_without_gpus_fails_with_the_counts() -> None:
    h = Harness()
    with_gpus(h, ())

    async def main() -> None:
        assert await h.controller.create(plan(gpu_variant("A", 1))) is False

    run(main)
    assert h.statuses == [("Failed", "ml.g4dn.xlarge needs 1 GPU, this machine has 0")]
    assert h.backend.started == []


def test_each_instance_gets_its_own_gpu_and_the_one_without_fails_the_endpoint() -> None:
    h = Harness()
    pool = with_gpus(h, (T4,))

    async def main() -> None:
        assert await h.controller.create(plan(gpu_variant("A", 2))) is False

    run(main)
    assert h.statuses == [("Failed", "ml.g4dn.xlarge needs 1 GPU, this machine has 1 (0 free)")]
    assert h.backend.started == ["ep-A-1"] and h.backend.stopped == ["ep-A-1"]  # the first stops with it
    assert pool.held() == {}


def test_gpu_instances_hold_distinct_cards_while_serving() -> None:
    h = Harness()
    pool = with_gpus(h, (T4, Gpu(1, "Tesla T4", 16 * 2**30)))

    async def main() -> None:
        assert await h.controller.create(plan(gpu_variant("A", 2))) is True

    run(main)
    assert h.statuses == [("InService", None)]
    assert pool.held() == {"ep-A-1": (0,), "ep-A-2": (1,)}
    assert sorted(i.handle.gpu_indices for i in h.controller.fleets["A"].instances) == [(0,), (1,)]


def test_the_local_backend_refuses_before_starting_a_process(tmp_path: Path) -> None:
    backend = LocalProcessBackend(tmp_path, gpus=GpuPool(lambda: ()))
    with pytest.raises(GpuShortage, match=r"^needs 4 GPUs, this machine has 0$"):
        asyncio.run(backend.start(InstanceSpec("ep-A-1", "m", "/m", vcpus=48, gpus=4)))
    assert list(tmp_path.iterdir()) == []  # no log, no pid file: nothing was started
