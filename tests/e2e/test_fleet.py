"""Endpoint fleets with real `servekit serve` instances: create, route, replace a killed instance, blue/green
update, scale, a model that cannot load, delete."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from servekit.backends.local import LocalProcessBackend
from servekit.gateway.service import Gateway, RoutingTable
from servekit.services.hosting.fleet import EndpointController, EndpointPlan, VariantPlan
from servekit.services.hosting.rollout import policy_from
from servekit.testing.hosting import scaling_model

pytestmark = pytest.mark.e2e


def variant(name: str, model_dir: Path, count: int = 1, weight: float = 1.0) -> VariantPlan:
    return VariantPlan(name, "m", str(model_dir), "ml.t2.medium", 1, None, count, weight)


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.backend = LocalProcessBackend(tmp / "logs", watch_interval_s=0.2)
        self.table = RoutingTable()
        self.gateway = Gateway(self.table, random.Random(0))
        self.statuses: list[tuple[str, str | None]] = []

        async def on_status(status: str, reason: str | None) -> None:
            self.statuses.append((status, reason))

        self.ctl = EndpointController("ep", self.backend, self.table, on_status, startup_timeout_s=60)

    async def ask(self, x: float = 1.0) -> tuple[str, list[float]]:
        import json

        out = await self.gateway.invoke("ep", json.dumps([x]).encode(), "application/json")
        return out.variant, json.loads(out.body)["out"]

    async def close(self) -> None:
        await self.ctl.delete()
        await self.gateway.close()
        await self.backend.close()


def run(tmp: Path, main: Callable[[Harness], Awaitable[None]]) -> None:
    async def go() -> None:
        h = Harness(tmp)
        try:
            await main(h)
        finally:
            await h.close()

    asyncio.run(go())


def test_create_route_replace_update_scale_delete(tmp_path: Path) -> None:
    v1, v2 = scaling_model(tmp_path, "one", 2.0), scaling_model(tmp_path, "two", 10.0)

    async def main(h: Harness) -> None:
        plan = EndpointPlan("ep", "cfg1", (variant("A", v1, count=2),))
        assert await h.ctl.create(plan)
        assert h.statuses[-1] == ("InService", None)
        assert await h.ask(3.0) == ("A", [6.0])
        pids = {i.handle.pid for i in h.ctl.fleets["A"].instances}
        assert len(pids) == 2

        # A killed instance is replaced; the other keeps answering meanwhile.
        victim = h.ctl.fleets["A"].instances[0].handle
        os.kill(victim.pid or 0, signal.SIGKILL)
        assert await h.ask() == ("A", [2.0])
        while h.backend.alive(victim):
            await asyncio.sleep(0.05)
        await h.ctl.tick()
        now = {i.handle.pid for i in h.ctl.fleets["A"].instances}
        assert len(now) == 2 and victim.pid not in now
        assert "exited" in (victim.exit_reason or "")

        # Blue/green to a new model: the answers switch, the old processes end.
        blue = [i.handle for i in h.ctl.fleets["A"].instances]
        assert await h.ctl.update(EndpointPlan("ep", "cfg2", (variant("B", v2),)))
        assert await h.ask() == ("B", [10.0])
        assert not any(h.backend.alive(b) for b in blue)  # the old fleet has been stopped
        assert {i.handle.pid for i in h.ctl.fleets["B"].instances}.isdisjoint(now)

        # Scale out and back in.
        await h.ctl.set_capacity({"B": (None, 2)})
        assert len(h.ctl.fleets["B"].healthy()) == 2
        await h.ctl.set_capacity({"B": (None, 1)})
        assert len(h.ctl.fleets["B"].instances) == 1
        assert h.ctl.summary() == [
            {
                "VariantName": "B",
                "CurrentWeight": 1.0,
                "DesiredWeight": 1.0,
                "CurrentInstanceCount": 1,
                "DesiredInstanceCount": 1,
            }
        ]

    run(tmp_path, main)


def test_a_model_that_cannot_load_fails_the_endpoint_with_its_reason(tmp_path: Path) -> None:
    bad = scaling_model(tmp_path, "bad", 1.0, broken=True)

    async def main(h: Harness) -> None:
        assert not await h.ctl.create(EndpointPlan("ep", "cfg", (variant("A", bad),)))
        status, reason = h.statuses[-1]
        assert status == "Failed"
        assert reason is not None and "weights file is corrupt" in reason and "failed to load" in reason
        assert h.table.variants("ep") is None  # nothing was ever published

    run(tmp_path, main)


def test_a_failed_update_keeps_the_old_fleet_serving(tmp_path: Path) -> None:
    good, bad = scaling_model(tmp_path, "good", 2.0), scaling_model(tmp_path, "bad", 1.0, broken=True)

    async def main(h: Harness) -> None:
        assert await h.ctl.create(EndpointPlan("ep", "cfg1", (variant("A", good),)))
        assert not await h.ctl.update(EndpointPlan("ep", "cfg2", (variant("B", bad),)))
        status, reason = h.statuses[-1]
        assert status == "InService" and reason is not None and "cfg2" in reason
        assert await h.ask() == ("A", [2.0])

    run(tmp_path, main)


def test_an_update_cancelled_mid_rollout_stops_its_green_fleet(tmp_path: Path) -> None:
    """servekit up stopping during a canary bake cancels the update: the green instances it started must end with
    it (they used to outlive the control plane), and blue keeps the endpoint."""
    v1, v2 = scaling_model(tmp_path, "one", 2.0), scaling_model(tmp_path, "two", 10.0)
    canary = {
        "BlueGreenUpdatePolicy": {
            "TrafficRoutingConfiguration": {
                "Type": "CANARY",
                "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 1},
                "WaitIntervalInSeconds": 3600,  # a bake the test never waits out
            }
        }
    }

    async def main(h: Harness) -> None:
        assert await h.ctl.create(EndpointPlan("ep", "cfg1", (variant("A", v1, count=2),)))
        blue = [i.handle for i in h.ctl.fleets["A"].instances]
        update = asyncio.create_task(
            h.ctl.update(EndpointPlan("ep", "cfg2", (variant("B", v2, count=2),)), policy_from(canary, 2))
        )
        while not (h.ctl.deployment and any(f.healthy() for f in h.ctl.deployment.fleets.values())):
            assert not update.done(), update
            await asyncio.sleep(0.05)
        green = [i.handle for f in h.ctl.deployment.fleets.values() for i in f.instances]
        update.cancel()
        with pytest.raises(asyncio.CancelledError):
            await update
        assert green and not any(h.backend.alive(g) for g in green)
        assert all(h.backend.alive(b) for b in blue)
        assert h.ctl.deployment is None and set(h.ctl.fleets) == {"A"}

    run(tmp_path, main)
