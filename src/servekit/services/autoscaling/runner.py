"""The autoscaler that runs: each tick, every registered scalable target's policies and scheduled actions decide
its variant's instance count, and a change goes through UpdateEndpointWeightsAndCapacities, recorded as an
Application Auto Scaling activity in SageMaker's words (``shared/reference/anchors-hosting.md`` §4).

One tick, per target (endpoint variant):

1. An activity still under way is followed first: while the endpoint is Updating nothing else happens (AAS
   waits for the target); once it is InService the activity ends ``Successful`` if the variant has the count
   serving, ``Failed`` with the reason otherwise.
2. Scheduled actions that fired since the last tick set the target's Min/Max (unless
   ``ScheduledScalingSuspended``).
3. A count outside [Min, Max] moves to the nearer bound at once, cooldowns or not.
4. Otherwise each target-tracking policy decides on its metric
(:func:`servekit.services.autoscaling.target_tracking.decide`) and
   each step policy whose alarm ran since the last tick decides on the alarm's value
   (:func:`servekit.services.autoscaling.step.step_run`). As AAS combines policies: any may scale out and the largest
   count wins; a scale-in happens only when every target-tracking policy with scale-in enabled wants one, to the
   largest count asked. ``DynamicScalingOutSuspended``/``DynamicScalingInSuspended`` stop either direction.

Target tracking acts only once a complete period started after the last change ended, since
``InvocationsPerInstance`` measured before it describes the old fleet. Cooldowns start when an activity
completes and are kept in the state (``Autoscaling.scaler_state``), so a restart
remembers them. Time (``clock``), the metric source and the endpoints are injected; :meth:`Autoscaler.tick` is
the whole decision and is what tests drive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from servekit._utils.background import BackgroundLoop
from servekit.aws.errors import ApiError
from servekit.services.autoscaling.api import NAMESPACE
from servekit.services.autoscaling.scheduled import ScheduleError, last_fire
from servekit.services.autoscaling.scheduled import parse as parse_schedule
from servekit.services.autoscaling.step import StepConfigError, StepPolicy, step_run
from servekit.services.autoscaling.store import Autoscaling, Key, Stored
from servekit.services.autoscaling.target_tracking import (
    PERIOD_S,
    Decision,
    TargetTrackingPolicy,
    decide,
    parse_resource_id,
)
from servekit.services.cloudwatch.alarms import AlarmAction
from servekit.services.cloudwatch.source import MetricSource

log = logging.getLogger(__name__)

ACTION_PREFIX = "arn:aws:autoscaling:"  # the policy ARNs alarms hand to the scaler
DEFAULT_TICK_S = 10.0
ALARM_OWNER = "application-autoscaling"  # the managed alarms' owner in the alarm service
_BUSY = ("Updating", "SystemUpdating", "RollingBack", "Creating")


class ManagedAlarms(Protocol):
    """Where the target-tracking policies' alarms are kept (``AlarmService`` is one)."""

    def sync_managed(self, owner: str, wanted: Mapping[str, Mapping[str, Any]]) -> None: ...


class Endpoints(Protocol):
    """What the scaler needs of the hosting service (``HostingService`` is one)."""

    async def describe_endpoint(self, p: dict[str, Any]) -> dict[str, Any]: ...

    async def update_endpoint_weights_and_capacities(self, p: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class _Want:
    desired: int
    cause: str
    kind: str  # "dynamic" (starts a cooldown), "step:<policy name>" or "bounds"


def success_message(count: int) -> str:
    return f"Successfully set desired instance count to {count}. Change successfully fulfilled by sagemaker."


class Autoscaler(BackgroundLoop):
    """The loop. ``period_s`` is the alarm period the target-tracking policies read (60, or the metrics store's
    resolution to compress time); ``tick_s`` how often it looks (an alarm's step action wakes it at once)."""

    def __init__(
        self,
        repo: Autoscaling,
        endpoints: Endpoints,
        source: MetricSource,
        clock: Callable[[], float] = time.time,
        period_s: int = PERIOD_S,
        tick_s: float = DEFAULT_TICK_S,
        alarms: ManagedAlarms | None = None,
    ) -> None:
        """``alarms``: where each target-tracking policy's AlarmHigh/AlarmLow are listed (None: nowhere)."""
        self.repo = repo
        self.alarms = alarms
        self.endpoints = endpoints
        self.source = source
        self.clock = clock
        self.period_s = period_s
        self.tick_s = tick_s
        self._triggers: dict[str, AlarmAction] = {}  # policy ARN -> the alarm's latest run of it
        self._wake = asyncio.Event()

    # ---- the alarm hook (AlarmService.action_handlers[ACTION_PREFIX]) ------------------------------------------
    def alarm_action(self, action: AlarmAction) -> None:
        """An alarm runs a step policy: remember it (the newest run per policy) and wake the loop."""
        self._triggers[action.action] = action
        self._wake.set()

    # ---- one tick ----------------------------------------------------------------------------------------------
    async def tick(self) -> None:
        now = self.clock()
        policies = self.repo.policies(NAMESPACE)
        arns = {d["PolicyARN"] for d in policies}
        for arn in [a for a in self._triggers if a not in arns]:
            log.info("alarm %s ran %s, which is no scaling policy", self._triggers.pop(arn).alarm_name, arn)
        self._sync_alarms(policies)
        for target in self.repo.targets(NAMESPACE):
            mine = [d for d in policies if d["ResourceId"] == target.key[1] and d["ScalableDimension"] == target.key[2]]
            try:
                await self._tick_target(target, mine, now)
            except Exception:
                log.exception("autoscaling %s failed", target.key[1])

    def _sync_alarms(self, policies: list[dict[str, Any]]) -> None:
        """Each target-tracking policy's two alarms exist (and no deleted policy's), as AAS keeps them."""
        wanted: dict[str, dict[str, Any]] = {}
        for p in policies:
            if p["PolicyType"] != "TargetTrackingScaling":
                continue
            self._triggers.pop(p["PolicyARN"], None)  # its alarms' actions: decide() reads the same window itself
            policy = self._tt_policy(p)
            if policy is not None:
                wanted.update(policy.alarm_definitions(p["PolicyARN"]))
        if self.alarms is not None:
            try:
                self.alarms.sync_managed(ALARM_OWNER, wanted)
            except Exception:
                log.exception("keeping the target-tracking alarms failed")

    def _tt_policy(self, p: dict[str, Any]) -> TargetTrackingPolicy | None:
        config = p["TargetTrackingScalingPolicyConfiguration"]
        try:
            return TargetTrackingPolicy(
                name=p["PolicyName"],
                resource_id=p["ResourceId"],
                target_value=float(config["TargetValue"]),
                policy_id=p["PolicyARN"].split(":")[6],
                scale_out_cooldown_s=float(config.get("ScaleOutCooldown", 300)),
                scale_in_cooldown_s=float(config.get("ScaleInCooldown", 300)),
                disable_scale_in=bool(config.get("DisableScaleIn", False)),
                period_s=self.period_s,
                custom=_custom_metric(config.get("CustomizedMetricSpecification")),
            )
        except ValueError:
            log.exception("policy %s cannot be evaluated", p["PolicyName"])
            return None

    async def _tick_target(self, target: Stored, policies: list[dict[str, Any]], now: float) -> None:
        key = target.key
        endpoint, variant = parse_resource_id(key[1])
        mem = self.repo.scaler_state(key)
        if mem.get("activity") and not await self._follow(key, mem, endpoint, variant, now):
            return  # the endpoint is still applying the last change
        doc, scheduled = self._run_schedules(target, mem, now)
        try:
            desc = await self.endpoints.describe_endpoint({"EndpointName": endpoint})
        except ApiError as exc:
            if exc.code == "ValidationException" and "Could not find endpoint" in exc.message:
                # SageMaker's DeleteEndpoint deregisters its variants' scalable targets silently
                log.info("endpoint %s is gone: deregistering scalable target %s", endpoint, key[1])
                self.repo.delete_target(key)
                return
            raise
        if desc["EndpointStatus"] != "InService":
            return  # creating, updating or broken: AAS waits for the resource
        found = [v for v in desc.get("ProductionVariants") or [] if v["VariantName"] == variant]
        if not found:
            log.warning("scalable target %s: endpoint %s has no variant %s", key[1], endpoint, variant)
            return
        current = int(found[0].get("DesiredInstanceCount", found[0].get("CurrentInstanceCount", 0)))
        lo, hi = int(doc["MinCapacity"]), int(doc["MaxCapacity"])
        want = self._bounds(current, lo, hi, scheduled)
        if want is None:
            want = self._dynamic(key, doc, policies, mem, current, lo, hi, now)
        if want is not None:
            await self._apply(key, endpoint, variant, current, want, mem, now)
        else:
            self.repo.put_scaler_state(key, mem)

    @staticmethod
    def _bounds(current: int, lo: int, hi: int, scheduled: str | None) -> _Want | None:
        """A count outside [Min, Max] moves to the nearer bound (the wording of this Cause is servekit's)."""
        if current < lo:
            return _Want(lo, scheduled or f"minimum capacity was set to {lo}", "bounds")
        if current > hi:
            return _Want(hi, scheduled or f"maximum capacity was set to {hi}", "bounds")
        return None

    # ---- dynamic scaling ---------------------------------------------------------------------------------------
    def _dynamic(
        self,
        key: Key,
        doc: dict[str, Any],
        policies: list[dict[str, Any]],
        mem: dict[str, Any],
        current: int,
        lo: int,
        hi: int,
        now: float,
    ) -> _Want | None:
        suspended = doc.get("SuspendedState") or {}
        out: list[_Want] = []
        ins: list[_Want] = []
        blocks_in = False  # a target-tracking policy with scale-in enabled that does not want to scale in
        for p in policies:
            if p["PolicyType"] == "TargetTrackingScaling":
                decision = self._target_tracking(p, current, lo, hi, mem, now)
                if decision is None:
                    blocks_in = True
                    continue
                scale_in_enabled = not p["TargetTrackingScalingPolicyConfiguration"].get("DisableScaleIn", False)
                if decision.scaled and decision.desired > current:
                    out.append(_Want(decision.desired, decision.cause, "dynamic"))
                elif decision.scaled and decision.desired < current:
                    ins.append(_Want(decision.desired, decision.cause, "dynamic"))
                elif scale_in_enabled:
                    blocks_in = True
                self._not_scaled(key, mem, decision, now)
            elif p["PolicyType"] == "StepScaling":
                want = self._step(p, current, lo, hi, mem, now)
                if want is not None:
                    (out if want.desired > current else ins).append(want)
        if out and not suspended.get("DynamicScalingOutSuspended"):
            return max(out, key=lambda w: w.desired)
        if ins and not blocks_in and not suspended.get("DynamicScalingInSuspended"):
            return max(ins, key=lambda w: w.desired)
        return None

    def _target_tracking(
        self, p: dict[str, Any], current: int, lo: int, hi: int, mem: dict[str, Any], now: float
    ) -> Decision | None:
        policy = self._tt_policy(p)
        if policy is None:
            return None
        start, end = policy.window(now)
        points = policy.per_minute(self.source.datapoints(policy.query(), start, end))
        changed = mem.get("last_change")
        if changed is not None and not any(t >= changed for t, _ in points):
            # Every point predates the last change: InvocationsPerInstance measured the old fleet, and sizing the
            # new one from it would overshoot (a CloudWatch alarm, too, acts only on a new datapoint).
            return None
        return decide(policy, points, current, lo, hi, mem.get("last_scale_out"), mem.get("last_scale_in"), now)

    def _step(self, p: dict[str, Any], current: int, lo: int, hi: int, mem: dict[str, Any], now: float) -> _Want | None:
        trigger = self._triggers.pop(p["PolicyARN"], None)
        if trigger is None:
            return None
        try:
            policy = StepPolicy.from_config(p["PolicyName"], p["StepScalingPolicyConfiguration"])
        except StepConfigError:
            log.exception("step policy %s cannot be run", p["PolicyName"])
            return None
        # No datapoints (SetAlarmState): the value is taken as the threshold itself, i.e. offset 0.
        value = policy.metric_value(trigger.datapoints)
        offset = 0.0 if value is None else value - trigger.threshold
        last = (mem.get("steps") or {}).get(policy.name) or {}
        d = step_run(
            policy, offset, current, lo, hi, last.get("at"), last.get("base"), last.get("desired"), now
        )  # fmt: skip
        if d.desired is None or d.desired == current:
            log.debug("step policy %s: %s", policy.name, d.why)
            return None
        cause = f"monitor alarm {trigger.alarm_name} in state {trigger.state} triggered policy {policy.name}"
        return _Want(d.desired, cause, f"step:{policy.name}")

    def _not_scaled(self, key: Key, mem: dict[str, Any], decision: Decision, now: float) -> None:
        """An alarm fired but nothing changed: one not-scaled activity per reason in a row (AAS lists them only
        with IncludeNotScaledActivities)."""
        reason = decision.not_scaled_reason
        if not reason or mem.get("not_scaled") == reason:
            if not reason:
                mem.pop("not_scaled", None)
            return
        mem["not_scaled"] = reason
        activity_id = str(uuid.uuid4())
        self.repo.add_activity(key, activity_id, {
            **self._activity_base(key, activity_id, now),
            "Description": "Attempting to scale due to alarm triggered",
            "Cause": decision.cause,
            "StatusCode": "Failed",
            "StatusMessage": decision.cause,
            "EndTime": now,
            "NotScaledReasons": [{"Code": reason, "CurrentCapacity": decision.desired}],
        })  # fmt: skip

    # ---- scheduled actions -------------------------------------------------------------------------------------
    def _run_schedules(self, target: Stored, mem: dict[str, Any], now: float) -> tuple[dict[str, Any], str | None]:
        """Apply the scheduled actions that fired in (last check, now]; the target's document after them and
        the Cause naming the last one (None when none fired)."""
        key, doc = target.key, dict(target.document)
        checked = mem.get("scheduled_checked")
        mem["scheduled_checked"] = now
        if (doc.get("SuspendedState") or {}).get("ScheduledScalingSuspended"):
            return doc, None
        fired: list[tuple[float, dict[str, Any]]] = []
        for action in self.repo.scheduled_actions(key[0], key[1], key[2]):
            updated = float(action.get("ServekitUpdated") or action["CreationTime"])
            after = updated if checked is None else max(checked, updated)
            try:
                schedule = parse_schedule(action["Schedule"], action.get("Timezone"))
            except ScheduleError:
                log.exception("scheduled action %s cannot be run", action["ScheduledActionName"])
                continue
            at = last_fire(schedule, after, now, action.get("StartTime"), action.get("EndTime"), created=updated)
            if at is not None:
                fired.append((at, action))
        cause = None
        for _, action in sorted(fired, key=lambda f: f[0]):
            new_lo, new_hi = _new_bounds(doc, action.get("ScalableTargetAction") or {})
            doc = {**doc, "MinCapacity": new_lo, "MaxCapacity": new_hi}
            self.repo.put_target(key, doc)
            cause = f"scheduled action name {action['ScheduledActionName']} was triggered"
            activity_id = str(uuid.uuid4())
            self.repo.add_activity(key, activity_id, {
                **self._activity_base(key, activity_id, now),
                "Description": f"Setting min capacity to {new_lo} and max capacity to {new_hi}",
                "Cause": cause,
                "StatusCode": "Successful",
                "StatusMessage": f"Successfully set min capacity to {new_lo} and max capacity to {new_hi}",
                "EndTime": now,
            })  # fmt: skip
        return doc, cause

    # ---- applying and following a change -----------------------------------------------------------------------
    @staticmethod
    def _activity_base(key: Key, activity_id: str, now: float) -> dict[str, Any]:
        return {
            "ActivityId": activity_id,
            "ServiceNamespace": key[0],
            "ResourceId": key[1],
            "ScalableDimension": key[2],
            "StartTime": now,
        }

    async def _apply(
        self, key: Key, endpoint: str, variant: str, current: int, want: _Want, mem: dict[str, Any], now: float
    ) -> None:
        activity_id = str(uuid.uuid4())
        doc: dict[str, Any] = {
            **self._activity_base(key, activity_id, now),
            "Description": f"Setting desired instance count to {want.desired}.",
            "Cause": want.cause,
            "StatusCode": "Pending",
        }
        self.repo.add_activity(key, activity_id, doc)
        mem.pop("not_scaled", None)
        try:
            await self.endpoints.update_endpoint_weights_and_capacities({
                "EndpointName": endpoint,
                "DesiredWeightsAndCapacities": [{"VariantName": variant, "DesiredInstanceCount": want.desired}],
            })  # fmt: skip
        except ApiError as exc:
            doc.update(
                StatusCode="Failed",
                StatusMessage=f"Failed to set desired instance count to {want.desired}. Reason: {exc.message}",
                EndTime=self.clock(),
            )
            self.repo.update_activity(activity_id, doc)
            self.repo.put_scaler_state(key, mem)
            return
        doc["StatusCode"] = "InProgress"
        self.repo.update_activity(activity_id, doc)
        direction = "out" if want.desired > current else "in"
        mem["activity"] = {"id": activity_id, "desired": want.desired, "kind": want.kind, "direction": direction}
        if want.kind.startswith("step:"):
            steps = mem.setdefault("steps", {})
            steps[want.kind.removeprefix("step:")] = {"at": now, "base": current, "desired": want.desired}
        self.repo.put_scaler_state(key, mem)
        log.info("autoscaling %s: %s -> %s (%s)", key[1], current, want.desired, want.cause)

    async def _follow(self, key: Key, mem: dict[str, Any], endpoint: str, variant: str, now: float) -> bool:
        """Settle the activity under way once the endpoint is done with it; False while it is still updating."""
        act = mem["activity"]
        want = int(act["desired"])
        try:
            desc: dict[str, Any] | None = await self.endpoints.describe_endpoint({"EndpointName": endpoint})
        except ApiError as exc:
            if exc.code != "ValidationException":
                raise
            desc = None
        if desc is not None and desc["EndpointStatus"] in _BUSY:
            return False
        failed = f"Failed to set desired instance count to {want}. Reason: "
        if desc is None:
            status, message = "Failed", failed + f"endpoint {endpoint} no longer exists."
        elif desc["EndpointStatus"] != "InService":
            why = desc.get("FailureReason") or "no reason given"
            status, message = "Failed", failed + f"endpoint {endpoint} is {desc['EndpointStatus']}: {why}"
        else:
            found = [v for v in desc.get("ProductionVariants") or [] if v["VariantName"] == variant]
            serving = int(found[0].get("CurrentInstanceCount", 0)) if found else 0
            asked = int(found[0].get("DesiredInstanceCount", 0)) if found else 0
            if serving == want and asked == want:
                status, message = "Successful", success_message(want)
            else:
                status, message = (
                    "Failed",
                    failed
                    + (
                        f"variant {variant} has {serving} instance(s) serving with a desired count of {asked} "
                        f"(servekit up's log says why an instance did not start)."
                    ),
                )
        doc = self.repo.get_activity(act["id"])
        if doc is not None:
            doc.update(StatusCode=status, StatusMessage=message, EndTime=now)
            self.repo.update_activity(act["id"], doc)
        if act.get("kind") != "bounds":  # cooldowns run from when a dynamic activity completes
            mem["last_scale_out" if act.get("direction") == "out" else "last_scale_in"] = now
        mem["last_change"] = now
        del mem["activity"]
        self.repo.put_scaler_state(key, mem)
        return True

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("autoscaling tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.tick_s)
            self._wake.clear()


def _new_bounds(doc: dict[str, Any], action: dict[str, Any]) -> tuple[int, int]:
    """The Min/Max a scheduled action leaves: what it sets, the rest kept; a bound it does not set moves with the
    one it sets when they would cross."""
    lo = int(action.get("MinCapacity", doc["MinCapacity"]))
    hi = int(action.get("MaxCapacity", doc["MaxCapacity"]))
    if lo > hi:
        if "MaxCapacity" not in action:
            hi = lo
        else:
            lo = hi
    return lo, hi


def _custom_metric(spec: Mapping[str, Any] | None) -> tuple[str, str, tuple[tuple[str, str], ...], str] | None:
    """A CustomizedMetricSpecification as the policy's (namespace, metric, dimensions, statistic)."""
    if not spec:
        return None
    dims = tuple((str(d["Name"]), str(d["Value"])) for d in spec.get("Dimensions") or [])
    return str(spec["Namespace"]), str(spec["MetricName"]), dims, str(spec["Statistic"])
