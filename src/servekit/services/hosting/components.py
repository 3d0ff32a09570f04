"""Inference components: several models on one IC-based endpoint's instances, each scaled on its own.

SageMaker's ``CreateInferenceComponent`` ... ``UpdateInferenceComponentRuntimeConfig`` on ``servekit up``. A request
is checked (:mod:`servekit.services.hosting.component_rules`), recorded in the state
(:class:`~servekit.services.hosting.store_rows.InferenceComponentRepo`) and its copies placed on the variant's instances
at once (placement is decided in the event loop, so two requests never reserve the same room); the copies'
processes start in the background, each an instance process of its own in the copy's envelope (its cores, its
MaxMemoryRequiredInMb or else MinMemoryRequiredInMb), through the orchestrator's backend: one
:class:`~servekit.services.hosting.fleet.EndpointController` per component, published in the gateway's routing table
under
:func:`route_key`, so InvokeEndpoint with ``InferenceComponentName`` goes to the copy with the fewest outstanding
requests. The variant's instances are bookkeeping: the copies they hold say how many an endpoint runs
(DescribeEndpoint), never more than the variant allows, and none when managed instance scaling's
MinInstanceCount is 0 and no copy needs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.front import Handler
from servekit.aws.names import Account, ResourceKind
from servekit.aws.timestamps import optional_epoch
from servekit.gateway.service import GatewayError, RoutingTable
from servekit.services.cloudwatch.store import NAMESPACE, MetricsStore
from servekit.services.hosting.component_rules import (
    ComponentStatus,
    CopyNeed,
    InstanceSize,
    PlacedCopy,
    check_component_transition,
    check_specification,
    compact,
    instance_bounds,
    instances_in_use,
    is_ic_variant,
    may_move,
    need_of,
    never_fits,
    place,
)
from servekit.services.hosting.envelopes import Envelopes
from servekit.services.hosting.fleet import EndpointController, EndpointPlan
from servekit.services.hosting.lifecycle import EndpointStatus
from servekit.services.hosting.orchestrator import Orchestrator
from servekit.services.hosting.store import Hosting
from servekit.services.hosting.store_rows import (
    AlreadyExists,
    InferenceComponentRepo,
    InferenceComponentRow,
    NotFound,
    StaleStatus,
)
from servekit.state.paging import Listing, where_set

log = logging.getLogger(__name__)

_C = ComponentStatus
KIND = "inference-component"
DIMENSION = "InferenceComponentName"
HEADER = "X-Amzn-SageMaker-Inference-Component"


def route_key(component: str) -> str:
    """The component's key in the routing table: no endpoint name has a dot, so it never meets one."""
    return f"ic.{component.lower()}"


@dataclass(slots=True)
class _Live:
    """A component this process runs copies of."""

    name: str  # as created
    endpoint: str
    variant: str
    need: CopyNeed
    controller: EndpointController


class InferenceComponents:
    def __init__(
        self,
        repo: InferenceComponentRepo,
        hosting: Hosting,
        fleets: Orchestrator,
        envelopes: Envelopes,
        table: RoutingTable,
        account: Account | None = None,
        metrics: MetricsStore | None = None,
        tick_s: float = 1.0,
    ) -> None:
        """``fleets`` starts the copies' processes on its backend; ``metrics``: where InvokeEndpoint's per-component
        series (dimension InferenceComponentName) are recorded; ``tick_s``: how often dead copies are replaced."""
        self.repo = repo
        self._hosting = hosting
        self._fleets = fleets
        self._envelopes = envelopes
        self._table = table
        self.account = account or Account()
        self._metrics = metrics
        self._tick_s = tick_s
        self._placed: dict[tuple[str, str], list[PlacedCopy]] = {}  # (endpoint, variant) -> its copies, in order
        self._live: dict[str, _Live] = {}  # lower-cased component name ->
        self._locks: dict[str, asyncio.Lock] = {}  # one change at a time per component
        self._ticker: asyncio.Task[None] | None = None

    def handlers(self) -> dict[str, Handler]:
        return {
            "CreateInferenceComponent": self.create,
            "DescribeInferenceComponent": self.describe,
            "ListInferenceComponents": self.list_components,
            "UpdateInferenceComponent": self.update,
            "UpdateInferenceComponentRuntimeConfig": self.update_runtime_config,
            "DeleteInferenceComponent": self.delete,
        }

    # ---- the operations ----------------------------------------------------------------------------------------
    async def create(self, p: dict[str, Any]) -> dict[str, Any]:
        name, endpoint_name = p["InferenceComponentName"], p["EndpointName"]
        if p.get("Specifications"):
            raise validation_exception("Specifications (several containers) is not supported: give Specification.")
        spec = p.get("Specification")
        problem = check_specification(spec)
        if problem is not None:
            raise validation_exception(problem)
        assert spec is not None
        if p.get("RuntimeConfig") is None:
            raise validation_exception("RuntimeConfig.CopyCount is required: how many copies of the model to run.")
        copies = int(p["RuntimeConfig"]["CopyCount"])
        endpoint = self._hosting.get_endpoint(endpoint_name)
        if endpoint is None:
            raise validation_exception(
                f'Could not find endpoint "{self.account.arn_of(ResourceKind.ENDPOINT, endpoint_name)}".'
            )
        if endpoint.status != EndpointStatus.IN_SERVICE:
            raise validation_exception(
                f'Endpoint "{endpoint.arn}" is {endpoint.status}: inference components are added to an InService one.'
            )
        variant = self._ic_variant(endpoint.config_name, endpoint.arn, p.get("VariantName"))
        model = self._hosting.get_model(spec["ModelName"])
        if model is None:
            raise validation_exception(
                f'Could not find model "{self.account.arn_of(ResourceKind.MODEL, spec["ModelName"])}".'
            )
        need, size = need_of(spec), self._size(variant)
        too_big = never_fits(need, size)
        if too_big is not None:
            raise validation_exception(f"Inference component {name} cannot be placed on variant "
                                       f"{variant['VariantName']}: {too_big}")  # fmt: skip
        arn = self.account.arn_of(KIND, name)
        record = {"Specification": _spec_record(spec)}
        try:
            row = self.repo.create(
                name, arn, endpoint.name, variant["VariantName"], _C.CREATING, copies, record
            )  # fmt: skip
        except AlreadyExists:
            raise validation_exception(f'Cannot create already existing inference component "{arn}".') from None
        refused = self._reserve(row, need, copies)
        if refused is not None:
            self._settle(row.name, _C.CREATING, _C.FAILED, failure_reason=refused)
        else:
            self._fleets.background(self._start(row, need, endpoint.config_name))
        return {"InferenceComponentArn": arn}

    async def describe(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["InferenceComponentName"])
        live = self._live.get(row.name.lower())
        current = self.current_copies(row.name)
        out: dict[str, Any] = {
            "InferenceComponentName": row.name,
            "InferenceComponentArn": row.arn,
            "EndpointName": row.endpoint,
            "EndpointArn": self.account.arn_of(ResourceKind.ENDPOINT, row.endpoint),
            "VariantName": row.variant,
            "Specification": row.record.get("Specification", {}),
            "RuntimeConfig": {"DesiredCopyCount": row.desired_copies, "CurrentCopyCount": current},
            "CreationTime": row.created,
            "LastModifiedTime": row.last_modified,
            "InferenceComponentStatus": row.status,
        }
        if row.failure_reason:
            out["FailureReason"] = row.failure_reason
        # servekit's: each copy's instance process and the variant instance it is placed on
        placed = [c for c in self._placed.get((row.endpoint.lower(), row.variant), []) if c.component == row.name]
        ids = _instance_ids(live.controller) if live is not None else []
        out["ServekitCopies"] = [
            {"InstanceId": ids[i] if i < len(ids) else "", "VariantInstance": c.instance} for i, c in enumerate(placed)
        ]
        return out

    async def list_components(self, p: dict[str, Any]) -> dict[str, Any]:
        where, args = where_set(
            ("instr(lower(name), lower(?)) > 0", p.get("NameContains")),
            ("created < ?", optional_epoch(p.get("CreationTimeBefore"))),
            ("created > ?", optional_epoch(p.get("CreationTimeAfter"))),
            ("last_modified < ?", optional_epoch(p.get("LastModifiedTimeBefore"))),
            ("last_modified > ?", optional_epoch(p.get("LastModifiedTimeAfter"))),
            ("status = ?", p.get("StatusEquals")),
            ("endpoint = ?", p.get("EndpointNameEquals")),
            ("variant = ?", p.get("VariantNameEquals")),
        )
        listing = Listing(
            where,
            args,
            p.get("SortBy") or "CreationTime",
            p.get("SortOrder") or "Descending",
            int(p.get("MaxResults") or 10),
            p.get("NextToken"),
        )
        try:
            page = self.repo.page(listing)
        except ValueError as exc:  # a NextToken this listing did not issue
            raise validation_exception(str(exc)) from None
        out: dict[str, Any] = {
            "InferenceComponents": [
                {
                    "CreationTime": r.created,
                    "InferenceComponentArn": r.arn,
                    "InferenceComponentName": r.name,
                    "EndpointArn": self.account.arn_of(ResourceKind.ENDPOINT, r.endpoint),
                    "EndpointName": r.endpoint,
                    "VariantName": r.variant,
                    "InferenceComponentStatus": r.status,
                    "LastModifiedTime": r.last_modified,
                }
                for r in page.items
            ]
        }
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def update(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["InferenceComponentName"])
        if p.get("Specifications"):
            raise validation_exception("Specifications (several containers) is not supported: give Specification.")
        spec = p.get("Specification")
        if spec is not None:
            problem = check_specification(spec)
            if problem is not None:
                raise validation_exception(problem)
            if self._hosting.get_model(spec["ModelName"]) is None:
                arn = self.account.arn_of(ResourceKind.MODEL, spec["ModelName"])
                raise validation_exception(f'Could not find model "{arn}".')
            endpoint = self._hosting.get_endpoint(row.endpoint)
            config = endpoint.config_name if endpoint is not None else ""
            too_big = never_fits(need_of(spec), self._size(self._ic_variant(config, row.endpoint, row.variant)))
            if too_big is not None:
                raise validation_exception(f"Inference component {row.name} cannot be placed: {too_big}")
        if spec is None and p.get("RuntimeConfig") is None:
            raise validation_exception("UpdateInferenceComponent needs a Specification or a RuntimeConfig to change.")
        copies = int(p["RuntimeConfig"]["CopyCount"]) if p.get("RuntimeConfig") else row.desired_copies
        return self._begin_update(row, copies, _spec_record(spec) if spec is not None else None)

    async def update_runtime_config(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["InferenceComponentName"])
        return self._begin_update(row, int(p["DesiredRuntimeConfig"]["CopyCount"]), None)

    async def delete(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["InferenceComponentName"])
        if row.status != _C.DELETING:
            self._move(row, _C.DELETING)
        self._fleets.background(self._tear_down(row.name))
        return {}

    # ---- what the other parts ask --------------------------------------------------------------------------------
    def route(self, endpoint: str, component: str | None) -> str:
        """The routing key InvokeEndpoint goes to: the endpoint's own, or its named component's; refused (the
        runtime's ValidationError) for an unknown component, or an IC-based endpoint invoked without one."""
        if component is None:
            if self._table.variants(endpoint) == []:  # an IC-based endpoint has no fleet of its own
                names = ", ".join(self.names(endpoint)) or "none yet"
                raise GatewayError(
                    "ValidationError",
                    400,
                    f"Endpoint {endpoint} is an IC-based endpoint (its inference components: {names}): name the one "
                    f"to invoke with InferenceComponentName (header {HEADER}).",
                )
            return endpoint
        known = self._known(component)
        if known is None or known[1] != endpoint:
            raise GatewayError(
                "ValidationError", 400, f"Inference component {component} not found for endpoint {endpoint}."
            )
        return route_key(known[0])

    def _known(self, component: str) -> tuple[str, str] | None:
        """(name as created, endpoint) of a component: this process's own copies, else the state (a gateway
        replica routes by the leader's published routes and has no copies of its own)."""
        live = self._live.get(component.lower())
        if live is not None:
            return live.name, live.endpoint
        row = self.repo.get(component)
        return (row.name, row.endpoint) if row is not None else None

    def record(self, component: str, model_s: float | None, error: int | None = None) -> None:
        """One InvokeEndpoint of ``component``: CloudWatch's per-component series (AWS/SageMaker, dimension
        InferenceComponentName): Invocations, InvocationsPerCopy (what target tracking on copies reads),
        ModelLatency (microseconds), Invocation4XXErrors/5XXErrors."""
        known = self._known(component) if self._metrics is not None else None
        if self._metrics is None or known is None:
            return
        dims = ((DIMENSION, known[0]),)
        t = self._metrics.clock()
        copies = sum(len(v.instances) for v in self._table.variants(route_key(known[0])) or [])  # serving copies
        self._metrics.record(NAMESPACE, "Invocations", dims, 1.0, t)
        self._metrics.record(NAMESPACE, "InvocationsPerCopy", dims, 1.0 / copies if copies else 1.0, t)
        self._metrics.record(NAMESPACE, "Invocation4XXErrors", dims, 1.0 if error == 4 else 0.0, t)
        self._metrics.record(NAMESPACE, "Invocation5XXErrors", dims, 1.0 if error == 5 else 0.0, t)
        if model_s is not None:
            self._metrics.record(NAMESPACE, "ModelLatency", dims, model_s * 1e6, t)

    def current_copies(self, name: str) -> int:
        """The component's copies serving now (DescribeInferenceComponent's CurrentCopyCount)."""
        live = self._live.get(name.lower())
        return _healthy(live.controller) if live is not None else 0

    def _setup_time(self, component: str, setup_s: float) -> None:
        """``ModelSetupTime`` (microseconds) of a copy that turned healthy, by InferenceComponentName."""
        if self._metrics is not None:
            self._metrics.record(NAMESPACE, "ModelSetupTime", ((DIMENSION, component),), setup_s * 1e6)

    def names(self, endpoint: str) -> list[str]:
        """The components recorded on ``endpoint`` (any status)."""
        return [r.name for r in self.repo.all(endpoint)]

    def exists(self, name: str) -> bool:
        return self.repo.get(name) is not None

    def set_copies(self, name: str, copies: int) -> None:
        """Application Auto Scaling's DesiredCopyCount (UpdateInferenceComponentRuntimeConfig's change)."""
        row = self._row(name)
        if row.desired_copies != copies or row.status == _C.FAILED:
            self._begin_update(row, copies, None)

    def instances_of(self, endpoint: str, variant: str) -> int:
        """The instances an IC-based variant runs: those its copies are on, never fewer than its minimum."""
        row = self._hosting.get_endpoint(endpoint)
        config = self._hosting.get_endpoint_config(row.config_name) if row is not None else None
        found = [v for v in (config.variants if config is not None else ()) if v.get("VariantName") == variant]
        minimum = instance_bounds(found[0]).minimum if found else 0
        return instances_in_use(self._placed.get((endpoint.lower(), variant), []), minimum)

    def variant_summaries(self, endpoint: str) -> list[dict[str, Any]]:
        """DescribeEndpoint's IC-based variants: the instances their copies need, within the variant's bounds."""
        row = self._hosting.get_endpoint(endpoint)
        config = self._hosting.get_endpoint_config(row.config_name) if row is not None else None
        out: list[dict[str, Any]] = []
        for v in config.variants if config is not None else ():
            if not is_ic_variant(v):
                continue
            bounds = instance_bounds(v)
            count = instances_in_use(self._placed.get((endpoint.lower(), v["VariantName"]), []), bounds.minimum)
            item: dict[str, Any] = {
                "VariantName": v["VariantName"],
                "CurrentWeight": float(v.get("InitialVariantWeight", 1.0)),
                "DesiredWeight": float(v.get("InitialVariantWeight", 1.0)),
                "CurrentInstanceCount": count,
                "DesiredInstanceCount": count,
            }
            if v.get("ManagedInstanceScaling"):
                item["ManagedInstanceScaling"] = v["ManagedInstanceScaling"]
            if v.get("RoutingConfig"):
                item["RoutingConfig"] = v["RoutingConfig"]
            out.append(item)
        return out

    # ---- lifecycle of the background work (recovery, dead copies replaced, shutdown) --------------------------
    async def recover(self) -> None:
        """After a restart: each component's copies placed again in creation order and started (serving when this
        returns); one caught Deleting is deleted; one whose endpoint is gone fails."""
        for row in self.repo.all():
            if row.status == _C.DELETING:
                self.repo.delete(row.name)
                continue
            if row.status == _C.FAILED:
                continue
            endpoint = self._hosting.get_endpoint(row.endpoint)
            spec = row.record.get("Specification") or {}
            if endpoint is None or endpoint.status != EndpointStatus.IN_SERVICE:
                self._settle(row.name, _C(row.status), _C.FAILED, failure_reason="Its endpoint is not in service.")
                continue
            refused = self._reserve(row, need_of(spec), row.desired_copies)
            if refused is not None:
                self._settle(row.name, _C(row.status), _C.FAILED, failure_reason=refused)
                continue
            if row.status == _C.IN_SERVICE:  # the start records InService from Creating or Updating only
                row = self.repo.change(row.name, status=_C.UPDATING)
            await self._start(row, need_of(spec), endpoint.config_name)

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._tick_s)
            for live in list(self._live.values()):
                try:
                    await live.controller.tick()
                except Exception:
                    log.exception("supervising inference component %s failed", live.name)

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for live in list(self._live.values()):
            await live.controller.delete()

    # ---- the work ----------------------------------------------------------------------------------------------
    def _begin_update(self, row: InferenceComponentRow, copies: int, spec: dict[str, Any] | None) -> dict[str, Any]:
        self._move(row, _C.UPDATING, copies=copies, record={**row.record, "Specification": spec} if spec else None)
        self._fleets.background(self._apply(row.name, row.desired_copies, spec is not None))
        return {"InferenceComponentArn": row.arn}

    def _reserve(self, row: InferenceComponentRow, need: CopyNeed, copies: int) -> str | None:
        """Place ``copies`` more copies of the component on its variant's instances (why not, with the sizes)."""
        endpoint = self._hosting.get_endpoint(row.endpoint)
        config = endpoint.config_name if endpoint is not None else ""
        variant = self._ic_variant(config, row.endpoint, row.variant)
        key = (row.endpoint.lower(), row.variant)
        placed = self._placed.setdefault(key, [])
        decided = place(self._size(variant), placed, row.name, need, copies, instance_bounds(variant))
        if decided.refused is not None:
            return decided.refused
        placed.extend(PlacedCopy(row.name, need, i) for i in decided.instances)
        return None

    def _release(self, row: InferenceComponentRow, keep: int) -> None:
        """Give back the room of the component's newest copies beyond ``keep``."""
        key = (row.endpoint.lower(), row.variant)
        mine = [c for c in self._placed.get(key, []) if c.component == row.name]
        gone = {id(c) for c in mine[keep:]}
        self._placed[key] = compact([c for c in self._placed.get(key, []) if id(c) not in gone])

    def _plan(self, row: InferenceComponentRow, need: CopyNeed, config_name: str, copies: int) -> EndpointPlan:
        spec = row.record.get("Specification") or {}
        variant = {
            "VariantName": row.variant,
            "ModelName": spec["ModelName"],
            "InstanceType": self._size(self._ic_variant(config_name, row.endpoint, row.variant)).instance_type,
            "InitialVariantWeight": 1.0,
            "InitialInstanceCount": copies,
        }
        base = self._fleets.component_plan(row.endpoint, config_name, variant)
        # the copy's own envelope; no GPU (NumberOfAcceleratorDevicesRequired is refused: copies hold no accelerator)
        plan = replace(base, vcpus=need.process_vcpus, memory_bytes=need.envelope_mb * 2**20, count=copies, gpus=0)
        return EndpointPlan(route_key(row.name), config_name, (plan,))

    async def _start(self, row: InferenceComponentRow, need: CopyNeed, config_name: str) -> None:
        """Creating/Updating -> InService once every copy serves, else Failed (the room given back)."""
        async with self._lock(row.name):
            now = self.repo.get(row.name)
            if now is None or now.status == _C.DELETING:  # deleted while it waited: start nothing
                self._release(row, 0)
                return
            try:
                plan = await asyncio.to_thread(self._plan, row, need, config_name, row.desired_copies)
            except (ValueError, ApiError) as exc:
                self._release(row, 0)
                reason = str(exc) if isinstance(exc, ValueError) else exc.message
                self._settle(row.name, _C(row.status), _C.FAILED, failure_reason=reason)
                return
            name = row.name
            controller = self._fleets.standalone_controller(
                route_key(name), lambda config, variant, instance, setup_s: self._setup_time(name, setup_s)
            )
            live = _Live(row.name, row.endpoint, row.variant, need, controller)
            self._live[row.name.lower()] = live
            ok = await controller.create(plan)
            if ok:
                self._settle(row.name, _C(row.status), _C.IN_SERVICE, failure_reason="")
                return
            self._live.pop(row.name.lower(), None)
            await controller.delete()
            self._release(row, 0)
            reason = controller.last_reason or "its copies did not start"
            self._settle(row.name, _C(row.status), _C.FAILED, failure_reason=reason)

    async def _apply(self, name: str, before: int, new_spec: bool) -> None:
        """UpdateInferenceComponent's background half: a new copy count in place (the other copies untouched), or
        a new specification's copies in place of the old ones."""
        row = self.repo.get(name)
        if row is None:
            return
        spec = row.record.get("Specification") or {}
        need = need_of(spec)
        live = self._live.get(name.lower())
        endpoint = self._hosting.get_endpoint(row.endpoint)
        config_name = endpoint.config_name if endpoint is not None else ""
        if live is None or new_spec:  # a failed component, or another model or size: new copies replace the old
            if live is not None:
                async with self._lock(name):
                    self._live.pop(name.lower(), None)
                    await live.controller.delete()
            self._release(row, 0)
            refused = self._reserve(row, need, row.desired_copies)
            if refused is not None:
                self._settle(name, _C.UPDATING, _C.FAILED, failure_reason=refused)
                return
            await self._start(row, need, config_name)
            return
        async with self._lock(name):
            running = len(live.controller.fleets.get(row.variant, _NoFleet()).instances)
            if row.desired_copies > running:
                refused = self._reserve(row, need, row.desired_copies - running)
                if refused is not None:  # as SageMaker rolls a capacity change back: the copies that run stay
                    self._settle(
                        name,
                        _C.UPDATING,
                        _C.IN_SERVICE,
                        copies=before,
                        failure_reason=f"The copy count change to {row.desired_copies} was rolled back: {refused}",
                    )
                    return
            else:
                self._release(row, row.desired_copies)
            failed = await live.controller.set_capacity({row.variant: (None, row.desired_copies)})
            if failed is not None:
                self._release(row, _healthy(live.controller))
            self._settle(
                name,
                _C.UPDATING,
                _C.IN_SERVICE,
                copies=before if failed else None,
                failure_reason=f"The copy count change was rolled back: {failed}" if failed else "",
            )

    async def _tear_down(self, name: str) -> None:
        row = self.repo.get(name)
        async with self._lock(name):
            live = self._live.pop(name.lower(), None)
            if live is not None:
                await live.controller.delete()
            if row is not None:
                self._release(row, 0)
            self.repo.delete(name)
        self._locks.pop(name.lower(), None)

    # ---- helpers -----------------------------------------------------------------------------------------------
    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name.lower(), asyncio.Lock())

    def _row(self, name: str) -> InferenceComponentRow:
        row = self.repo.get(name)
        if row is None:
            raise validation_exception(f'Could not find inference component "{self.account.arn_of(KIND, name)}".')
        return row

    def _ic_variant(self, config_name: str, endpoint: str, variant_name: str | None) -> Mapping[str, Any]:
        config = self._hosting.get_endpoint_config(config_name)
        variants = [v for v in (config.variants if config is not None else ()) if is_ic_variant(v)]
        if variant_name is not None:
            variants = [v for v in variants if v["VariantName"] == variant_name]
        if len(variants) != 1:
            named = f" {variant_name}" if variant_name else ""
            raise validation_exception(
                f"Endpoint {endpoint} has several IC-based variants: name one with VariantName."
                if variants
                else f"Endpoint {endpoint} has no IC-based variant{named} (an InstanceType and no ModelName) to host "
                "inference components."
            )
        return variants[0]

    def _size(self, variant: Mapping[str, Any]) -> InstanceSize:
        env = self._envelopes.envelope(str(variant.get("InstanceType", "")))
        if env is None:
            raise validation_exception(f"The instance type {variant.get('InstanceType')!r} is not known.")
        return InstanceSize(str(variant["InstanceType"]), float(env.vcpus), int((env.memory_bytes or 0) // 2**20))

    def _move(self, row: InferenceComponentRow, to: ComponentStatus, **fields: Any) -> None:
        """A change a request asks for: refused (ValidationException) when the status does not allow it."""
        current = _C(row.status)
        if not may_move(current, to):
            verb = {_C.UPDATING: "update", _C.DELETING: "delete"}.get(to, str(to))
            raise validation_exception(f'Cannot {verb} inference component "{row.arn}" while it is {current}.')
        try:
            self.repo.change(row.name, expected=(current.value,), status=to, **fields)
        except StaleStatus as exc:
            raise validation_exception(f'Inference component "{row.arn}" is {exc.actual} now; retry.') from None

    def _settle(self, name: str, expected: ComponentStatus, to: ComponentStatus, **fields: Any) -> None:
        """Record a background result unless the component moved on meanwhile (deleting, deleted)."""
        check_component_transition(expected, to)
        fields = {k: v for k, v in fields.items() if v is not None}
        try:
            self.repo.change(name, expected=(expected.value,), status=to, **fields)
        except (NotFound, StaleStatus) as exc:
            log.info("inference component %s: not recording %s -> %s: %s", name, expected, to, exc)


class _EndpointOps(Protocol):
    async def describe_endpoint(self, p: dict[str, Any]) -> dict[str, Any]: ...

    async def update_endpoint_weights_and_capacities(self, p: dict[str, Any]) -> dict[str, Any]: ...


class Scalables:
    """What Application Auto Scaling's loop asks of hosting (describe a resource, set its capacity) for endpoint
    variants and inference components alike: ``inference-component/<name>`` is answered as an endpoint whose one
    variant (``DesiredCopyCount``) has the component's copies for instances; anything else goes to ``endpoints``."""

    def __init__(self, endpoints: _EndpointOps, components: InferenceComponents) -> None:
        self._endpoints = endpoints
        self._components = components

    async def describe_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        resource = str(p["EndpointName"])
        if not resource.startswith(SCALABLE_PREFIX):
            return await self._endpoints.describe_endpoint(p)
        row = self._components.repo.get(resource.removeprefix(SCALABLE_PREFIX))
        if row is None:  # the scaler deregisters the target of a deleted resource on these words
            raise validation_exception(f'Could not find endpoint "{resource}".')
        status = {_C.IN_SERVICE: "InService", _C.FAILED: "Failed"}.get(_C(row.status), "Updating")
        variant = {
            "VariantName": "DesiredCopyCount",
            "DesiredInstanceCount": row.desired_copies,
            "CurrentInstanceCount": self._components.current_copies(row.name),
        }
        return {"EndpointName": resource, "EndpointStatus": status, "FailureReason": row.failure_reason,
                "ProductionVariants": [variant]}  # fmt: skip

    async def update_endpoint_weights_and_capacities(self, p: dict[str, Any]) -> dict[str, Any]:
        resource = str(p["EndpointName"])
        if not resource.startswith(SCALABLE_PREFIX):
            return await self._endpoints.update_endpoint_weights_and_capacities(p)
        wanted = p["DesiredWeightsAndCapacities"][0]["DesiredInstanceCount"]
        self._components.set_copies(resource.removeprefix(SCALABLE_PREFIX), int(wanted))
        return {}


SCALABLE_PREFIX = "inference-component/"  # Application Auto Scaling's ResourceId of a component


class _NoFleet:
    instances: tuple[()] = ()


def _healthy(controller: EndpointController) -> int:
    return sum(len(f.healthy()) for f in controller.fleets.values())


def _instance_ids(controller: EndpointController) -> list[str]:
    return [i.handle.spec.instance_id for f in controller.fleets.values() for i in f.instances]


def _spec_record(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What DescribeInferenceComponent shows of a Specification: the model and its requirements as given."""
    return {k: spec[k] for k in ("ModelName", "ComputeResourceRequirements") if spec.get(k) is not None}
