"""Each endpoint's fleets brought to what its endpoint config asks, in the background: created, updated through a
guarded rollout, rescaled, torn down, recovered after a restart and kept alive (dead instances replaced).

The hosting API (:mod:`servekit.services.hosting.api`) validates a request, records it and hands the work here, so
CreateEndpoint answers at once with ``Creating`` as the real service does; this records each result as the
endpoint's next status (``InService``, ``Failed`` with the reason, ...) unless the endpoint has moved on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.names import Account, ResourceKind
from servekit.backends.local import CpuPinningBackend, CpuPool, ReplicaBackend
from servekit.gateway.service import RoutingTable
from servekit.services.hosting.capture import CaptureDestination, capture_args
from servekit.services.hosting.envelopes import Envelopes
from servekit.services.hosting.fleet import AlarmStates, EndpointController, EndpointPlan, Preload, VariantPlan
from servekit.services.hosting.framework import FrameworkError, FrameworkModels
from servekit.services.hosting.instance_types import InstanceType, Machine, oversubscription, this_machine
from servekit.services.hosting.lifecycle import EndpointStatus, check_transition
from servekit.services.hosting.pipeline import PipelineBackend
from servekit.services.hosting.rollout import RolloutPhase, RolloutPolicy, RolloutState
from servekit.services.hosting.serverless import (
    DEFAULT_IDLE_S,
    SERVERLESS_TYPE,
    initial_count,
    serverless_spec,
)
from servekit.services.hosting.serverless import envelope as serverless_envelope
from servekit.services.hosting.store import Hosting
from servekit.services.hosting.store_rows import EndpointRow, NotFound, StaleStatus, VariantState

log = logging.getLogger(__name__)

_E = EndpointStatus

ModelResolver = Callable[[str], str]  # ModelDataUrl -> a local servekit model directory (raises with a reason)
Retain = Mapping[str, tuple[float | None, int | None]]  # variant -> the live (weight, count) to keep, None: not kept


def no_config(account: Account, name: str) -> ApiError:
    return validation_exception(
        f'Could not find endpoint configuration "{account.arn(ResourceKind.ENDPOINT_CONFIG, name)}".'
    )


class Orchestrator:
    def __init__(
        self,
        repo: Hosting,
        backend: ReplicaBackend,
        table: RoutingTable,
        envelopes: Envelopes,
        resolve_model: ModelResolver,
        account: Account | None = None,
        startup_timeout_s: float = 300.0,
        machine: Machine | None = None,
        cpus: Sequence[int] | None = None,
        on_instance_ready: Callable[[str, str, str, str, float], None] | None = None,
        alarm_states: AlarmStates | None = None,
        preload: Preload | None = None,
        framework_dir: Path | None = None,
        serverless_idle_s: float = DEFAULT_IDLE_S,
        pipeline_dir: Path | None = None,
        capture_destination: CaptureDestination | None = None,
    ) -> None:
        """``machine`` (default: this one) is what oversubscription is judged against; ``cpus`` (default: the CPUs
        this process may run on) are handed out to instances as their own CPU sets while enough are free.
        ``alarm_states`` (alarm names -> their states) is what a deployment's AutoRollbackConfiguration watches.
        ``framework_dir``: where framework models' version folders are composed (None: such models are refused).
        ``pipeline_dir``: where models split into pipeline stages are kept (None: no pipeline parallelism).
        ``capture_destination``: where instances write a DataCaptureConfig's DestinationS3Uri (None: there)."""
        self.repo = repo
        if cpus is None:
            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self._backend: ReplicaBackend = CpuPinningBackend(backend, CpuPool(cpus))
        if pipeline_dir is not None:  # OPTION_PIPELINE_PARALLEL_DEGREE: an instance as its stages, each pinned apart
            self._backend = PipelineBackend(self._backend, pipeline_dir)
        self._machine = machine
        self.warnings: dict[str, list[str]] = {}  # endpoint -> oversubscription warnings of its current plan
        self._table = table
        self._envelopes = envelopes
        self._resolve_model = resolve_model
        self.framework = FrameworkModels(resolve_model, framework_dir)  # SAGEMAKER_PROGRAM on a framework image
        self.account = account or Account()
        self._startup_timeout_s = startup_timeout_s
        self.controllers: dict[str, EndpointController] = {}
        # (endpoint, endpoint config, variant, instance id, setup seconds) each time an instance turns healthy
        self._on_instance_ready = on_instance_ready
        self._alarm_states = alarm_states
        self._preload = preload  # multi-model instances: load and pin SERVEKIT_MME_PRELOAD before traffic
        self._tasks: set[asyncio.Task[None]] = set()
        self._serverless_idle_s = serverless_idle_s
        # (endpoint, variant) -> the instances an IC-based variant runs for its inference components' copies
        self.ic_instances: Callable[[str, str], int] | None = None
        self._capture_destination = capture_destination

    # ---- what the API asks for (each runs in the background; its result lands as the endpoint's status) --------
    def create(self, name: str, config_name: str) -> None:
        """CreateEndpoint: Creating -> InService, or Failed with the reason."""
        self.background(self._bring_up(self.controller(name), config_name))

    def update(
        self,
        name: str,
        config_name: str,
        policy: RolloutPolicy | None,
        deployment: Mapping[str, Any] | None,
        retain: Retain,
    ) -> None:
        """UpdateEndpoint: the guarded rollout, Updating -> (RollingBack ->) InService."""
        self.background(self._update(self.controller(name), config_name, policy, deployment, retain))

    def scale(self, name: str, changes: Retain) -> None:
        """UpdateEndpointWeightsAndCapacities: Updating -> InService (or RollingBack -> InService)."""
        self.background(self._scale(name, changes))

    def delete(self, name: str) -> None:
        """DeleteEndpoint: the fleets stopped, the routes and the record removed."""
        self.background(self._tear_down(name))

    def retained(self, name: str, excluded: set[str]) -> dict[str, tuple[float | None, int | None]]:
        """RetainAllVariantProperties: the live weights and instance counts to keep, by variant name, less the
        properties named in ``excluded`` (``DesiredWeight``, ``DesiredInstanceCount``)."""
        controller = self.controllers.get(name)
        if controller is None or controller.plan is None:
            return {}
        return {
            v.name: (
                None if "DesiredWeight" in excluded else v.weight,
                None if "DesiredInstanceCount" in excluded else v.count,
            )
            for v in controller.plan.variants
        }

    def _config(self, name: str) -> Any:
        row = self.repo.get_endpoint_config(name)
        if row is None:
            raise no_config(self.account, name)
        return row

    def cost_per_hour(self, row: EndpointRow) -> float:
        """What the endpoint's instances would cost an hour in the cloud: each variant's instance type's list price
        times its desired instance count, summed (US dollars); 0 while it runs no instances (Failed, OutOfService)."""
        if row.status in (_E.FAILED, _E.OUT_OF_SERVICE):
            return 0.0
        config = self.repo.get_endpoint_config(row.config_name)
        if config is None:
            return 0.0
        controller = self.controllers.get(row.name)
        if controller is not None and controller.plan is not None and controller.plan.config_name == config.name:
            counts = {v.name: v.count for v in controller.plan.variants}
        else:
            counts = {v.name: v.desired_instance_count for v in row.variants}
        total = 0.0
        for v in config.variants:
            env = self._envelopes.envelope(v.get("InstanceType", ""))
            count = counts.get(v["VariantName"], initial_count(v))
            if not v.get("ModelName") and self.ic_instances is not None:  # an IC-based variant: what its copies use
                count = self.ic_instances(row.name, v["VariantName"])
            if env is not None:
                total += env.price_per_hour * count
        return round(total, 6)

    async def recover(self, row: EndpointRow) -> None:
        """After a restart: bring an endpoint's fleets back from its current config. An endpoint that was
        InService is serving again when this returns; one that was Creating carries on in the background; an
        update that was under way is abandoned (the endpoint stays on its current config, with the reason)."""
        controller = self.controller(row.name)
        if row.status == _E.CREATING:
            self.background(self._bring_up(controller, row.config_name))
            return
        # the counts and weights it last settled at (UpdateEndpointWeightsAndCapacities, autoscaling: an
        # asynchronous variant at zero stays at zero), not the config's initial ones
        kept = {v.name: (v.desired_weight, v.desired_instance_count) for v in row.variants}
        try:
            plan = await asyncio.to_thread(self.plan, row.name, row.config_name, kept)
            ok = await controller.create(plan)
            why = controller.last_reason
        except _Unservable as exc:
            ok, why = False, str(exc)
        if row.status == _E.UPDATING:
            self._settle(
                row.name,
                _E.UPDATING,
                _E.IN_SERVICE,
                "restart",
                pending_config_name=None,
                failure_reason=f"The update to {row.pending_config_name} was interrupted by a restart.",
            )
        if not ok:
            self._settle(
                row.name,
                _E.IN_SERVICE,
                _E.OUT_OF_SERVICE,
                why or "restart",
                failure_reason=f"The endpoint could not be brought back after a restart: {why}",
            )

    def controller(self, name: str) -> EndpointController:
        controller = self.controllers.get(name)
        if controller is None:
            ready = self._on_instance_ready
            controller = self.standalone_controller(
                name, (lambda c, v, i, s: ready(name, c, v, i, s)) if ready is not None else None
            )
            self.controllers[name] = controller
        return controller

    def standalone_controller(
        self, name: str, on_instance_ready: Callable[[str, str, str, float], None] | None = None
    ) -> EndpointController:
        """A fleet controller on this orchestrator's backend and routing table (``name`` is its routing key) that is
        none of its endpoints': an inference component's copies, which the caller keeps, ticks and deletes."""

        async def on_status(status: str, reason: str | None) -> None:  # fleet events land via _settle
            log.debug("fleet %s: %s %s", name, status, reason or "")

        return EndpointController(
            name,
            self._backend,
            self._table,
            on_status,
            startup_timeout_s=self._startup_timeout_s,
            on_instance_ready=on_instance_ready,
            preload=self._preload,
            serverless_idle_s=self._serverless_idle_s,
        )

    def component_plan(self, endpoint: str, config_name: str, variant: Mapping[str, Any]) -> VariantPlan:
        """The fleet of one model on an IC-based endpoint's variant (``variant`` names ModelName, InstanceType,
        VariantName): an inference component's copies; ValueError with the reason when it cannot be served."""
        try:
            return self._variant_plan(endpoint, self._config(config_name), variant, {})
        except _Unservable as exc:
            raise ValueError(str(exc)) from None

    def plan(
        self, name: str, config_name: str, retain: Mapping[str, tuple[float | None, int | None]] | None = None
    ) -> EndpointPlan:
        """The fleets ``config_name`` asks for; ``retain`` keeps live weights/counts of variants by name."""
        config = self._config(config_name)
        retain = retain or {}
        # an IC-based variant (an instance type, no model) runs its inference components' copies, not a fleet here
        variants = [self._variant_plan(name, config, v, retain) for v in config.variants if v.get("ModelName")]
        shadows = [self._variant_plan(name, config, v, {}) for v in config.record.get("ShadowProductionVariants", [])]
        plan = EndpointPlan(name, config.name, tuple(variants), tuple(shadows))
        self._check_oversubscription(plan)
        return plan

    def _variant_plan(
        self, name: str, config: Any, v: Mapping[str, Any], retain: Mapping[str, tuple[float | None, int | None]]
    ) -> VariantPlan:
        model = self.repo.get_model(v["ModelName"])
        if model is None:
            raise _Unservable(f"the model {v['ModelName']} of variant {v['VariantName']} does not exist")
        multi_model = model.container.mode == "MultiModel"
        spec = serverless_spec(v)
        env = serverless_envelope(spec) if spec is not None else self._envelopes.envelope(v["InstanceType"])
        if env is None:
            raise _Unservable(f"instance type {v['InstanceType']} is not known")
        if multi_model:  # a prefix: the gateway resolves each TargetModel under it on first use
            model_dir = model.container.model_data_url
        else:
            try:
                model_dir = self._resolve_model(model.container.model_data_url)
            except Exception as exc:
                raise _Unservable(f"the model data of {model.name} cannot be used: {exc}") from exc
            try:
                model_dir = self.framework.model_dir(model.container, model_dir, model.name)
            except (FrameworkError, OSError) as exc:
                reason = exc.message if isinstance(exc, FrameworkError) else f"{type(exc).__name__}: {exc}"
                raise _Unservable(f"the model {model.name} cannot be served: {reason}") from exc
        return VariantPlan(
            name=v["VariantName"],
            model_name=model.name,
            model_dir=model_dir,
            instance_type=SERVERLESS_TYPE if spec is not None else v["InstanceType"],
            vcpus=env.vcpus,
            memory_bytes=env.memory_bytes,
            gpus=env.gpus,
            count=spec.provisioned if spec is not None else _kept(retain, v["VariantName"], 1, initial_count(v)),
            weight=_kept(retain, v["VariantName"], 0, float(v["InitialVariantWeight"])),
            extra_args=capture_args(config.data_capture, name, v["VariantName"], self._capture_destination),
            environment=dict(model.container.environment),
            multi_model=multi_model,
            model_cache=_model_cache(model.record),
            preload=_preload(model.container.environment) if multi_model else (),
            serverless=spec,
            isolated=bool(model.record.get("EnableNetworkIsolation")),
        )

    def _check_oversubscription(self, plan: EndpointPlan) -> None:
        """Warn (log, and DescribeEndpoint's ServekitWarnings) when this plan's instances together with every other
        endpoint's ask for more vCPUs or memory than the machine has: allowed, never clamped."""
        others = [
            v for other, c in list(self.controllers.items()) if other != plan.name and c.plan for v in c.plan.variants
        ]
        counts: dict[str, tuple[InstanceType, int]] = {}
        for v in (*others, *plan.variants):
            env = self._envelopes.envelope(v.instance_type)
            price = env.price_per_hour if env is not None else 0.0
            memory_gib = (v.memory_bytes or 0) / 2**30
            itype = InstanceType(v.instance_type, v.vcpus, memory_gib, price, "envelope")
            counts[v.instance_type] = (itype, counts.get(v.instance_type, (itype, 0))[1] + v.count)
        if self._machine is None:
            self._machine = this_machine()
        warnings = oversubscription(counts.values(), self._machine)
        for w in warnings:
            log.warning("endpoint %s: oversubscription (allowed): %s", plan.name, w)
        self.warnings[plan.name] = warnings

    async def _bring_up(self, controller: EndpointController, config_name: str) -> None:
        """CreateEndpoint's background half: Creating → InService, or Failed with the reason."""
        name = controller.name
        try:
            plan = await asyncio.to_thread(self.plan, name, config_name)
        except (_Unservable, ApiError) as exc:
            reason = str(exc) if isinstance(exc, _Unservable) else exc.message
            self._settle(name, _E.CREATING, _E.FAILED, reason, failure_reason=reason)
            return
        ok = await controller.create(plan)
        why = controller.last_reason
        if ok:
            self._settle(
                name,
                _E.CREATING,
                _E.IN_SERVICE,
                "fleet healthy",
                failure_reason="",
                variants=_variant_states(controller),
            )
        else:
            reason = why or "the fleet did not start"
            self._settle(name, _E.CREATING, _E.FAILED, reason, failure_reason=reason)

    async def _update(
        self,
        controller: EndpointController,
        config_name: str,
        policy: RolloutPolicy | None,
        deployment: Mapping[str, Any] | None,
        retain: Mapping[str, tuple[float | None, int | None]],
    ) -> None:
        """UpdateEndpoint's background half: the guarded rollout, recorded as Updating → (RollingBack →) InService."""
        name = controller.name
        try:
            plan = await asyncio.to_thread(self.plan, name, config_name, retain)
        except (_Unservable, ApiError) as exc:
            reason = str(exc) if isinstance(exc, _Unservable) else exc.message
            self._settle(
                name,
                _E.UPDATING,
                _E.IN_SERVICE,
                reason,
                failure_reason=f"The update failed: {reason}",
                pending_config_name=None,
            )
            return
        rolled_back = False

        def on_phase(state: RolloutState) -> None:
            nonlocal rolled_back
            if state.phase is RolloutPhase.ROLLING_BACK and not rolled_back:
                rolled_back = True
                self._settle(name, _E.UPDATING, _E.ROLLING_BACK, state.reason)

        ok = await controller.update(plan, policy, self._alarm_states, on_phase)
        why = controller.last_reason
        row = self.repo.get_endpoint(name)
        record = dict(row.record) if row is not None else {}
        if deployment is not None:
            record["LastDeploymentConfig"] = dict(deployment)
        self._settle(
            name,
            _E.ROLLING_BACK if rolled_back else _E.UPDATING,
            _E.IN_SERVICE,
            "update done" if ok else why or "update failed",
            failure_reason="" if ok else (why or "update failed"),
            config_name=config_name if ok else None,
            pending_config_name=None,
            variants=_variant_states(controller),
            record=record,
        )

    async def _scale(self, name: str, changes: Mapping[str, tuple[float | None, int | None]]) -> None:
        controller = self.controller(name)
        failed = await controller.set_capacity(changes)
        if failed is None:
            self._settle(
                name,
                _E.UPDATING,
                _E.IN_SERVICE,
                "capacity changed",
                failure_reason="",
                variants=_variant_states(controller),
            )
            return
        # as SageMaker reports a failed capacity change: Updating -> RollingBack -> InService with the reason, the
        # desired count back at the instances that run
        self._settle(name, _E.UPDATING, _E.ROLLING_BACK, failed)
        self._settle(
            name,
            _E.ROLLING_BACK,
            _E.IN_SERVICE,
            failed,
            failure_reason=f"The capacity change was rolled back: {failed}",
            variants=_variant_states(controller),
        )

    async def _tear_down(self, name: str) -> None:
        self.warnings.pop(name, None)
        controller = self.controllers.pop(name, None)
        if controller is not None:
            await controller.delete()
        self._table.remove_endpoint(name)
        try:
            self.repo.delete_endpoint(name)
        except NotFound:
            pass

    def _settle(self, name: str, expected: EndpointStatus, to: EndpointStatus, reason: str, **fields: Any) -> None:
        """Record a background result, unless the endpoint has moved on meanwhile (deleted, or deleting)."""
        check_transition(expected, to)
        kwargs = {k: v for k, v in fields.items() if not (k == "config_name" and v is None)}
        if "variants" in kwargs and not kwargs["variants"]:
            del kwargs["variants"]
        try:
            self.repo.transition(name, to, expected=expected, reason=reason, **kwargs)
        except (NotFound, StaleStatus) as exc:
            log.info("endpoint %s: not recording %s -> %s: %s", name, expected, to, exc)

    def background(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("hosting background work failed")

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        """Wait for every background change under way (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def tick(self) -> None:
        """Replace dead instances of every endpoint."""
        for controller in list(self.controllers.values()):
            await controller.tick()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for controller in list(self.controllers.values()):
            await controller.delete()


class _Unservable(Exception):
    """The endpoint's config cannot be turned into fleets: the message is its FailureReason."""


# servekit's: a multi-model container's Environment may name TargetModels to load (and pin: never unloaded for
# room) on every instance before it takes traffic, comma-separated.
PRELOAD_ENV = "SERVEKIT_MME_PRELOAD"


def _preload(environment: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(t.strip() for t in environment.get(PRELOAD_ENV, "").split(",") if t.strip())


def _model_cache(record: Mapping[str, Any]) -> bool:
    """MultiModelConfig.ModelCacheSetting of the model's container: Disabled unloads a model after each request."""
    container = record.get("PrimaryContainer") or (record.get("Containers") or [{}])[0]
    setting = ((container or {}).get("MultiModelConfig") or {}).get("ModelCacheSetting", "Enabled")
    return bool(setting != "Disabled")


def _kept(retain: Mapping[str, tuple[float | None, int | None]], variant: str, which: int, default: Any) -> Any:
    value = retain.get(variant, (None, None))[which]
    return default if value is None else type(default)(value)


def _variant_states(controller: EndpointController) -> list[VariantState]:
    return [VariantState.from_json(s) for s in controller.summary()]
