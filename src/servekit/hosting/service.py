"""The SageMaker hosting operations: models, endpoint configs and endpoints, with SageMaker's semantics and errors.

Requests arrive validated against botocore's input shapes (``control.api``); this module decides: it keeps the
records in the hosting state, moves endpoints through their lifecycle (``control.lifecycle``) and drives each
endpoint's fleets (``control.fleet``) in the background, so CreateEndpoint answers at once with ``Creating`` as
the real service does and the waiters see ``InService`` (or ``Failed`` with the reason) when it is so.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.front import Handler
from servekit.aws.names import Account, ResourceKind
from servekit.aws.timestamps import optional_epoch
from servekit.backends.local import CpuPinningBackend, CpuPool, ReplicaBackend
from servekit.gateway.service import RoutingTable
from servekit.hosting import rollout
from servekit.hosting.fleet import AlarmStates, EndpointController, EndpointPlan, Preload, VariantPlan
from servekit.hosting.instance_types import InstanceType, InstanceTypes, Machine, oversubscription, this_machine
from servekit.hosting.lifecycle import EndpointStatus, check_transition, predecessors
from servekit.hosting.rollout import RolloutPhase, RolloutPolicy, RolloutState
from servekit.state.hosting import Hosting
from servekit.state.hosting_rows import AlreadyExists, ContainerSpec, EndpointRow, NotFound, StaleStatus, VariantState

log = logging.getLogger(__name__)

_E = EndpointStatus


@dataclass(frozen=True, slots=True)
class Envelope:
    vcpus: int
    memory_bytes: int | None
    price_per_hour: float


class Envelopes(Protocol):
    def envelope(self, instance_type: str) -> Envelope | None:
        """The resources an instance type gives an instance; None for a type this control plane does not know."""
        ...


class TableEnvelopes:
    """Instance types (the bundled table plus an ``--instance-types`` file) as envelopes."""

    def __init__(self, table: InstanceTypes) -> None:
        self._table = table

    def envelope(self, instance_type: str) -> Envelope | None:
        t = self._table.get(instance_type)
        if t is None:
            return None
        return Envelope(int(t.vcpus), int(t.memory_gib * 2**30), float(t.price_per_hour))


ModelResolver = Callable[[str], str]  # ModelDataUrl -> a local servekit model directory (raises with a reason)
PackageResolver = Callable[[str], dict[str, Any]]  # ModelPackageName -> its container (raises ApiError)


class HostingService:
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
        scaled_variants: Callable[[str], Collection[str]] | None = None,
        model_packages: PackageResolver | None = None,
    ) -> None:
        """``alarm_states`` (alarm names → their states) is what a deployment's AutoRollbackConfiguration
        watches; without it, UpdateEndpoint refuses alarms (there is nothing to watch them with)."""
        """``machine`` (default: this one) is what oversubscription is judged against; ``cpus`` (default: the CPUs
        this process may run on) are handed out to instances as their own CPU sets while enough are free."""
        self.repo = repo
        if cpus is None:
            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self._backend: ReplicaBackend = CpuPinningBackend(backend, CpuPool(cpus))
        self._machine = machine
        self.warnings: dict[str, list[str]] = {}  # endpoint -> oversubscription warnings of its current plan
        self._table = table
        self._envelopes = envelopes
        self._resolve_model = resolve_model
        self.account = account or Account()
        self._startup_timeout_s = startup_timeout_s
        self.controllers: dict[str, EndpointController] = {}
        # (endpoint, endpoint config, variant, instance id, setup seconds) each time an instance turns healthy
        self._on_instance_ready = on_instance_ready
        self._alarm_states = alarm_states
        self._preload = preload  # multi-model instances: load and pin SERVEKIT_MME_PRELOAD before traffic
        # endpoint -> its variants registered with Application Auto Scaling (their instance type is then fixed)
        self._scaled_variants = scaled_variants
        self._tasks: set[asyncio.Task[None]] = set()
        # CreateModel's ModelPackageName -> the package's container (the model registry's lookup)
        self.model_packages = model_packages

    def handlers(self) -> dict[str, Handler]:
        """Operation name -> handler, for the API front."""
        names = (
            "CreateModel DescribeModel ListModels DeleteModel CreateEndpointConfig DescribeEndpointConfig "
            "ListEndpointConfigs DeleteEndpointConfig CreateEndpoint DescribeEndpoint ListEndpoints UpdateEndpoint "
            "UpdateEndpointWeightsAndCapacities DeleteEndpoint"
        ).split()
        return {name: getattr(self, _snake(name)) for name in names}

    def _arn(self, kind: ResourceKind, name: str) -> str:
        return self.account.arn(kind, name)

    # ---- models ------------------------------------------------------------------------------------------------
    async def create_model(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["ModelName"]
        container = p.get("PrimaryContainer") or (p.get("Containers") or [None])[0]
        if not container:
            raise validation_exception("Either PrimaryContainer or Containers must be specified.")
        if container.get("ModelPackageName"):  # an approved registry package: its container, its ARN kept
            if self.model_packages is None:
                raise validation_exception("ModelPackageName needs the model registry, which this plane does not run.")
            container = {**container, **self.model_packages(str(container["ModelPackageName"]))}
            key = "PrimaryContainer" if p.get("PrimaryContainer") else "Containers"
            p = {**p, key: container if key == "PrimaryContainer" else [container, *p["Containers"][1:]]}
        if not container.get("ModelDataUrl"):
            raise validation_exception("The container must name its model artifacts: ModelDataUrl is required.")
        arn = self._arn(ResourceKind.MODEL, name)
        record = {k: v for k, v in p.items() if k not in ("Tags",)}
        record["ModelArn"] = arn
        try:
            self.repo.create_model(name, arn, ContainerSpec.from_json(container), record)
        except AlreadyExists:
            raise validation_exception(f'Cannot create already existing model "{arn}".') from None
        return {"ModelArn": arn}

    async def describe_model(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self.repo.get_model(p["ModelName"])
        if row is None:
            raise validation_exception(f'Could not find model "{self._arn(ResourceKind.MODEL, p["ModelName"])}".')
        return {**row.record, "ModelName": row.name, "ModelArn": row.arn, "CreationTime": row.created}

    async def list_models(self, p: dict[str, Any]) -> dict[str, Any]:
        page = _list(self.repo.list_models, p)
        out: dict[str, Any] = {
            "Models": [{"ModelName": m.name, "ModelArn": m.arn, "CreationTime": m.created} for m in page.items]
        }
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def delete_model(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            self.repo.delete_model(p["ModelName"])
        except NotFound:
            raise validation_exception(
                f'Could not find model "{self._arn(ResourceKind.MODEL, p["ModelName"])}".'
            ) from None
        return {}

    # ---- endpoint configs --------------------------------------------------------------------------------------
    async def create_endpoint_config(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["EndpointConfigName"]
        variants = [dict(v) for v in p["ProductionVariants"]]
        shadows = [dict(v) for v in p.get("ShadowProductionVariants") or []]
        if len(shadows) > 1 or (shadows and len(variants) != 1):
            raise validation_exception(
                "ShadowProductionVariants takes one shadow variant beside exactly one production variant."
            )
        seen: set[str] = set()
        for v in (*variants, *shadows):
            if v["VariantName"].lower() in seen:
                raise validation_exception(f"The variant name {v['VariantName']} is used more than once.")
            seen.add(v["VariantName"].lower())
            if v.get("ServerlessConfig") is not None:
                raise validation_exception("Serverless variants are not supported by servekit; use instances.")
            model = v.get("ModelName")
            if not model or self.repo.get_model(model) is None:
                arn = self._arn(ResourceKind.MODEL, model or "-")
                raise validation_exception(f'Could not find model "{arn}".')
            if self._envelopes.envelope(v.get("InstanceType", "")) is None:
                raise validation_exception(
                    f"The instance type {v.get('InstanceType')!r} of variant {v['VariantName']} is not known to this "
                    "control plane; add it to the instance types file or pick an ml.* type from the docs."
                )
            v.setdefault("InitialVariantWeight", 1.0)
            v.setdefault("InitialInstanceCount", 1)
        steps = _traffic_steps(p.get("Tags") or [])
        data_capture = _with_capture_format(p.get("DataCaptureConfig"), p.get("Tags") or [])
        arn = self._arn(ResourceKind.ENDPOINT_CONFIG, name)
        record = {k: v for k, v in p.items() if k != "Tags"}
        if steps:
            record[_STEPS] = steps
        record.update({"ProductionVariants": variants, "EndpointConfigArn": arn})
        if shadows:
            record["ShadowProductionVariants"] = shadows
        try:
            self.repo.create_endpoint_config(name, arn, variants, data_capture, record)
        except AlreadyExists:
            raise validation_exception(f'Cannot create already existing endpoint configuration "{arn}".') from None
        return {"EndpointConfigArn": arn}

    async def describe_endpoint_config(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._config(p["EndpointConfigName"])
        record = {k: v for k, v in row.record.items() if k != _STEPS}
        return {**record, "EndpointConfigName": row.name, "EndpointConfigArn": row.arn, "CreationTime": row.created}

    async def list_endpoint_configs(self, p: dict[str, Any]) -> dict[str, Any]:
        page = _list(self.repo.list_endpoint_configs, p)
        out: dict[str, Any] = {
            "EndpointConfigs": [
                {"EndpointConfigName": c.name, "EndpointConfigArn": c.arn, "CreationTime": c.created}
                for c in page.items
            ]
        }
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def delete_endpoint_config(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            self.repo.delete_endpoint_config(p["EndpointConfigName"])
        except NotFound:
            raise self._no_config(p["EndpointConfigName"]) from None
        return {}

    def _config(self, name: str) -> Any:
        row = self.repo.get_endpoint_config(name)
        if row is None:
            raise self._no_config(name)
        return row

    def _no_config(self, name: str) -> ApiError:
        return validation_exception(
            f'Could not find endpoint configuration "{self._arn(ResourceKind.ENDPOINT_CONFIG, name)}".'
        )

    # ---- endpoints ---------------------------------------------------------------------------------------------
    async def create_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        name, config_name = p["EndpointName"], p["EndpointConfigName"]
        config = self._config(config_name)
        arn = self._arn(ResourceKind.ENDPOINT, name)
        variants = [
            VariantState(
                v["VariantName"],
                float(v["InitialVariantWeight"]),
                float(v["InitialVariantWeight"]),
                0,
                int(v["InitialInstanceCount"]),
            )
            for v in config.variants
        ]
        record = {k: v for k, v in p.items() if k not in ("EndpointName", "EndpointConfigName", "Tags")}
        try:
            self.repo.create_endpoint(name, arn, config.name, _E.CREATING, variants, record, reason="CreateEndpoint")
        except AlreadyExists:
            raise validation_exception(f'Cannot create already existing endpoint "{arn}".') from None
        controller = self._controller(name)
        self._background(self._bring_up(controller, config.name))
        return {"EndpointArn": arn}

    async def describe_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._endpoint(p["EndpointName"])
        controller = self.controllers.get(row.name)
        variants = controller.summary() if controller and controller.plan else [v.to_json() for v in row.variants]
        out: dict[str, Any] = {
            "EndpointName": row.name,
            "EndpointArn": row.arn,
            "EndpointConfigName": row.config_name,
            "ProductionVariants": variants,
            "EndpointStatus": row.status,
            "CreationTime": row.created,
            "LastModifiedTime": row.last_modified,
        }
        if row.failure_reason:
            out["FailureReason"] = row.failure_reason
        config = self.repo.get_endpoint_config(row.config_name)
        capture = config.data_capture if config is not None else None
        if capture:
            out["DataCaptureConfig"] = {
                "EnableCapture": bool(capture.get("EnableCapture", True)),
                "CaptureStatus": "Started" if capture.get("EnableCapture", True) else "Stopped",
                "CurrentSamplingPercentage": int(capture.get("InitialSamplingPercentage", 0)),
                "DestinationS3Uri": capture.get("DestinationS3Uri", ""),
                "KmsKeyId": capture.get("KmsKeyId", ""),
            }
        if controller is not None and controller.plan is not None and controller.plan.shadows:
            out["ShadowProductionVariants"] = controller.shadow_summary()
        pending = controller.pending_summary() if controller is not None else None
        if pending is not None:
            out["PendingDeploymentSummary"] = pending
        elif row.pending_config_name:
            out["PendingDeploymentSummary"] = {"EndpointConfigName": row.pending_config_name}
            if row.pending_since is not None:
                out["PendingDeploymentSummary"]["StartTime"] = row.pending_since
        if row.record.get("LastDeploymentConfig"):
            out["LastDeploymentConfig"] = row.record["LastDeploymentConfig"]
        # servekit's extensions (botocore keeps unknown keys of a JSON answer; the API passes them in non-strict mode)
        out["ServekitCostPerHour"] = self.cost_per_hour(row)
        if self.warnings.get(row.name):
            out["ServekitWarnings"] = list(self.warnings[row.name])
        return out

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
            if env is not None:
                total += env.price_per_hour * counts.get(v["VariantName"], int(v.get("InitialInstanceCount", 1)))
        return round(total, 6)

    async def list_endpoints(self, p: dict[str, Any]) -> dict[str, Any]:
        page = _list(
            self.repo.list_endpoints,
            p,
            status_equals=p.get("StatusEquals"),
            last_modified_time_before=optional_epoch(p.get("LastModifiedTimeBefore")),
            last_modified_time_after=optional_epoch(p.get("LastModifiedTimeAfter")),
        )
        out: dict[str, Any] = {
            "Endpoints": [
                {
                    "EndpointName": e.name,
                    "EndpointArn": e.arn,
                    "CreationTime": e.created,
                    "LastModifiedTime": e.last_modified,
                    "EndpointStatus": e.status,
                }
                for e in page.items
            ]
        }
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def update_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        name, config_name = p["EndpointName"], p["EndpointConfigName"]
        row = self._endpoint(name)
        config = self._config(config_name)
        deployment = p.get("DeploymentConfig")
        if p.get("RetainDeploymentConfig") and deployment is None:
            deployment = row.record.get("LastDeploymentConfig")
        policy = self._policy(deployment, config)
        self._check_scaled_variants(row, config)
        retain = self._retained(name, p) if p.get("RetainAllVariantProperties") else {}
        fields: dict[str, Any] = {"pending_config_name": config.name}
        if deployment is not None:
            # "the most recent deployment configuration for the endpoint" (DescribeEndpoint) is the running one from
            # the moment the update is accepted, so a reader sees the alarms the rollout watches while it runs
            fields["record"] = {**row.record, "LastDeploymentConfig": dict(deployment)}
        self._move(row, _E.UPDATING, "UpdateEndpoint", **fields)
        self._background(self._update(self._controller(name), config.name, policy, deployment, retain))
        return {"EndpointArn": row.arn}

    def _check_scaled_variants(self, row: EndpointRow, config: Any) -> None:
        """As SageMaker: an update may not remove an autoscaled variant or change its instance type until the
        variant is deregistered from Application Auto Scaling (a model-only change is fine)."""
        scaled = set(self._scaled_variants(row.name)) if self._scaled_variants is not None else set()
        if not scaled:
            return
        live = self.repo.get_endpoint_config(row.config_name)
        before = {v["VariantName"]: v.get("InstanceType") for v in (live.variants if live else ())}
        after = {v["VariantName"]: v.get("InstanceType") for v in config.variants}
        for variant in sorted(scaled):
            if variant in before and after.get(variant) != before[variant]:
                change = "removes" if variant not in after else "changes the instance type of"
                raise validation_exception(
                    f"The update {change} variant {variant}, which is registered with Application Auto Scaling "
                    f"(endpoint/{row.name}/variant/{variant}); deregister the scalable target first."
                )

    def _policy(self, deployment: Mapping[str, Any] | None, config: Any) -> RolloutPolicy:
        """The rollout plan of a DeploymentConfig, refused (ValidationException) as SageMaker refuses it."""
        green = sum(int(v.get("InitialInstanceCount", 1)) for v in config.variants)
        try:
            policy = rollout.policy_from(deployment, green)
            steps = config.record.get(_STEPS)
            if steps and deployment and deployment.get("BlueGreenUpdatePolicy"):
                policy = rollout.custom_policy(
                    steps,
                    wait_s=policy.steps[0].bake_s,
                    termination_wait_s=policy.termination_wait_s,
                    alarms=policy.alarms,
                    max_execution_s=policy.max_execution_s,
                )
        except ValueError as exc:
            raise validation_exception(str(exc)) from None
        if policy.alarms:
            if self._alarm_states is None:
                raise validation_exception("AutoRollbackConfiguration needs CloudWatch alarms, which are off here.")
            known = self._alarm_states(policy.alarms)
            missing = [a for a in policy.alarms if a not in known]
            if missing:
                raise validation_exception(
                    f"The alarm(s) {', '.join(missing)} of AutoRollbackConfiguration do not exist; create them with "
                    "PutMetricAlarm first."
                )
        return policy

    def _retained(self, name: str, p: dict[str, Any]) -> dict[str, tuple[float | None, int | None]]:
        """RetainAllVariantProperties: the live weights and instance counts to keep, by variant name, less the
        properties ExcludeRetainedVariantProperties names."""
        controller = self.controllers.get(name)
        if controller is None or controller.plan is None:
            return {}
        excluded = {e.get("VariantPropertyType") for e in p.get("ExcludeRetainedVariantProperties") or []}
        return {
            v.name: (
                None if "DesiredWeight" in excluded else v.weight,
                None if "DesiredInstanceCount" in excluded else v.count,
            )
            for v in controller.plan.variants
        }

    async def update_endpoint_weights_and_capacities(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["EndpointName"]
        row = self._endpoint(name)
        known = {v.name for v in row.variants}
        wanted = {d["VariantName"] for d in p["DesiredWeightsAndCapacities"]}
        missing = sorted(wanted - known)
        if missing:
            raise validation_exception(f'The variant(s) "{missing}" are not present in endpoint "{row.arn}".')
        changes = {
            d["VariantName"]: (
                None if d.get("DesiredWeight") is None else float(d["DesiredWeight"]),
                None if d.get("DesiredInstanceCount") is None else int(d["DesiredInstanceCount"]),
            )
            for d in p["DesiredWeightsAndCapacities"]
        }
        self._move(row, _E.UPDATING, "UpdateEndpointWeightsAndCapacities")
        self._background(self._scale(name, changes))
        return {"EndpointArn": row.arn}

    async def delete_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._endpoint(p["EndpointName"])
        if row.status != _E.DELETING:
            self._move(row, _E.DELETING, "DeleteEndpoint")
        self._background(self._tear_down(row.name))
        return {}

    async def recover(self, row: EndpointRow) -> None:
        """After a restart: bring an endpoint's fleets back from its current config. An endpoint that was
        InService is serving again when this returns; one that was Creating carries on in the background; an
        update that was under way is abandoned (the endpoint stays on its current config, with the reason)."""
        controller = self._controller(row.name)
        if row.status == _E.CREATING:
            self._background(self._bring_up(controller, row.config_name))
            return
        try:
            plan = await asyncio.to_thread(self._plan, row.name, row.config_name)
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

    # ---- the background work ----------------------------------------------------------------------------------
    def _controller(self, name: str) -> EndpointController:
        controller = self.controllers.get(name)
        if controller is None:

            async def on_status(status: str, reason: str | None) -> None:  # fleet events land via _settle
                log.debug("endpoint %s fleet: %s %s", name, status, reason or "")

            ready = self._on_instance_ready
            controller = EndpointController(
                name,
                self._backend,
                self._table,
                on_status,
                startup_timeout_s=self._startup_timeout_s,
                on_instance_ready=(lambda c, v, i, s: ready(name, c, v, i, s)) if ready is not None else None,
                preload=self._preload,
            )
            self.controllers[name] = controller
        return controller

    def _plan(
        self, name: str, config_name: str, retain: Mapping[str, tuple[float | None, int | None]] | None = None
    ) -> EndpointPlan:
        """The fleets ``config_name`` asks for; ``retain`` keeps live weights/counts of variants by name."""
        config = self._config(config_name)
        retain = retain or {}
        variants = [self._variant_plan(name, config, v, retain) for v in config.variants]
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
        env = self._envelopes.envelope(v["InstanceType"])
        if env is None:
            raise _Unservable(f"instance type {v['InstanceType']} is not known")
        if multi_model:  # a prefix: the gateway resolves each TargetModel under it on first use
            model_dir = model.container.model_data_url
        else:
            try:
                model_dir = self._resolve_model(model.container.model_data_url)
            except Exception as exc:
                raise _Unservable(f"the model data of {model.name} cannot be used: {exc}") from exc
        return VariantPlan(
            name=v["VariantName"],
            model_name=model.name,
            model_dir=model_dir,
            instance_type=v["InstanceType"],
            vcpus=env.vcpus,
            memory_bytes=env.memory_bytes,
            count=_kept(retain, v["VariantName"], 1, int(v["InitialInstanceCount"])),
            weight=_kept(retain, v["VariantName"], 0, float(v["InitialVariantWeight"])),
            extra_args=capture_args(config.data_capture, name, v["VariantName"]),
            environment=dict(model.container.environment),
            multi_model=multi_model,
            model_cache=_model_cache(model.record),
            preload=_preload(model.container.environment) if multi_model else (),
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
            plan = await asyncio.to_thread(self._plan, name, config_name)
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
            plan = await asyncio.to_thread(self._plan, name, config_name, retain)
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
        controller = self._controller(name)
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

    def _move(self, row: EndpointRow, to: EndpointStatus, reason: str, **fields: Any) -> None:
        """A status change asked for by a request: refused (ValidationException) when the endpoint's status
        does not allow it, e.g. updating an endpoint that is still Creating."""
        current = EndpointStatus(row.status)
        if to not in _ALLOWED_FROM.get(current, frozenset()):
            raise validation_exception(_busy_message(row, current, to))
        try:
            self.repo.transition(row.name, to, expected=sorted(predecessors(to) & {current}), reason=reason, **fields)
        except StaleStatus as exc:
            raise validation_exception(_busy_message(row, EndpointStatus(exc.actual), to)) from None

    def _endpoint(self, name: str) -> EndpointRow:
        row = self.repo.get_endpoint(name)
        if row is None:
            raise validation_exception(f'Could not find endpoint "{self._arn(ResourceKind.ENDPOINT, name)}".')
        return row

    def _background(self, work: Awaitable[None]) -> None:
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


# What a request may move an endpoint into, from where (the background results have their own edges).
_ALLOWED_FROM: dict[EndpointStatus, frozenset[EndpointStatus]] = {
    _E.IN_SERVICE: frozenset({_E.UPDATING, _E.DELETING}),
    _E.CREATING: frozenset({_E.DELETING}),
    _E.UPDATING: frozenset({_E.DELETING}),
    _E.FAILED: frozenset({_E.DELETING}),
    _E.SYSTEM_UPDATING: frozenset({_E.DELETING}),
    _E.ROLLING_BACK: frozenset({_E.DELETING}),
    _E.OUT_OF_SERVICE: frozenset({_E.DELETING}),
    _E.UPDATE_ROLLBACK_FAILED: frozenset({_E.UPDATING, _E.DELETING}),
}


# An endpoint config's tag ``servekit:TrafficSteps`` = "5 20 50 100" (spaces or slashes: tag values allow no
# commas): a blue/green deployment to that config shifts
# traffic in these percentages (each baked for the policy's WaitIntervalInSeconds) instead of its CANARY/LINEAR
# sizes; SageMaker's shapes cannot say 5 -> 20 -> 50 -> 100, and a tag travels through every SageMaker client.
STEPS_TAG = "servekit:TrafficSteps"
_STEPS = "ServekitTrafficSteps"


def _traffic_steps(tags: Sequence[Mapping[str, Any]]) -> list[float]:
    value = next((str(t.get("Value", "")) for t in tags if t.get("Key") == STEPS_TAG), None)
    if value is None:
        return []
    try:
        steps = [float(x) for x in re.split(r"[\s,/]+", value.strip()) if x]
        rollout.custom_policy(steps, wait_s=0)  # checks they grow to 100
    except ValueError:
        raise validation_exception(
            f'Tag {STEPS_TAG} must list growing traffic percentages ending at 100, e.g. "5 20 50 100", not {value!r}.'
        ) from None
    return steps


class _Unservable(Exception):
    """The endpoint's config cannot be turned into fleets: the message is its FailureReason."""


_CAPTURE_MODES = {"Input": (True, False), "Output": (False, True), "InputAndOutput": (True, True)}

# An endpoint config's tag ``servekit:CaptureFormat`` = ``parquet`` makes its instances capture in servekit's
# Parquet layout (a column per feature, ``servekit serve --capture_format parquet``) instead of SageMaker's JSON
# Lines; ``jsonl`` is the default. A tag, as ``servekit:TrafficSteps``: DataCaptureConfig has no field for it and
# tags travel through every SageMaker client. Kept with the stored DataCaptureConfig (never shown by Describe*).
CAPTURE_FORMAT_TAG = "servekit:CaptureFormat"
_CAPTURE_FORMAT = "ServekitCaptureFormat"
_CAPTURE_FORMATS = ("jsonl", "parquet")


def _with_capture_format(capture: Mapping[str, Any] | None, tags: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``capture`` as stored: with the format the tag asks for (ValidationException for a bad value, or for the
    tag on a config that captures nothing)."""
    value = next((str(t.get("Value", "")) for t in tags if t.get("Key") == CAPTURE_FORMAT_TAG), None)
    if value is None:
        return None if capture is None else dict(capture)
    if value.strip().lower() not in _CAPTURE_FORMATS:
        raise validation_exception(f"Tag {CAPTURE_FORMAT_TAG} must be jsonl or parquet, not {value!r}.")
    if not capture:
        raise validation_exception(f"Tag {CAPTURE_FORMAT_TAG} needs a DataCaptureConfig on the endpoint config.")
    return {**capture, _CAPTURE_FORMAT: value.strip().lower()}


def capture_args(capture: Mapping[str, Any] | None, endpoint: str, variant: str) -> tuple[str, ...]:
    """The ``servekit serve`` flags that make one variant's instances capture as the endpoint config's
    ``DataCaptureConfig`` asks: its destination, sampling percentage and Input/Output options, into SageMaker's
    layout ``<destination>/<endpoint>/<variant>/yyyy/mm/dd/hh/``. No flags when capture is absent or disabled."""
    if not capture or not capture.get("EnableCapture", True) or not capture.get("DestinationS3Uri"):
        return ()
    want_in = want_out = False
    for option in capture.get("CaptureOptions") or []:
        i, o = _CAPTURE_MODES.get(str(option.get("CaptureMode")), (False, False))
        want_in, want_out = want_in or i, want_out or o
    if not (want_in or want_out):
        want_in = want_out = True
    mode = "both" if want_in and want_out else "input" if want_in else "output"
    return (
        "--capture_destination",
        str(capture["DestinationS3Uri"]),
        "--capture_sampling_percentage",
        str(int(capture.get("InitialSamplingPercentage", 100))),
        "--capture_mode",
        mode,
        "--capture_partition_prefix",
        f"{endpoint}/{variant}",
        *(("--capture_format", str(capture[_CAPTURE_FORMAT])) if capture.get(_CAPTURE_FORMAT) else ()),
    )


def _busy_message(row: EndpointRow, current: EndpointStatus, to: EndpointStatus) -> str:
    verb = {_E.UPDATING: "update", _E.DELETING: "delete"}.get(to, str(to))
    return f'Cannot {verb} in-progress endpoint "{row.arn}" (status {current}).'


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


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _list(fetch: Callable[..., Any], p: dict[str, Any], **extra: Any) -> Any:
    kwargs: dict[str, Any] = {
        "name_contains": p.get("NameContains"),
        "creation_time_before": optional_epoch(p.get("CreationTimeBefore")),
        "creation_time_after": optional_epoch(p.get("CreationTimeAfter")),
        "sort_by": p.get("SortBy") or "CreationTime",
        "sort_order": p.get("SortOrder") or "Descending",
        "next_token": p.get("NextToken"),
        **{k: v for k, v in extra.items() if v is not None},
    }
    if p.get("MaxResults") is not None:
        kwargs["max_results"] = int(p["MaxResults"])
    try:
        return fetch(**kwargs)
    except ValueError as exc:  # InvalidNextToken
        raise validation_exception(str(exc)) from None
