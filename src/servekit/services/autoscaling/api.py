"""Application Auto Scaling's operations for SageMaker endpoint variants, over the autoscaling state.

:class:`AutoscalingApi` answers RegisterScalableTarget, DescribeScalableTargets, DeregisterScalableTarget,
PutScalingPolicy (TargetTrackingScaling only), DescribeScalingPolicies, DeleteScalingPolicy and
DescribeScalingActivities (``handlers()``, registered as ``services={"application-autoscaling": ...}`` on
:class:`~servekit.edge.plane.ControlPlane`). It stores definitions; deciding a count is
:func:`servekit.services.autoscaling.target_tracking.decide`'s, and nothing here runs a scaler loop yet.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from servekit.aws.errors import ApiError
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.aws.timestamps import optional_epoch
from servekit.services.autoscaling.scheduled import ScheduleError
from servekit.services.autoscaling.scheduled import parse as parse_schedule
from servekit.services.autoscaling.step import StepConfigError, StepPolicy
from servekit.services.autoscaling.store import Autoscaling, Key
from servekit.services.autoscaling.target_tracking import (
    COMPONENT_DIMENSION,
    INVOCATIONS_PER_COPY,
    INVOCATIONS_PER_INSTANCE,
    component_of,
    parse_resource_id,
)

NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
DEFAULT_COOLDOWN = 300


def _validation(message: str) -> ApiError:
    return ApiError("ValidationException", message, None)


def _not_found(message: str) -> ApiError:
    return ApiError("ObjectNotFoundException", message, None)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _key(p: dict[str, Any]) -> Key:
    namespace = p.get("ServiceNamespace")
    if namespace != NAMESPACE:
        raise _validation(
            f"servekit scales SageMaker endpoint variants and inference components: ServiceNamespace must be "
            f"{NAMESPACE}."
        )
    resource_id, dimension = p.get("ResourceId"), p.get("ScalableDimension")
    if not resource_id or not dimension:
        raise _validation("ResourceId and ScalableDimension are required.")
    try:
        parse_resource_id(resource_id)
    except ValueError as exc:
        raise _validation(str(exc)) from None
    wanted = COMPONENT_DIMENSION if component_of(resource_id) is not None else DIMENSION
    if dimension != wanted:
        raise _validation(f"Unsupported scalable dimension {dimension} for {resource_id}; it takes {wanted}.")
    return NAMESPACE, resource_id, dimension


class AutoscalingApi:
    def __init__(
        self,
        repo: Autoscaling,
        account: Account,
        clock: Callable[[], float] = time.time,
        variant_exists: Callable[[str, str], bool] | None = None,
        asynchronous: Callable[[str], bool] | None = None,
    ) -> None:
        """``variant_exists(endpoint, variant)``: whether hosting has that endpoint variant (None: not checked);
        ``asynchronous(endpoint)``: whether its config has AsyncInferenceConfig, whose variants may scale to zero."""
        self.repo = repo
        self.account = account
        self.clock = clock
        self._variant_exists = variant_exists
        self._asynchronous = asynchronous

    def _check_min(self, lo: int, resource_id: str) -> None:
        """SageMaker's floor: 1 instance for a real-time variant; 0 for an asynchronous endpoint's, which keeps
        its queue while it has no instance (AWS's documented scale to zero for asynchronous inference)."""
        if lo >= 1 or (lo == 0 and component_of(resource_id) is not None):  # a component may run no copy
            return
        endpoint, _ = parse_resource_id(resource_id)
        if lo == 0 and self._asynchronous is not None and self._asynchronous(endpoint):
            return
        raise _validation(
            "MinCapacity must be at least 1 for a SageMaker endpoint variant (0 is allowed only for a variant of an "
            "asynchronous endpoint, whose endpoint config has AsyncInferenceConfig)."
        )

    def handlers(self) -> dict[str, Handler]:
        return {
            "RegisterScalableTarget": self.register_scalable_target,
            "DescribeScalableTargets": self.describe_scalable_targets,
            "DeregisterScalableTarget": self.deregister_scalable_target,
            "PutScalingPolicy": self.put_scaling_policy,
            "DescribeScalingPolicies": self.describe_scaling_policies,
            "DeleteScalingPolicy": self.delete_scaling_policy,
            "PutScheduledAction": self.put_scheduled_action,
            "DescribeScheduledActions": self.describe_scheduled_actions,
            "DeleteScheduledAction": self.delete_scheduled_action,
            "DescribeScalingActivities": self.describe_scaling_activities,
        }

    def _arn(self, service: str, tail: str) -> str:
        a = self.account
        return f"arn:{a.partition}:{service}:{a.region}:{a.account_id}:{tail}"

    def _target(self, key: Key) -> dict[str, Any]:
        found = self.repo.get_target(key)
        if found is None:
            raise _not_found(
                f"No scalable target registered for service namespace: {key[0]}, resource ID: {key[1]}, "
                f"scalable dimension: {key[2]}"
            )
        return found.document

    # ---- scalable targets ------------------------------------------------------------------------------------
    async def register_scalable_target(self, p: dict[str, Any]) -> dict[str, Any]:
        key = _key(p)
        endpoint, variant = parse_resource_id(key[1])
        if self._variant_exists is not None and not self._variant_exists(endpoint, variant):
            if component_of(key[1]) is not None:
                raise _validation(f"Resource {key[1]} does not exist: there is no inference component of that name.")
            raise _validation(
                f"Resource {key[1]} does not exist: there is no endpoint {endpoint} with a variant {variant} "
                "(create the endpoint first)."
            )
        found = self.repo.get_target(key)
        old = found.document if found else {}
        lo = p.get("MinCapacity", old.get("MinCapacity"))
        hi = p.get("MaxCapacity", old.get("MaxCapacity"))
        if lo is None or hi is None:
            raise _validation("MinCapacity and MaxCapacity are required to register a new scalable target.")
        self._check_min(lo, key[1])
        if lo > hi:
            raise _validation(f"Minimum capacity {lo} cannot be greater than maximum capacity {hi}.")
        doc = {
            "ServiceNamespace": key[0],
            "ResourceId": key[1],
            "ScalableDimension": key[2],
            "MinCapacity": lo,
            "MaxCapacity": hi,
            "RoleARN": p.get("RoleARN")
            or old.get("RoleARN")
            or self._arn("iam", "role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
                         "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"),
            "SuspendedState": p.get("SuspendedState")
            or old.get("SuspendedState")
            or {"DynamicScalingInSuspended": False, "DynamicScalingOutSuspended": False,
                "ScheduledScalingSuspended": False},
            "ScalableTargetARN": old.get("ScalableTargetARN")
            or self._arn("application-autoscaling", f"scalable-target/{uuid.uuid4().hex[:36]}"),
        }  # fmt: skip
        stored = self.repo.put_target(key, doc)
        return {"ScalableTargetARN": stored.document["ScalableTargetARN"]}

    async def describe_scalable_targets(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("ServiceNamespace") != NAMESPACE:
            return {"ScalableTargets": []}
        rows = self.repo.targets(NAMESPACE, p.get("ResourceIds") or (), p.get("ScalableDimension"))
        return {"ScalableTargets": [{**r.document, "CreationTime": _dt(r.created)} for r in rows]}

    async def deregister_scalable_target(self, p: dict[str, Any]) -> dict[str, Any]:
        key = _key(p)
        if not self.repo.delete_target(key):
            raise _not_found(f"No scalable target registered for service namespace: {key[0]}, resource ID: "
                             f"{key[1]}, scalable dimension: {key[2]}")  # fmt: skip
        return {}

    # ---- scaling policies ------------------------------------------------------------------------------------
    async def put_scaling_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        key = _key(p)
        name = p.get("PolicyName") or ""
        policy_type = p.get("PolicyType", "StepScaling")  # AAS's default when omitted
        if policy_type == "TargetTrackingScaling":
            config = self._target_tracking_config(p)
        elif policy_type == "StepScaling":
            config = self._step_config(p, name)
        else:
            raise _validation(
                f"servekit supports PolicyType TargetTrackingScaling and StepScaling, not {policy_type} "
                "(PredictiveScaling is not implemented)."
            )
        self._target(key)
        old = self.repo.get_policy(key, name)
        if old and old["PolicyType"] != policy_type:
            raise _validation(f"Policy {name} is of type {old['PolicyType']}; it cannot become {policy_type}.")
        policy_id = old["PolicyARN"].split(":")[6] if old else str(uuid.uuid4())
        arn = self._arn(
            "autoscaling",
            f"scalingPolicy:{policy_id}:resource/{key[0]}/{key[1]}:policyName/{name}",
        )
        alarms: list[dict[str, str]] = []
        if policy_type == "TargetTrackingScaling":
            alarms = [
                {
                    "AlarmName": f"TargetTracking-{key[1]}-Alarm{which}-{policy_id}",
                    "AlarmARN": self._arn("cloudwatch", f"alarm:TargetTracking-{key[1]}-Alarm{which}-{policy_id}"),
                }
                for which in ("High", "Low")
            ]
        doc = {
            "PolicyARN": arn,
            "PolicyName": name,
            "ServiceNamespace": key[0],
            "ResourceId": key[1],
            "ScalableDimension": key[2],
            "PolicyType": policy_type,
            f"{policy_type.removesuffix('Scaling')}ScalingPolicyConfiguration": config,
            "Alarms": alarms,
            "CreationTime": old["CreationTime"] if old else self.clock(),
        }
        self.repo.put_policy(key, name, doc)
        return {"PolicyARN": arn, "Alarms": alarms}

    @staticmethod
    def _target_tracking_config(p: dict[str, Any]) -> dict[str, Any]:
        config = p.get("TargetTrackingScalingPolicyConfiguration")
        if not config:
            raise _validation("TargetTrackingScalingPolicyConfiguration is required for TargetTrackingScaling.")
        if p.get("StepScalingPolicyConfiguration"):
            raise _validation("StepScalingPolicyConfiguration cannot be given with TargetTrackingScaling.")
        custom = config.get("CustomizedMetricSpecification")
        if custom:
            if config.get("PredefinedMetricSpecification"):
                raise _validation("Give PredefinedMetricSpecification or CustomizedMetricSpecification, not both.")
            if custom.get("Metrics"):
                raise _validation(
                    "servekit's target tracking does not evaluate metric math (Metrics); name one metric."
                )
            if not custom.get("MetricName") or not custom.get("Namespace") or not custom.get("Statistic"):
                raise _validation("CustomizedMetricSpecification needs MetricName, Namespace and Statistic.")
        else:
            metric = (config.get("PredefinedMetricSpecification") or {}).get("PredefinedMetricType")
            wanted = INVOCATIONS_PER_COPY if component_of(str(p.get("ResourceId"))) else INVOCATIONS_PER_INSTANCE
            if metric != wanted:
                raise _validation(
                    f"servekit's target tracking of {p.get('ResourceId')} supports PredefinedMetricType {wanted} or "
                    f"a CustomizedMetricSpecification, not {metric}."
                )
        if not config.get("TargetValue", 0) > 0:
            raise _validation("TargetValue must be greater than 0.")
        return {"ScaleOutCooldown": DEFAULT_COOLDOWN, "ScaleInCooldown": DEFAULT_COOLDOWN, "DisableScaleIn": False,
                **config}  # fmt: skip

    @staticmethod
    def _step_config(p: dict[str, Any], name: str) -> dict[str, Any]:
        config = p.get("StepScalingPolicyConfiguration")
        if not config:
            raise _validation("StepScalingPolicyConfiguration is required for StepScaling.")
        if p.get("TargetTrackingScalingPolicyConfiguration"):
            raise _validation("TargetTrackingScalingPolicyConfiguration cannot be given with StepScaling.")
        try:
            StepPolicy.from_config(name, config)
        except StepConfigError as exc:
            raise _validation(str(exc)) from None
        return {"Cooldown": DEFAULT_COOLDOWN, "MetricAggregationType": "Average", **config}

    async def describe_scaling_policies(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("ServiceNamespace") != NAMESPACE:
            return {"ScalingPolicies": []}
        docs = self.repo.policies(
            NAMESPACE, p.get("ResourceId"), p.get("ScalableDimension"), p.get("PolicyNames") or ()
        )
        return {"ScalingPolicies": [{**d, "CreationTime": _dt(d["CreationTime"])} for d in docs]}

    # ---- scheduled actions -----------------------------------------------------------------------------------
    async def put_scheduled_action(self, p: dict[str, Any]) -> dict[str, Any]:
        key = _key(p)
        name = p.get("ScheduledActionName") or ""
        self._target(key)
        old = self.repo.get_scheduled_action(key, name) or {}
        schedule = p.get("Schedule") or old.get("Schedule")
        if not schedule:
            raise _validation("Schedule is required to create a scheduled action.")
        timezone = p.get("Timezone") or old.get("Timezone") or "UTC"
        try:
            parse_schedule(schedule, timezone)
        except ScheduleError as exc:
            raise _validation(str(exc)) from None
        action = {**(old.get("ScalableTargetAction") or {}), **(p.get("ScalableTargetAction") or {})}
        lo, hi = action.get("MinCapacity"), action.get("MaxCapacity")
        if lo is None and hi is None:
            raise _validation("ScalableTargetAction needs MinCapacity, MaxCapacity or both.")
        if lo is not None:
            self._check_min(lo, key[1])
        if lo is not None and hi is not None and lo > hi:
            raise _validation(f"Minimum capacity {lo} cannot be greater than maximum capacity {hi}.")
        start = optional_epoch(p.get("StartTime")) if "StartTime" in p else old.get("StartTime")
        end = optional_epoch(p.get("EndTime")) if "EndTime" in p else old.get("EndTime")
        if start is not None and end is not None and start >= end:
            raise _validation("StartTime must be before EndTime.")
        action_id = old["ScheduledActionARN"].split(":")[6] if old else str(uuid.uuid4())
        now = self.clock()
        doc = {
            "ScheduledActionName": name,
            "ScheduledActionARN": self._arn(
                "autoscaling", f"scheduledAction:{action_id}:resource/{key[0]}/{key[1]}:scheduledActionName/{name}"
            ),
            "ServiceNamespace": key[0],
            "Schedule": schedule,
            "Timezone": timezone,
            "ResourceId": key[1],
            "ScalableDimension": key[2],
            "StartTime": start,
            "EndTime": end,
            "ScalableTargetAction": action,
            "CreationTime": old.get("CreationTime", now),
            # when the schedule last changed: a rate() without StartTime counts from here, and fires before it
            # are not this definition's
            "ServekitUpdated": now,
        }
        self.repo.put_scheduled_action(key, name, doc)
        return {}

    async def describe_scheduled_actions(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("ServiceNamespace") != NAMESPACE:
            return {"ScheduledActions": []}
        docs = self.repo.scheduled_actions(
            NAMESPACE, p.get("ResourceId"), p.get("ScalableDimension"), p.get("ScheduledActionNames") or ()
        )
        out = []
        for d in docs:
            item = {k: v for k, v in d.items() if not k.startswith("Servekit") and v is not None}
            for field in ("StartTime", "EndTime", "CreationTime"):
                if d.get(field) is not None:
                    item[field] = _dt(d[field])
            out.append(item)
        return {"ScheduledActions": out}

    async def delete_scheduled_action(self, p: dict[str, Any]) -> dict[str, Any]:
        key = _key(p)
        name = p.get("ScheduledActionName") or ""
        if not self.repo.delete_scheduled_action(key, name):
            raise _not_found(f"No scheduled action found for service namespace: {key[0]}, resource ID: {key[1]}, "
                             f"scalable dimension: {key[2]}, scheduled action name: {name}")  # fmt: skip
        return {}

    async def delete_scaling_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        key = _key(p)
        name = p.get("PolicyName") or ""
        if not self.repo.delete_policy(key, name):
            raise _not_found(f"No scaling policy found for service namespace: {key[0]}, resource ID: {key[1]}, "
                             f"scalable dimension: {key[2]}, policy name: {name}")  # fmt: skip
        return {}

    async def describe_scaling_activities(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("ServiceNamespace") != NAMESPACE:
            return {"ScalingActivities": []}
        docs = self.repo.activities(NAMESPACE, p.get("ResourceId"), p.get("ScalableDimension"))
        out = []
        for d in docs:
            if d.get("NotScaledReasons") and not p.get("IncludeNotScaledActivities"):
                continue
            item = {k: v for k, v in d.items() if not k.startswith("Servekit") and v is not None}
            item["StartTime"] = _dt(d["StartTime"])
            if d.get("EndTime") is not None:
                item["EndTime"] = _dt(d["EndTime"])
            out.append(item)
        return {"ScalingActivities": out}
