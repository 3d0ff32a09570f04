"""An endpoint's fleets: the instances each variant runs, started through a ReplicaBackend, health-checked, replaced
when they die, and published to the gateway's routing table only once healthy.

An :class:`EndpointController` owns one endpoint. ``create`` brings a plan's fleets up (the endpoint turns
InService, or Failed with the reason an instance gave); ``update`` is a guarded deployment: the new (green) fleets
start beside the old (blue) ones and take traffic only when every instance is healthy, in the steps of a
:class:`~servekit.services.hosting.rollout.RolloutPolicy` (all at once, canary, linear, rolling batches), each baked
while its alarms are watched; then blue drains and stops — or, on an alarm or the time limit, all traffic goes back to
blue and green stops (``control.rollout`` decides, this module applies). ``set_capacity`` changes weights and
counts in place; ``tick`` replaces dead instances. Shadow variants are fleets too, published as the gateway's
shadow routes. Status changes are reported through ``on_status``: this module keeps no state on disk.

Whether an instance is healthy is asked of an :class:`InstanceProbe` (by default :class:`HttpProbe`, the instance's
own health and model-status routes over HTTP), and time is read and waited on through the ``clock`` and ``sleep``
handed in, so the controller runs on a manual clock with fake instances in a unit test.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeGuard

import aiohttp

from servekit.accelerators.placement import GpuShortage
from servekit.backends.local import InstanceHandle, InstanceSpec, ReplicaBackend
from servekit.gateway.service import InstanceRoute, RoutingTable, ShadowRoute, VariantRoute
from servekit.services.hosting import rollout
from servekit.services.hosting.rollout import RolloutPhase, RolloutPolicy, RolloutState
from servekit.services.hosting.serverless import DEFAULT_IDLE_S, ServerlessFleets, ServerlessSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class VariantPlan:
    name: str
    model_name: str
    model_dir: str
    instance_type: str
    vcpus: int
    memory_bytes: int | None
    count: int
    weight: float
    extra_args: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    multi_model: bool = False  # Mode MultiModel: model_dir is the ModelDataUrl prefix TargetModel is under
    model_cache: bool = True  # MultiModelConfig.ModelCacheSetting: Disabled unloads a model after each request
    preload: tuple[str, ...] = ()  # TargetModels loaded (and pinned) on each instance before it takes traffic
    serverless: ServerlessSpec | None = None  # a serverless variant: count is its provisioned concurrency
    gpus: int = 0  # GPUs each instance gets to itself (a GPU instance type's)
    isolated: bool = False  # the model's EnableNetworkIsolation: each instance in a network namespace of its own


@dataclass(frozen=True, slots=True)
class EndpointPlan:
    name: str
    config_name: str
    variants: tuple[VariantPlan, ...]
    shadows: tuple[VariantPlan, ...] = ()  # ShadowProductionVariants: fleets that get copies, never callers

    def shadow_fraction(self, shadow: VariantPlan) -> float:
        """The share of requests copied to ``shadow``: its weight relative to the production variants' total
        (production weight 1 and shadow weight 0.5 copy half the requests), at most all of them."""
        total = sum(v.weight for v in self.variants)
        return min(1.0, shadow.weight / total) if total > 0 else 0.0


@dataclass(slots=True)
class Instance:
    handle: InstanceHandle
    healthy: bool = False
    started: float = 0.0


@dataclass(slots=True)
class Fleet:
    plan: VariantPlan
    instances: list[Instance] = field(default_factory=list)
    config_name: str = ""  # the endpoint config this fleet was started for

    def healthy(self) -> list[Instance]:
        return [i for i in self.instances if i.healthy]


@dataclass(slots=True)
class Deployment:
    """An update under way: the new (green) fleets beside the live (blue) ones, and where its rollout stands."""

    plan: EndpointPlan
    fleets: dict[str, Fleet]
    policy: RolloutPolicy
    state: RolloutState
    wall_started: float  # epoch seconds, for DescribeEndpoint
    phase_wall: float = 0.0  # epoch seconds the current phase or step began

    def green_instances(self) -> int:
        return sum(v.count for v in self.plan.variants)


def _weight(value: float) -> float:
    """A weight as reported: a product of a set weight and a traffic share to 12 significant digits, so 0.7 at 70%
    reads 0.49 as the value set would, not 0.48999999999999994 (the routes keep the exact product)."""
    return float(f"{value:.12g}")


def _count(full: int, fraction: float) -> int:
    """Instances a fleet of ``full`` runs at ``fraction`` (a rolling batch rounds up: never 0 of a live fleet)."""
    return full if fraction >= 1.0 else max(0, min(full, math.ceil(full * fraction - 1e-9)))


def _no_alarms(names: Sequence[str]) -> Mapping[str, str]:
    return {}


def _staged(handle: InstanceHandle) -> TypeGuard[_Staged]:
    return callable(getattr(handle, "describe", None))


class _Staged(Protocol):
    def describe(self) -> dict[str, object]: ...


class InstanceFailed(Exception):
    """An instance cannot serve its model: the message is the endpoint's FailureReason."""


class InstanceProbe(Protocol):
    """How the controller asks a starting instance whether it can serve."""

    async def ready(self, url: str, path: str) -> bool:
        """Whether the instance at ``url`` answers its readiness route ``path`` with success (False if unreachable)."""
        ...

    async def model_error(self, url: str, model: str) -> str | None:
        """The load error of a model that will not serve on the instance at ``url``; None if none (yet)."""
        ...

    async def close(self) -> None: ...


class HttpProbe:
    """:class:`InstanceProbe` over HTTP: the KServe v2 / SageMaker readiness routes and TF Serving's model status."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        return self._session

    async def ready(self, url: str, path: str = "/v2/health/ready") -> bool:
        try:
            async with self._client().get(f"{url}{path}") as r:
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def model_error(self, url: str, model: str) -> str | None:
        """The load error of a version that will not serve (TF Serving status: END or ERROR with a message)."""
        try:
            async with self._client().get(f"{url}/v1/models/{model}") as r:
                if r.status != 200:
                    return None
                doc = await r.json()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        statuses = doc.get("model_version_status", []) if isinstance(doc, dict) else []
        if any(s.get("state") == "AVAILABLE" for s in statuses):
            return None
        errors = [
            s["status"]["error_message"]
            for s in statuses
            if s.get("state") in ("END", "ERROR") and s.get("status", {}).get("error_message")
        ]
        return errors[0] if errors else None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


StatusCallback = Callable[[str, str | None], Awaitable[None]]  # (EndpointStatus value, FailureReason)
# (endpoint config, variant, instance id, seconds from start to healthy): CloudWatch's ModelSetupTime
ReadyCallback = Callable[[str, str, str, float], None]
# (instance id, instance URL, ModelDataUrl prefix, TargetModels): load and pin them on a new multi-model instance
Preload = Callable[[str, str, str, tuple[str, ...]], Awaitable[None]]
AlarmStates = Callable[[Sequence[str]], Mapping[str, str]]  # alarm names -> their states (OK, ALARM, ...)
PhaseCallback = Callable[[RolloutState], None]


class EndpointController:
    def __init__(
        self,
        name: str,
        backend: ReplicaBackend,
        table: RoutingTable,
        on_status: StatusCallback,
        startup_timeout_s: float = 300.0,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        on_instance_ready: ReadyCallback | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        preload: Preload | None = None,
        probe: InstanceProbe | None = None,
        serverless_idle_s: float = DEFAULT_IDLE_S,
    ) -> None:
        """``probe`` (default: :class:`HttpProbe`) says whether a starting instance is healthy; ``clock`` and
        ``sleep`` are all the controller reads and waits on for startup timeouts, bakes, polls and drains;
        ``serverless_idle_s``: how long a serverless variant idles before its unprovisioned instances stop."""
        self.name = name
        self._on_ready = on_instance_ready
        self._sleep = sleep
        self._preload = preload
        self.deployment: Deployment | None = None  # the update under way, if any
        self._backend = backend
        self._table = table
        self._report = on_status
        self.last_reason: str | None = None  # the reason of the last status reported (a failure's, or None)
        self._startup_timeout_s = startup_timeout_s
        self._poll_s = poll_s
        self._clock = clock
        self._ids = itertools.count(1)
        self.plan: EndpointPlan | None = None
        self.fleets: dict[str, Fleet] = {}
        self._lock = asyncio.Lock()  # one change at a time: create, update, capacity, delete, tick
        self._probe: InstanceProbe = probe if probe is not None else HttpProbe()
        self.serverless = ServerlessFleets(name, self._resize_variant, self._serving, serverless_idle_s)

    async def _on_status(self, status: str, reason: str | None) -> None:
        self.last_reason = reason
        await self._report(status, reason)

    # ---- what the API calls ---------------------------------------------------------------------------
    async def create(self, plan: EndpointPlan) -> bool:
        """Bring the plan's fleets up: InService when every instance is healthy, else Failed (True if served)."""
        async with self._lock:
            try:
                fleets = await self._start_fleets(plan)
            except InstanceFailed as exc:
                await self._on_status("Failed", str(exc))
                return False
            self.plan, self.fleets = plan, fleets
            self._publish()
            await self._on_status("InService", None)
            return True

    async def update(
        self,
        plan: EndpointPlan,
        policy: RolloutPolicy | None = None,
        alarm_states: AlarmStates | None = None,
        on_phase: PhaseCallback | None = None,
    ) -> bool:
        """Blue/green (or rolling) to ``plan`` under ``policy`` (None: all at once, no bake): start the green
        fleets, shift traffic step by step while the policy's alarms stay quiet, bake, then drain and stop blue.
        A green fleet that fails to start is stopped and blue keeps serving; an alarm in ALARM (or the time limit)
        sends all traffic back to blue and stops green. True if the update took effect; ``last_reason`` says why
        not. ``on_phase`` hears each phase change (the hosting service records RollingBack from it)."""
        policy = policy or rollout.policy_from(None, sum(v.count for v in plan.variants))
        states = alarm_states or _no_alarms
        async with self._lock:
            deployment = Deployment(plan, {}, policy, rollout.start(self._clock()), time.time())
            self.deployment = deployment
            try:
                return await self._deploy(deployment, states, on_phase)
            finally:
                # green fleets neither made live (_finish) nor stopped (_roll_back): the update was cancelled
                # (servekit up stopping mid-rollout) or failed unexpectedly; they must not outlive it
                leftover, deployment.fleets = deployment.fleets, {}
                self.deployment = None
                self._publish()
                await self._stop_fleets(leftover)

    async def _deploy(self, d: Deployment, alarm_states: AlarmStates, on_phase: PhaseCallback | None) -> bool:
        def moved(new: rollout.RolloutState) -> None:
            changed = new.phase != d.state.phase or new.step != d.state.step
            d.state = new
            if changed:
                d.phase_wall = time.time()
                status = rollout.describe(d.policy, new, d.green_instances())[1]
                log.info("endpoint %s: deployment of %s: %s %s", self.name, d.plan.config_name, new.phase, status)
                if on_phase is not None:
                    on_phase(new)

        green_fraction, _ = d.state.fractions(d.policy)
        try:
            d.fleets = await self._start_fleets(d.plan, green_fraction)
        except InstanceFailed as exc:
            await self._on_status("InService", f"The update to {d.plan.config_name} failed: {exc}")
            return False
        moved(rollout.launched(d.state, self._clock()))
        while True:
            phase = d.state.phase
            if phase is RolloutPhase.ROLLING_BACK:
                await self._roll_back(d)
                moved(rollout.rolled_back(d.state, self._clock()))
                await self._on_status("InService", d.state.reason)
                return False
            if phase is RolloutPhase.DELETING:
                await self._finish(d)
                moved(rollout.finished(d.state, self._clock()))
                await self._on_status("InService", None)
                return True
            if not d.state.applied:
                try:
                    await self._apply(d)
                except InstanceFailed as exc:
                    moved(rollout.abort(d.state, self._clock(), f"Rolled back: the new fleet could not grow: {exc}"))
                    continue
                moved(rollout.applied(d.state, self._clock()))
            due = rollout.next_change_s(d.policy, d.state, self._clock())
            await self._sleep(self._poll_s if due is None else min(self._poll_s, due))
            await self._replace_dead([*self.fleets.values(), *d.fleets.values()])  # bakes can be long
            alarms = alarm_states(d.policy.alarms) if d.policy.alarms else {}
            moved(rollout.advance(d.policy, d.state, alarms, self._clock()))

    async def _apply(self, d: Deployment) -> None:
        """Make the fleets look as the deployment's state asks: green's instance count first (new instances are
        healthy before they count), then the traffic shares, then blue's count (leaving instances drain first)."""
        green_fraction, blue_fraction = d.state.fractions(d.policy)
        for fleet in d.fleets.values():
            await self._resize(fleet, _count(fleet.plan.count, green_fraction))
        self._publish()
        for fleet in self.fleets.values():
            await self._resize(fleet, _count(fleet.plan.count, blue_fraction))
        self._publish()

    async def _resize(self, fleet: Fleet, count: int) -> None:
        while len(fleet.instances) > count:  # newest first, after they leave the routing table
            gone, routes = fleet.instances.pop(), self._routes()
            self._publish()
            await self._drain_and_stop(gone, routes.get(gone.handle.spec.instance_id))
        if len(fleet.instances) < count:
            await self._grow(fleet, count)

    async def _roll_back(self, d: Deployment) -> None:
        """All traffic back on blue (grown back to full size first where a rolling update had shrunk it), then
        green drains and stops."""
        for fleet in self.fleets.values():
            try:
                await self._resize(fleet, fleet.plan.count)
            except InstanceFailed as exc:  # blue serves with what it has
                log.error("endpoint %s: restoring %s during a rollback failed: %s", self.name, fleet.plan.name, exc)
        green, routes = d.fleets, self._routes()
        d.fleets = {}
        self._publish()  # green leaves the routing table here
        await asyncio.gather(
            *(
                self._drain_and_stop(i, routes.get(i.handle.spec.instance_id))
                for f in green.values()
                for i in f.instances
            )
        )

    async def _finish(self, d: Deployment) -> None:
        """Green becomes the endpoint's fleet; blue drains and stops."""
        old, routes = self.fleets, self._routes()
        self.plan, self.fleets = d.plan, d.fleets
        d.fleets = {}
        # green is the endpoint's own fleet now: no deployment share may scale its weights (with the deployment
        # still set, its Deleting phase would give the new fleet weight 0 while blue drains)
        self.deployment = None
        self._publish()
        await asyncio.gather(
            *(self._drain_and_stop(i, routes.get(i.handle.spec.instance_id)) for f in old.values() for i in f.instances)
        )

    async def set_capacity(self, changes: Mapping[str, tuple[float | None, int | None]]) -> str | None:
        """New weights and/or instance counts for variants (UpdateEndpointWeightsAndCapacities). None when done;
        else why a scale-out failed, after the variant's desired count was set back to the instances it has
        (SageMaker rolls a failed capacity change back)."""
        failed: list[str] = []
        async with self._lock:
            assert self.plan is not None
            variants = []
            for v in self.plan.variants:
                weight, count = changes.get(v.name, (None, None))
                variants.append(
                    replace(v, weight=v.weight if weight is None else weight, count=v.count if count is None else count)
                )
            self.plan = replace(self.plan, variants=tuple(variants))
            for v in variants:
                fleet = self.fleets[v.name]
                fleet.plan = v
                while len(fleet.instances) > v.count:  # scale in: newest first, after they leave the table
                    gone, routes = fleet.instances.pop(), self._routes()
                    self._publish()
                    await self._drain_and_stop(gone, routes.get(gone.handle.spec.instance_id))
                self._publish()
                if len(fleet.instances) < v.count:
                    try:
                        await self._grow(fleet)
                    except InstanceFailed as exc:
                        log.warning("endpoint %s: scaling %s out failed: %s", self.name, v.name, exc)
                        failed.append(f"scaling variant {v.name} out to {v.count} instance(s) failed: {exc}")
                        fleet.plan = replace(v, count=len(fleet.instances))
            if failed:
                self.plan = replace(self.plan, variants=tuple(self.fleets[v.name].plan for v in variants))
            self._publish()
            reason = "; ".join(failed) or None
            await self._on_status("InService", reason)
            return reason

    async def _resize_variant(self, variant: str, count: int) -> str | None:
        """One variant's instance count (a serverless variant starting or stopping capacity)."""
        return await self.set_capacity({variant: (None, count)})

    def _serving(self, variant: str) -> int:
        fleet = self.fleets.get(variant)
        return len(fleet.healthy()) if fleet is not None else 0

    async def delete(self) -> None:
        async with self._lock:
            self._table.remove_endpoint(self.name)
            await self._stop_fleets(self.fleets)
            self.fleets = {}
            await self._probe.close()

    async def tick(self) -> None:
        """Replace instances that died (the endpoint stays InService while the others serve); stop what idle
        serverless variants do not need."""
        if not self._lock.locked():
            await self.serverless.idle()
        if self._lock.locked():
            return  # a change is under way and replaces its own fleets' dead instances
        async with self._lock:
            await self._replace_dead(list(self.fleets.values()))

    async def _replace_dead(self, fleets: Sequence[Fleet]) -> None:
        """Start a replacement for each instance that died, keeping each fleet at the size it had."""
        for fleet in fleets:
            dead = [i for i in fleet.instances if not self._backend.alive(i.handle)]
            if not dead:
                continue
            size = len(fleet.instances)
            for i in dead:
                log.warning("endpoint %s: %s; replacing it", self.name, i.handle.exit_reason)
                fleet.instances.remove(i)
            self._publish()
            try:
                await self._grow(fleet, size)
            except InstanceFailed as exc:
                log.error("endpoint %s: replacing an instance of %s failed: %s", self.name, fleet.plan.name, exc)
            self._publish()

    def summary(self) -> list[dict[str, object]]:
        """Per variant: weight and instance counts, as DescribeEndpoint reports them (during a deployment, the
        live fleet's share of traffic is its weight times what the new fleet has not taken yet)."""
        if self.plan is None:
            return []
        d = self.deployment
        blue_share = 1.0 - (d.state.green_share(d.policy) if d is not None else 0.0)
        out: list[dict[str, object]] = []
        for v in self.plan.variants:
            item: dict[str, object] = {
                "VariantName": v.name,
                "CurrentWeight": _weight(v.weight * blue_share),
                "DesiredWeight": v.weight if d is None else 0.0,
                "CurrentInstanceCount": len(self.fleets[v.name].healthy()) if v.name in self.fleets else 0,
                "DesiredInstanceCount": v.count,
            }
            if v.serverless is not None:
                item["CurrentServerlessConfig"] = item["DesiredServerlessConfig"] = v.serverless.describe()
            # a pipeline-parallel instance's stages (hosting.pipeline's handles describe them; a servekit key)
            stages = [i.handle.describe() for i in self.fleets.get(v.name, Fleet(v)).instances if _staged(i.handle)]
            if stages:
                item["ServekitPipelineStages"] = stages
            out.append(item)
        return out

    def pending_summary(self) -> dict[str, object] | None:
        """DescribeEndpoint's PendingDeploymentSummary while a deployment runs: the new fleet's variants with the
        share of traffic they have now, their instance counts and the step they are at."""
        d = self.deployment
        if d is None:
            return None
        share = d.state.green_share(d.policy)
        status, message = rollout.describe(d.policy, d.state, d.green_instances())
        variants: list[dict[str, object]] = []
        for v in d.plan.variants:
            fleet = d.fleets.get(v.name)
            variants.append(
                {
                    "VariantName": v.name,
                    "CurrentWeight": _weight(v.weight * share),
                    "DesiredWeight": v.weight,
                    "CurrentInstanceCount": len(fleet.healthy()) if fleet is not None else 0,
                    "DesiredInstanceCount": v.count,
                    "InstanceType": v.instance_type,
                    # until the first phase change, the phase began when the deployment did (not at epoch 0)
                    "VariantStatus": [
                        {"Status": status, "StatusMessage": message, "StartTime": d.phase_wall or d.wall_started}
                    ],
                }
            )
        return {"EndpointConfigName": d.plan.config_name, "StartTime": d.wall_started, "ProductionVariants": variants}

    # ---- fleets ------------------------------------------------------------------------------------------
    def _publish(self) -> None:
        if self.plan is None:
            return
        d = self.deployment
        green_share = d.state.green_share(d.policy) if d is not None else 0.0
        routes = [
            VariantRoute(
                v.name,
                v.weight * (1.0 - green_share),
                [InstanceRoute(i.handle.spec.instance_id, i.handle.url) for i in self.fleets[v.name].healthy()],
                self.plan.config_name,
                v.model_dir if v.multi_model else None,
                v.model_cache,
                self.serverless.gate(v.name, v.serverless),
            )
            for v in self.plan.variants
            if v.name in self.fleets
        ]
        if d is not None:
            routes += [
                VariantRoute(
                    v.name,
                    v.weight * green_share,
                    [InstanceRoute(i.handle.spec.instance_id, i.handle.url) for i in d.fleets[v.name].healthy()],
                    d.plan.config_name,
                    v.model_dir if v.multi_model else None,
                    v.model_cache,
                    self.serverless.gate(v.name, v.serverless),
                )
                for v in d.plan.variants
                if v.name in d.fleets
            ]
        self._table.set_endpoint(self.name, routes)
        self._table.set_shadows(
            self.name,
            [
                ShadowRoute(
                    VariantRoute(
                        v.name,
                        v.weight,
                        [InstanceRoute(i.handle.spec.instance_id, i.handle.url) for i in self.fleets[v.name].healthy()],
                        self.plan.config_name,
                    ),
                    self.plan.shadow_fraction(v),
                )
                for v in self.plan.shadows
                if v.name in self.fleets
            ],
        )

    def shadow_summary(self) -> list[dict[str, object]]:
        """DescribeEndpoint's ShadowProductionVariants."""
        if self.plan is None:
            return []
        return [
            {
                "VariantName": v.name,
                "CurrentWeight": v.weight,
                "DesiredWeight": v.weight,
                "CurrentInstanceCount": len(self.fleets[v.name].healthy()) if v.name in self.fleets else 0,
                "DesiredInstanceCount": v.count,
            }
            for v in self.plan.shadows
        ]

    async def _start_fleets(self, plan: EndpointPlan, fraction: float = 1.0) -> dict[str, Fleet]:
        """``plan``'s fleets, each at ``fraction`` of its count (a rolling update's first batch), all healthy."""
        fleets = {v.name: Fleet(v, config_name=plan.config_name) for v in (*plan.variants, *plan.shadows)}
        try:
            await asyncio.gather(*(self._grow(f, _count(f.plan.count, fraction)) for f in fleets.values()))
        except InstanceFailed:
            await self._stop_fleets(fleets)
            raise
        return fleets

    async def _grow(self, fleet: Fleet, count: int | None = None) -> None:
        """Start instances until the fleet has ``count`` (default: its plan's), each healthy before it counts."""
        missing = (fleet.plan.count if count is None else count) - len(fleet.instances)
        if missing <= 0:
            return
        new: list[Instance] = []
        try:
            for _ in range(missing):
                new.append(await self._start(fleet.plan))
        except InstanceFailed:  # no room for one (its GPUs): the ones already started stop with it
            await asyncio.gather(*(self._backend.stop(i.handle) for i in new))
            raise
        fleet.instances.extend(new)
        results = await asyncio.gather(
            *(self._wait_healthy(i, fleet.plan, fleet.config_name) for i in new), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            for i in new:
                if i in fleet.instances:
                    fleet.instances.remove(i)
            await asyncio.gather(*(self._backend.stop(i.handle) for i in new))
            first = failures[0]
            raise first if isinstance(first, InstanceFailed) else InstanceFailed(str(first))

    async def _start(self, v: VariantPlan) -> Instance:
        spec = InstanceSpec(
            instance_id=f"{self.name}-{v.name}-{next(self._ids)}",
            model_name=v.model_name,
            model_dir=v.model_dir,
            vcpus=v.vcpus,
            memory_bytes=v.memory_bytes,
            environment=dict(v.environment),
            extra_args=v.extra_args,
            multi_model=v.multi_model,
            gpus=v.gpus,
            isolated=v.isolated,
        )
        try:
            handle = await self._backend.start(spec)
        except GpuShortage as exc:  # the endpoint's FailureReason: "ml.g4dn.xlarge needs 1 GPU, this machine has 0"
            raise InstanceFailed(f"{v.instance_type} {exc}") from None
        return Instance(handle, started=self._clock())

    async def _wait_healthy(self, instance: Instance, v: VariantPlan, config_name: str) -> None:
        """Poll the instance until its model is available; fail on a load error, an exit or the timeout."""
        deadline = instance.started + self._startup_timeout_s
        url = instance.handle.url
        while True:
            if not self._backend.alive(instance.handle):
                tail = self._backend.log_tail(instance.handle, 5)
                raise InstanceFailed(f"{instance.handle.exit_reason} before it was healthy. Last log lines: {tail}")
            error = None if v.multi_model else await self._probe.model_error(url, v.model_name)
            if error is not None:
                raise InstanceFailed(f"The model {v.model_name} failed to load: {error}")
            if await self._probe.ready(url, "/ping" if v.multi_model else "/v2/health/ready"):
                if v.multi_model and v.preload and self._preload is not None:
                    try:
                        await self._preload(instance.handle.spec.instance_id, url, v.model_dir, v.preload)
                    except Exception as exc:
                        raise InstanceFailed(f"preloading {', '.join(v.preload)} failed: {exc}") from exc
                instance.healthy = True
                if self._on_ready is not None:
                    self._on_ready(
                        config_name, v.name, instance.handle.spec.instance_id, self._clock() - instance.started
                    )
                return
            if self._clock() > deadline:
                raise InstanceFailed(
                    f"instance {instance.handle.spec.instance_id} did not pass its health check within "
                    f"{self._startup_timeout_s:.0f} s"
                )
            await self._sleep(self._poll_s)

    def _routes(self) -> dict[str, InstanceRoute]:
        """The gateway's live route objects (with their outstanding counts) for this endpoint's instances."""
        return {i.instance_id: i for v in self._table.variants(self.name) or [] for i in v.instances}

    async def _drain_and_stop(self, instance: Instance, route: InstanceRoute | None, drain_s: float = 30.0) -> None:
        """Stop an instance that no longer takes new traffic, once the requests it holds have finished."""
        deadline = self._clock() + drain_s
        while route is not None and route.outstanding > 0 and self._clock() < deadline:
            await self._sleep(self._poll_s)
        await self._backend.stop(instance.handle)

    async def _stop_fleets(self, fleets: Mapping[str, Fleet]) -> None:
        await asyncio.gather(*(self._backend.stop(i.handle) for f in fleets.values() for i in f.instances))
