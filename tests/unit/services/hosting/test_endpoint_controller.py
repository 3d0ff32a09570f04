"""EndpointController on fakes: no process, no socket, no real-time wait.

Instances come from a fake ReplicaBackend (made-up loopback URLs, alive while the test says so), their health from a
fake InstanceProbe answering from what the test sets, and time is virtual: each test runs on a
:class:`~servekit.testing.clock.VirtualTimeLoop`, the controller's ``clock`` is the loop's time and its ``sleep``
an ``asyncio.sleep`` that the loop skips ahead through (and that records what it was asked to wait), so a 300 s
startup timeout or a 10 minute bake takes no time and is exact.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from servekit.backends.local import InstanceHandle, InstanceSpec
from servekit.gateway.service import RoutingTable
from servekit.services.hosting import rollout
from servekit.services.hosting.fleet import EndpointController, EndpointPlan, VariantPlan
from servekit.services.hosting.rollout import RolloutPhase, RolloutPolicy, RolloutState
from servekit.testing.clock import run_virtual

POLL_S = 0.5


def now() -> float:
    return asyncio.get_running_loop().time()


class FakeBackend:
    """Instances that exist only here: ``start`` hands out a loopback URL nobody listens on; an instance is alive
    until it is stopped or the test ``kill``s it. Each stop records which instance ids the gateway routed to at that
    moment, so a test can tell whether traffic left an instance before it stopped."""

    def __init__(self, table: RoutingTable, endpoint: str) -> None:
        self._table = table
        self._endpoint = endpoint
        self._ports = itertools.count(40001)
        self.handles: dict[str, InstanceHandle] = {}
        self.live: set[str] = set()
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.routed_at_stop: dict[str, set[str]] = {}
        self.exit_on_start: dict[str, str] = {}  # instance id -> the exit reason it dies with as soon as it starts
        self.logs: dict[str, list[str]] = {}

    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        handle = InstanceHandle(spec, f"http://127.0.0.1:{next(self._ports)}")
        self.handles[spec.instance_id] = handle
        self.started.append(spec.instance_id)
        if spec.instance_id in self.exit_on_start:
            handle.exit_reason = self.exit_on_start[spec.instance_id]
        else:
            self.live.add(spec.instance_id)
        return handle

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None:
        iid = handle.spec.instance_id
        self.stopped.append(iid)
        self.routed_at_stop[iid] = routed_ids(self._table, self._endpoint)
        self.live.discard(iid)

    def alive(self, handle: InstanceHandle) -> bool:
        return handle.spec.instance_id in self.live

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        return "\n".join(self.logs.get(handle.spec.instance_id, [])[-lines:])

    async def close(self) -> None:
        pass

    def kill(self, instance_id: str, reason: str) -> None:
        self.live.discard(instance_id)
        self.handles[instance_id].exit_reason = reason

    def url(self, instance_id: str) -> str:
        return self.handles[instance_id].url


class FakeProbe:
    """Health answers from what the test sets: an instance is ready ``boot_s`` seconds (virtual) after it was first
    probed unless ``ready`` says otherwise for its URL; ``model_errors`` maps a model name to its load error."""

    def __init__(self) -> None:
        self.boot_s = 0.0
        self.ready_default = True
        self.ready_by_url: dict[str, bool] = {}
        self.model_errors: dict[str, str] = {}
        self.first_probe: dict[str, float] = {}
        self.paths: list[str] = []
        self.closed = False

    async def ready(self, url: str, path: str) -> bool:
        self.paths.append(path)
        first = self.first_probe.setdefault(url, now())
        if not self.ready_by_url.get(url, self.ready_default):
            return False
        return now() - first >= self.boot_s

    async def model_error(self, url: str, model: str) -> str | None:
        self.first_probe.setdefault(url, now())
        return self.model_errors.get(model)

    async def close(self) -> None:
        self.closed = True


@dataclass
class Harness:
    table: RoutingTable = field(default_factory=RoutingTable)
    probe: FakeProbe = field(default_factory=FakeProbe)
    statuses: list[tuple[str, str | None]] = field(default_factory=list)
    ready: list[tuple[str, str, str, float]] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)
    startup_timeout_s: float = 300.0
    backend: FakeBackend = field(init=False)
    controller: EndpointController = field(init=False)

    def __post_init__(self) -> None:
        self.backend = FakeBackend(self.table, "ep")

        async def on_status(status: str, reason: str | None) -> None:
            self.statuses.append((status, reason))

        async def sleep(seconds: float) -> None:
            self.sleeps.append(seconds)
            await asyncio.sleep(seconds)

        self.controller = EndpointController(
            "ep",
            self.backend,
            self.table,
            on_status,
            startup_timeout_s=self.startup_timeout_s,
            poll_s=POLL_S,
            clock=now,
            on_instance_ready=lambda c, v, i, s: self.ready.append((c, v, i, s)),
            sleep=sleep,
            probe=self.probe,
        )

    def routes(self) -> list[tuple[str, float, str, list[str]]]:
        """(variant, weight, endpoint config, instance ids) as the gateway sees them."""
        variants = self.table.variants("ep")
        assert variants is not None, "the endpoint has no routes"
        return [(v.name, v.weight, v.config_name, [i.instance_id for i in v.instances]) for v in variants]


def routed_ids(table: RoutingTable, endpoint: str) -> set[str]:
    return {i.instance_id for v in table.variants(endpoint) or [] for i in v.instances}


def variant(name: str, count: int = 1, weight: float = 1.0, model: str = "m1") -> VariantPlan:
    return VariantPlan(name, model, f"/models/{model}", "ml.m5.large", 2, None, count, weight)


def plan(*variants: VariantPlan, config: str = "cfg-1", shadows: Sequence[VariantPlan] = ()) -> EndpointPlan:
    return EndpointPlan("ep", config, tuple(variants), tuple(shadows))


def run(main: Callable[[], Awaitable[object]]) -> None:
    """``main`` on virtual time, failing (not hanging) if it has not finished after a virtual hour."""
    run_virtual(lambda: asyncio.wait_for(main(), 3600))


# ---- create ----------------------------------------------------------------------------------------------------
def test_create_publishes_only_healthy_instances_with_the_plans_weights_and_reports_in_service() -> None:
    h = Harness()
    h.probe.boot_s = 2.0

    async def main() -> None:
        task = asyncio.create_task(h.controller.create(plan(variant("A", count=2, weight=3.0), variant("B"))))
        await asyncio.sleep(1.0)  # instances started, none healthy yet
        assert h.backend.started == ["ep-A-1", "ep-A-2", "ep-B-3"]
        assert h.table.variants("ep") is None
        assert h.statuses == []
        assert await task is True

    run(main)
    assert h.routes() == [("A", 3.0, "cfg-1", ["ep-A-1", "ep-A-2"]), ("B", 1.0, "cfg-1", ["ep-B-3"])]
    urls = {i.instance_id: i.url for v in h.table.variants("ep") or [] for i in v.instances}
    assert urls == {iid: h.backend.url(iid) for iid in ("ep-A-1", "ep-A-2", "ep-B-3")}
    assert h.statuses == [("InService", None)]
    assert h.table.shadows("ep") == []
    assert set(h.probe.paths) == {"/v2/health/ready"}
    summary = {s["VariantName"]: (s["CurrentInstanceCount"], s["CurrentWeight"]) for s in h.controller.summary()}
    assert summary == {"A": (2, 3.0), "B": (1, 1.0)}


def test_create_publishes_a_shadow_fleet_as_a_shadow_route_with_its_fraction() -> None:
    h = Harness()
    run(lambda: h.controller.create(plan(variant("A", weight=2.0), shadows=[variant("S", weight=1.0, model="m2")])))
    assert h.routes() == [("A", 2.0, "cfg-1", ["ep-A-1"])]
    (shadow,) = h.table.shadows("ep")
    assert (shadow.route.name, shadow.fraction, [i.instance_id for i in shadow.route.instances]) == (
        "S",
        0.5,
        ["ep-S-2"],
    )


def test_create_fails_with_the_load_error_of_a_model_that_does_not_load() -> None:
    h = Harness()
    h.probe.model_errors["m2"] = "weights file is corrupt"

    async def main() -> None:
        assert await h.controller.create(plan(variant("A"), variant("B", count=2, model="m2"))) is False

    run(main)
    assert h.statuses == [("Failed", "The model m2 failed to load: weights file is corrupt")]
    assert h.controller.last_reason == "The model m2 failed to load: weights file is corrupt"
    assert h.table.variants("ep") is None
    assert sorted(h.backend.stopped) == ["ep-A-1", "ep-B-2", "ep-B-3"]  # the healthy variant's instance too
    assert h.backend.live == set()
    assert h.controller.fleets == {}


def test_create_fails_when_an_instance_exits_before_it_is_healthy() -> None:
    h = Harness()
    h.probe.ready_default = False
    h.backend.logs["ep-A-1"] = ["loading m1", "ImportError: No module named 'handler'"]

    async def main() -> None:
        task = asyncio.create_task(h.controller.create(plan(variant("A"))))
        await asyncio.sleep(5.0)
        h.backend.kill("ep-A-1", "instance ep-A-1 exited with code 1")
        assert await task is False

    run(main)
    ((status, reason),) = h.statuses
    assert status == "Failed"
    assert reason == (
        "instance ep-A-1 exited with code 1 before it was healthy. Last log lines: "
        "loading m1\nImportError: No module named 'handler'"
    )
    assert h.table.variants("ep") is None


def test_create_fails_at_the_startup_timeout_on_the_injected_clock_and_sleep() -> None:
    h = Harness(startup_timeout_s=30.0)
    h.probe.ready_default = False
    elapsed: list[float] = []

    async def main() -> None:
        t0 = now()
        assert await h.controller.create(plan(variant("A"))) is False
        elapsed.append(now() - t0)

    run(main)
    assert h.statuses == [("Failed", "instance ep-A-1 did not pass its health check within 30 s")]
    assert 30.0 < elapsed[0] <= 30.0 + 2 * POLL_S
    # every wait went through the injected sleep: the controller never sleeps on its own
    assert h.sleeps and set(h.sleeps) == {POLL_S} and sum(h.sleeps) == pytest.approx(elapsed[0])
    assert h.backend.stopped == ["ep-A-1"]


def test_on_instance_ready_gets_the_setup_time_from_the_clock() -> None:
    h = Harness()
    h.probe.boot_s = 2.0
    run(lambda: h.controller.create(plan(variant("A"), variant("B"))))
    assert sorted(h.ready) == [
        ("cfg-1", "A", "ep-A-1", pytest.approx(2.0)),
        ("cfg-1", "B", "ep-B-2", pytest.approx(2.0)),
    ]


# ---- tick --------------------------------------------------------------------------------------------------------
def test_tick_replaces_a_dead_instance_and_republishes() -> None:
    h = Harness()

    async def main() -> None:
        await h.controller.create(plan(variant("A", count=2)))
        h.backend.kill("ep-A-1", "instance ep-A-1 was killed (memory)")
        await h.controller.tick()

    run(main)
    assert h.backend.started == ["ep-A-1", "ep-A-2", "ep-A-3"]
    assert h.routes() == [("A", 1.0, "cfg-1", ["ep-A-2", "ep-A-3"])]
    assert h.statuses == [("InService", None)]  # the endpoint never left service


def test_tick_with_a_replacement_that_fails_keeps_serving_from_the_survivors() -> None:
    h = Harness()

    async def main() -> None:
        await h.controller.create(plan(variant("A", count=2)))
        h.backend.kill("ep-A-1", "instance ep-A-1 exited with code 137")
        h.backend.exit_on_start["ep-A-3"] = "instance ep-A-3 exited with code 1"
        await h.controller.tick()

    run(main)
    assert h.routes() == [("A", 1.0, "cfg-1", ["ep-A-2"])]
    assert "ep-A-3" in h.backend.stopped


# ---- set_capacity ------------------------------------------------------------------------------------------------
def test_set_capacity_grows_and_shrinks_a_variant_and_changes_weights() -> None:
    h = Harness()
    results: list[str | None] = []

    async def main() -> None:
        await h.controller.create(plan(variant("A"), variant("B")))
        h.probe.boot_s = 2.0
        task = asyncio.create_task(h.controller.set_capacity({"A": (None, 3), "B": (0.25, None)}))
        await asyncio.sleep(1.0)  # the new instances are starting: not routed to yet
        assert h.backend.started[-2:] == ["ep-A-3", "ep-A-4"]
        assert routed_ids(h.table, "ep") == {"ep-A-1", "ep-B-2"}
        results.append(await task)
        assert h.routes() == [("A", 1.0, "cfg-1", ["ep-A-1", "ep-A-3", "ep-A-4"]), ("B", 0.25, "cfg-1", ["ep-B-2"])]
        results.append(await h.controller.set_capacity({"A": (None, 1)}))

    run(main)
    assert results == [None, None]
    assert h.routes() == [("A", 1.0, "cfg-1", ["ep-A-1"]), ("B", 0.25, "cfg-1", ["ep-B-2"])]
    assert h.backend.stopped == ["ep-A-4", "ep-A-3"]  # newest first
    assert all(iid not in h.backend.routed_at_stop[iid] for iid in h.backend.stopped)  # out of the table first
    assert h.statuses == [("InService", None)] * 3
    assert h.controller.plan is not None
    assert [(v.name, v.count, v.weight) for v in h.controller.plan.variants] == [("A", 1, 1.0), ("B", 1, 0.25)]


def test_set_capacity_reports_a_failure_when_a_new_instance_cannot_start() -> None:
    h = Harness()
    results: list[str | None] = []
    h.backend.exit_on_start["ep-A-2"] = "instance ep-A-2 exited with code 1"
    h.backend.logs["ep-A-2"] = ["MemoryError"]

    async def main() -> None:
        await h.controller.create(plan(variant("A")))
        results.append(await h.controller.set_capacity({"A": (None, 2)}))

    run(main)
    reason = (
        "scaling variant A out to 2 instance(s) failed: instance ep-A-2 exited with code 1 before it was healthy. "
        "Last log lines: MemoryError"
    )
    assert results == [reason]
    assert h.statuses == [("InService", None), ("InService", reason)]
    assert h.routes() == [("A", 1.0, "cfg-1", ["ep-A-1"])]
    assert h.controller.plan is not None and h.controller.plan.variants[0].count == 1  # the change is rolled back
    assert h.backend.stopped == ["ep-A-2"]


def test_scale_in_drains_an_instances_outstanding_requests_before_stopping_it() -> None:
    h = Harness()

    async def main() -> None:
        await h.controller.create(plan(variant("A", count=2)))
        (route,) = [i for v in h.table.variants("ep") or [] for i in v.instances if i.instance_id == "ep-A-2"]
        route.outstanding = 1
        task = asyncio.create_task(h.controller.set_capacity({"A": (None, 1)}))
        await asyncio.sleep(10.0)
        assert routed_ids(h.table, "ep") == {"ep-A-1"}  # no new traffic...
        assert h.backend.stopped == []  # ...but it finishes what it holds
        route.outstanding = 0
        await task
        assert h.backend.stopped == ["ep-A-2"]

    run(main)


# ---- update --------------------------------------------------------------------------------------------------------
def test_all_at_once_update_brings_green_up_moves_traffic_and_stops_blue() -> None:
    h = Harness()
    phases: list[RolloutPhase] = []
    results: list[bool] = []

    async def main() -> None:
        await h.controller.create(plan(variant("A", count=2)))
        new = plan(variant("A", count=1, model="m2"), config="cfg-2")
        results.append(await h.controller.update(new, on_phase=lambda s: phases.append(s.phase)))

    run(main)
    assert results == [True]
    assert h.backend.started == ["ep-A-1", "ep-A-2", "ep-A-3"]
    assert h.routes() == [("A", 1.0, "cfg-2", ["ep-A-3"])]
    assert sorted(h.backend.stopped) == ["ep-A-1", "ep-A-2"]
    for blue in ("ep-A-1", "ep-A-2"):  # traffic had moved to green before blue stopped
        assert h.backend.routed_at_stop[blue] == {"ep-A-3"}
    assert h.statuses == [("InService", None), ("InService", None)]
    assert h.controller.plan is not None and h.controller.plan.config_name == "cfg-2"
    assert h.controller.deployment is None
    assert phases[0] is RolloutPhase.ACTIVATING and phases[-2:] == [RolloutPhase.DELETING, RolloutPhase.DONE]


def test_update_whose_green_fleet_fails_to_start_keeps_blue_serving() -> None:
    h = Harness()
    h.probe.model_errors["m2"] = "unsupported op"
    results: list[bool] = []

    async def main() -> None:
        await h.controller.create(plan(variant("A")))
        results.append(await h.controller.update(plan(variant("A", model="m2"), config="cfg-2")))

    run(main)
    assert results == [False]
    reason = "The update to cfg-2 failed: The model m2 failed to load: unsupported op"
    assert h.statuses[-1] == ("InService", reason)
    assert h.routes() == [("A", 1.0, "cfg-1", ["ep-A-1"])]
    assert h.backend.stopped == ["ep-A-2"]


def blue_green(kind: str, size: int, wait_s: float, termination_s: float = 0.0) -> dict[str, Any]:
    size_key = {"CANARY": "CanarySize", "LINEAR": "LinearStepSize"}[kind]
    return {
        "BlueGreenUpdatePolicy": {
            "TrafficRoutingConfiguration": {
                "Type": kind,
                size_key: {"Type": "CAPACITY_PERCENT", "Value": size},
                "WaitIntervalInSeconds": wait_s,
            },
            "TerminationWaitInSeconds": termination_s,
        },
        "AutoRollbackConfiguration": {"Alarms": [{"AlarmName": "errors"}]},
    }


@pytest.mark.parametrize(("kind", "size", "share"), [("CANARY", 25, 0.25), ("LINEAR", 50, 0.5)])
def test_an_alarm_during_a_guarded_update_rolls_back_to_blue_and_stops_green(
    kind: str, size: int, share: float
) -> None:
    h = Harness()
    policy = rollout.policy_from(blue_green(kind, size, wait_s=600.0), 2)
    seen: list[tuple[float, list[tuple[str, float, str, list[str]]]]] = []
    phases: list[RolloutPhase] = []
    results: list[bool] = []
    t0: list[float] = []

    def alarms(names: Sequence[str]) -> Mapping[str, str]:
        elapsed = now() - t0[0]
        seen.append((elapsed, h.routes()))
        return dict.fromkeys(names, "ALARM" if elapsed >= 120.0 else "OK")

    async def main() -> None:
        await h.controller.create(plan(variant("A", count=2)))
        t0.append(now())
        new = plan(variant("A", count=2, model="m2"), config="cfg-2")
        results.append(await h.controller.update(new, policy, alarms, lambda s: phases.append(s.phase)))
        assert now() - t0[0] < 130.0  # it did not wait out the 600 s bake

    run(main)
    assert results == [False]
    # while the step baked, green had its share of the traffic and blue the rest
    assert seen[0][1] == [
        ("A", pytest.approx(1.0 - share), "cfg-1", ["ep-A-1", "ep-A-2"]),
        ("A", pytest.approx(share), "cfg-2", ["ep-A-3", "ep-A-4"]),
    ]
    assert phases[-2:] == [RolloutPhase.ROLLING_BACK, RolloutPhase.ROLLED_BACK]
    reason = h.controller.last_reason
    assert reason is not None and "alarm errors went into ALARM" in reason and f"at {share:.0%} of traffic" in reason
    assert h.statuses[-1] == ("InService", reason)
    assert h.routes() == [("A", 1.0, "cfg-1", ["ep-A-1", "ep-A-2"])]
    assert sorted(h.backend.stopped) == ["ep-A-3", "ep-A-4"]
    assert all(h.backend.routed_at_stop[g] == {"ep-A-1", "ep-A-2"} for g in ("ep-A-3", "ep-A-4"))
    assert h.controller.plan is not None and h.controller.plan.config_name == "cfg-1"


def test_a_canary_update_bakes_each_step_for_its_wait_on_the_clock() -> None:
    h = Harness()
    policy = rollout.policy_from(blue_green("CANARY", 50, wait_s=300.0, termination_s=120.0), 2)
    changes: list[tuple[float, RolloutPhase, int]] = []
    t0: list[float] = []

    def on_phase(state: RolloutState) -> None:
        changes.append((now() - t0[0], state.phase, state.step))

    async def main() -> None:
        await h.controller.create(plan(variant("A", count=2)))
        t0.append(now())
        new = plan(variant("A", count=2, model="m2"), config="cfg-2")
        assert await h.controller.update(new, policy, lambda names: dict.fromkeys(names, "OK"), on_phase) is True

    run(main)
    assert [(round(t), phase, step) for t, phase, step in changes] == [
        (0, RolloutPhase.ACTIVATING, 0),
        (300, RolloutPhase.ACTIVATING, 1),
        (300, RolloutPhase.BAKING, 1),
        (420, RolloutPhase.DELETING, 1),
        (420, RolloutPhase.DONE, 1),
    ]
    assert h.routes() == [("A", 1.0, "cfg-2", ["ep-A-3", "ep-A-4"])]
    assert sorted(h.backend.stopped) == ["ep-A-1", "ep-A-2"]


def test_weights_during_a_canary_read_as_the_values_set_not_float_products() -> None:
    """Issue 30, item 7: variant weight 0.7 with 30% on the new fleet read 0.48999999999999994 (0.7 x 0.7)."""
    h = Harness()
    policy = rollout.policy_from(blue_green("CANARY", 30, wait_s=300.0), 2)
    seen: list[tuple[list[dict[str, object]], dict[str, object] | None]] = []

    def alarms(names: Sequence[str]) -> Mapping[str, str]:
        seen.append((h.controller.summary(), h.controller.pending_summary()))
        return dict.fromkeys(names, "OK")

    async def main() -> None:
        await h.controller.create(plan(variant("A", count=2, weight=0.7)))
        new = plan(variant("A", count=2, weight=0.7, model="m2"), config="cfg-2")
        assert await h.controller.update(new, policy, alarms, lambda s: None) is True

    run(main)
    live, pending = seen[0]
    assert pending is not None
    variants = pending["ProductionVariants"]
    assert isinstance(variants, list)
    green = variants[0]
    assert (live[0]["CurrentWeight"], green["CurrentWeight"]) == (0.49, 0.21)


def test_a_rolling_update_replaces_blue_batch_by_batch() -> None:
    h = Harness()
    policy = RolloutPolicy(
        "ROLLING",
        (
            rollout.TrafficStep(0.5, 60.0, green_fraction=0.5, blue_fraction=0.5),
            rollout.TrafficStep(1.0, 60.0, green_fraction=1.0, blue_fraction=0.0),
        ),
    )
    seen: list[set[str]] = []

    async def main() -> None:
        await h.controller.create(plan(variant("A", count=2)))
        new = plan(variant("A", count=2, model="m2"), config="cfg-2")
        task = asyncio.create_task(h.controller.update(new, policy))
        await asyncio.sleep(30.0)  # mid first batch
        seen.append(routed_ids(h.table, "ep"))
        assert await task is True

    run(main)
    assert seen == [{"ep-A-1", "ep-A-3"}]  # one green instance up, one blue instance gone
    assert h.routes() == [("A", 1.0, "cfg-2", ["ep-A-3", "ep-A-4"])]
    assert sorted(h.backend.stopped) == ["ep-A-1", "ep-A-2"]


# ---- delete --------------------------------------------------------------------------------------------------------
def test_delete_stops_every_instance_and_removes_the_routes() -> None:
    h = Harness()

    async def main() -> None:
        await h.controller.create(plan(variant("A", count=2), shadows=[variant("S", model="m2")]))
        assert h.table.variants("ep") is not None and h.table.shadows("ep")
        await h.controller.delete()

    run(main)
    assert sorted(h.backend.stopped) == ["ep-A-1", "ep-A-2", "ep-S-3"]
    assert h.backend.live == set()
    assert h.table.variants("ep") is None
    assert h.table.shadows("ep") == []
    assert h.controller.fleets == {}
    assert h.probe.closed
