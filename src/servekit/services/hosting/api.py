"""The SageMaker hosting operations: models, endpoint configs and endpoints, with SageMaker's semantics and errors.

Requests arrive validated against botocore's input shapes (``servekit.aws``); this module decides: it keeps the
records in the hosting state and moves endpoints through their lifecycle (``hosting.lifecycle``), and hands the
work on fleets to the orchestrator (``hosting.orchestrator``), which does it in the background, so CreateEndpoint
answers at once with ``Creating`` as the real service does and the waiters see ``InService`` (or ``Failed`` with
the reason) when it is so.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.front import Handler
from servekit.aws.names import Account, ResourceKind
from servekit.aws.timestamps import optional_epoch
from servekit.services.hosting import rollout
from servekit.services.hosting.capture import with_capture_format
from servekit.services.hosting.component_rules import check_ic_variant, is_ic_variant
from servekit.services.hosting.components import InferenceComponents
from servekit.services.hosting.envelopes import Envelopes
from servekit.services.hosting.fleet import AlarmStates
from servekit.services.hosting.framework import FrameworkError
from servekit.services.hosting.images import UnknownImage, served_by
from servekit.services.hosting.lifecycle import EndpointStatus, predecessors
from servekit.services.hosting.orchestrator import Orchestrator, no_config
from servekit.services.hosting.rollout import RolloutPolicy
from servekit.services.hosting.serverless import check_variant, initial_count
from servekit.services.hosting.store import Hosting
from servekit.services.hosting.store_rows import (
    AlreadyExists,
    ContainerSpec,
    EndpointRow,
    NotFound,
    StaleStatus,
    VariantState,
)

_E = EndpointStatus

PackageResolver = Callable[[str], dict[str, Any]]  # ModelPackageName -> its container (raises ApiError)

log = logging.getLogger(__name__)


class HostingService:
    def __init__(
        self,
        repo: Hosting,
        fleets: Orchestrator,
        envelopes: Envelopes,
        account: Account | None = None,
        alarm_states: AlarmStates | None = None,
        scaled_variants: Callable[[str], Collection[str]] | None = None,
        model_packages: PackageResolver | None = None,
        image_mapped: Callable[[str], bool] | None = None,
    ) -> None:
        """``fleets`` runs the endpoints' fleets (this validates and records; it does the work in the background).
        ``alarm_states`` (alarm names -> their states) is what a deployment's AutoRollbackConfiguration watches;
        without it, UpdateEndpoint refuses alarms (there is nothing to watch them with). ``scaled_variants``:
        an endpoint's variants registered with Application Auto Scaling (their instance type is then fixed);
        ``model_packages``: CreateModel's ModelPackageName -> the package's container (the model registry's);
        ``image_mapped``: whether the user mapped an image (``servekit images add``), for CreateModel's Image check."""
        self.repo = repo
        self.fleets = fleets
        self._envelopes = envelopes
        self.account = account or Account()
        self._alarm_states = alarm_states
        self._scaled_variants = scaled_variants
        self.model_packages = model_packages
        self.image_mapped = image_mapped
        # the inference components of IC-based endpoints (set by the composition root): DescribeEndpoint shows
        # their variants' instances, DeleteEndpoint waits for them to be deleted first
        self.components: InferenceComponents | None = None

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
        try:
            runtime = served_by(
                str(container.get("Image") or ""), container.get("Environment") or {}, self.image_mapped
            )
        except UnknownImage as exc:
            raise validation_exception(str(exc)) from None
        spec = ContainerSpec.from_json(container)
        try:  # a framework model's script (SAGEMAKER_PROGRAM in SAGEMAKER_SUBMIT_DIRECTORY), read, never run
            await asyncio.to_thread(self.fleets.framework.check, spec)
        except FrameworkError as exc:
            raise validation_exception(exc.message) from None
        arn = self._arn(ResourceKind.MODEL, name)
        record = {k: v for k, v in p.items() if k not in ("Tags",)}
        record["ModelArn"] = arn
        record["ServekitServedBy"] = runtime  # servekit's own field: which runtime serves this image
        try:
            self.repo.create_model(name, arn, spec, record)
        except AlreadyExists:
            raise validation_exception(f'Cannot create already existing model "{arn}".') from None
        log.info("model %s: image %s is served by %s", name, container.get("Image") or "(none)", runtime)
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
            problem = check_variant(v)
            if problem is not None:
                raise validation_exception(problem)
            model = v.get("ModelName")
            if is_ic_variant(v):  # an IC-based endpoint's variant: its inference components bring the models
                problem = check_ic_variant(v)
                if problem is not None:
                    raise validation_exception(problem)
            elif not model or self.repo.get_model(model) is None:
                arn = self._arn(ResourceKind.MODEL, model or "-")
                raise validation_exception(f'Could not find model "{arn}".')
            if v.get("ServerlessConfig"):  # no instance type: its envelope is its MemorySizeInMB
                v.setdefault("InitialVariantWeight", 1.0)
                continue
            if self._envelopes.envelope(v.get("InstanceType", "")) is None:
                raise validation_exception(
                    f"The instance type {v.get('InstanceType')!r} of variant {v['VariantName']} is not known to this "
                    "control plane; add it to the instance types file or pick an ml.* type from the docs."
                )
            v.setdefault("InitialVariantWeight", 1.0)
            v.setdefault("InitialInstanceCount", 1)
        problem = _async_config_problem(p.get("AsyncInferenceConfig"), variants)
        if problem is not None:
            raise validation_exception(problem)
        steps = _traffic_steps(p.get("Tags") or [])
        data_capture = with_capture_format(p.get("DataCaptureConfig"), p.get("Tags") or [])
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
        return no_config(self.account, name)

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
                initial_count(v),
            )
            for v in config.variants
        ]
        record = {k: v for k, v in p.items() if k not in ("EndpointName", "EndpointConfigName", "Tags")}
        try:
            self.repo.create_endpoint(name, arn, config.name, _E.CREATING, variants, record, reason="CreateEndpoint")
        except AlreadyExists:
            raise validation_exception(f'Cannot create already existing endpoint "{arn}".') from None
        self.fleets.create(name, config.name)
        return {"EndpointArn": arn}

    async def describe_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._endpoint(p["EndpointName"])
        controller = self.fleets.controllers.get(row.name)
        variants = controller.summary() if controller and controller.plan else [v.to_json() for v in row.variants]
        ic_variants = self.components.variant_summaries(row.name) if self.components is not None else []
        if ic_variants:
            named = {v["VariantName"] for v in ic_variants}
            variants = [v for v in variants if v["VariantName"] not in named] + ic_variants
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
        if config is not None and config.record.get("AsyncInferenceConfig"):
            out["AsyncInferenceConfig"] = config.record["AsyncInferenceConfig"]  # SageMaker repeats it here
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
        out["ServekitCostPerHour"] = self.fleets.cost_per_hour(row)
        if self.fleets.warnings.get(row.name):
            out["ServekitWarnings"] = list(self.fleets.warnings[row.name])
        return out

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
        self.fleets.update(name, config.name, policy, deployment, retain)
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
        green = sum(initial_count(v) for v in config.variants)
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
        excluded = {e.get("VariantPropertyType") for e in p.get("ExcludeRetainedVariantProperties") or []}
        return self.fleets.retained(name, {str(e) for e in excluded})

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
        self.fleets.scale(name, changes)
        return {"EndpointArn": row.arn}

    async def delete_endpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._endpoint(p["EndpointName"])
        if self.components is not None and self.components.names(row.name):
            raise validation_exception(
                f'Endpoint "{row.arn}" still hosts inference components ({", ".join(self.components.names(row.name))})'
                "; delete them first (DeleteInferenceComponent)."
            )
        if row.status != _E.DELETING:
            self._move(row, _E.DELETING, "DeleteEndpoint")
        self.fleets.delete(row.name)
        return {}

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


def _async_config_problem(config: dict[str, Any] | None, variants: list[dict[str, Any]]) -> str | None:
    """What an AsyncInferenceConfig cannot be beyond its shape (botocore checks the paths' and topics' patterns)."""
    if not config:
        return None
    if not (config.get("OutputConfig") or {}).get("S3OutputPath"):
        return (
            "AsyncInferenceConfig.OutputConfig.S3OutputPath is required: the S3 location (s3://bucket/prefix) that "
            "asynchronous answers are written to."
        )
    serverless = [v["VariantName"] for v in variants if v.get("ServerlessConfig")]
    if serverless:
        return (
            f"Variant {serverless[0]} has a ServerlessConfig: asynchronous inference (AsyncInferenceConfig) runs on "
            "instance variants only (InstanceType and InitialInstanceCount)."
        )
    return None


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


def _busy_message(row: EndpointRow, current: EndpointStatus, to: EndpointStatus) -> str:
    verb = {_E.UPDATING: "update", _E.DELETING: "delete"}.get(to, str(to))
    return f'Cannot {verb} in-progress endpoint "{row.arn}" (status {current}).'


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
